//! How an image enters a prompt, as llama.cpp's mtmd places it: the tiles the tower
//! encodes, and the text and embeddings in prompt order.
//!
//! ```text
//! gemma3:   "<start_of_image>" tile "<end_of_image>"
//! mlp:      tile (1.5, or 1.6's image within a tile: stretched to it)
//!           1.6: the tiles of the best pinpoint, row by row, then the overview
//! idefics3: per row of the grid: per column "<fake_token_around_image><row_R_col_C>" tile;
//!           "\n" between rows; then "\n\n" "<fake_token_around_image>" "<global-img>"
//!           overview "<fake_token_around_image>"  (the last four tokens looked up one by one)
//! ```

use super::preprocess::{self, Filter, Rgb};
use super::{ClipParams, Projector};

/// A part of an image's place in a prompt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Piece {
    /// Text, tokenized with its special tokens.
    Text(String),
    /// The vocabulary's token whose text is exactly this (llama.cpp's `lookup_token`).
    Token(&'static str),
    /// The embeddings of tile `i` ([`ClipParams::tiles`]).
    Tile(usize),
}

/// The tokens Idefics3 looks up by their text.
const IDEFICS3_TOKENS: [&str; 4] = ["\n", "\n\n", "<fake_token_around_image>", "<global-img>"];

/// An image of Idefics3's: the grid of tiles it is made, and, without token limits, the
/// size it is first resized to (its longer edge the tower's `longest_edge`, the other even)
/// before it is stretched over the grid; with limits (`--image-min/max-tokens`) it is fitted
/// into the grid keeping its aspect (mtmd's LLaVA-UHD branch).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Grid {
    resized: Option<(usize, usize)>,
    cols: usize,
    rows: usize,
}

impl Grid {
    /// The other edge is at least 2 pixels (llama.cpp's would be 0 for an image over
    /// `longest_edge` times wider than tall, and it fails).
    fn of(c: &ClipParams, width: usize, height: usize) -> Grid {
        if c.min_pixels > 0 || c.max_pixels > 0 || c.longest_edge == 0 {
            return Grid::limited(c, width, height);
        }
        let edge = c.longest_edge;
        let aspect = width as f64 / height as f64;
        let even = |v: f64| {
            let v = v as usize;
            (v + v % 2).max(2)
        };
        let resized = match width >= height {
            true => (edge, even(edge as f64 / aspect)),
            false => (even(edge as f64 * aspect), edge),
        };
        let tile = c.image_size;
        Grid {
            resized: Some(resized),
            cols: resized.0.div_ceil(tile),
            rows: resized.1.div_ceil(tile),
        }
    }

    /// mtmd's `calc_size_preserved_ratio` aligned to whole tiles (in f32 as it computes):
    /// scaled to the longest edge and rounded up to tiles (without one, its own size rounded
    /// to the nearest tiles, at least one); then, past `max_pixels`, scaled down to it
    /// (rounded down, at least a tile), or short of `min_pixels`, up to it (rounded up).
    fn limited(c: &ClipParams, width: usize, height: usize) -> Grid {
        let tile = c.image_size;
        let (w, h, t) = (width as f32, height as f32, tile as f32);
        let up = |x: f32| (x / t).ceil() as usize * tile;
        let down = |x: f32| ((x / t).floor() as usize * tile).max(tile);
        let nearest = |x: f32| ((x / t).round() as usize * tile).max(tile);
        let (mut wb, mut hb) = match c.longest_edge {
            0 => (nearest(w), nearest(h)),
            edge => {
                let scale = (edge as f32 / w).min(edge as f32 / h);
                (up(w * scale), up(h * scale))
            }
        };
        if c.max_pixels > 0 && wb * hb > c.max_pixels {
            let beta = (h * w / c.max_pixels as f32).sqrt();
            (wb, hb) = (down(w / beta), down(h / beta));
        } else if c.min_pixels > 0 && wb * hb < c.min_pixels {
            let beta = (c.min_pixels as f32 / (h * w)).sqrt();
            (wb, hb) = (up(w * beta), up(h * beta));
        }
        Grid {
            resized: None,
            cols: wb / tile,
            rows: hb / tile,
        }
    }
}

/// LLaVA 1.6's pinpoint for an image `width × height` (mtmd's `select_best_resolution`):
/// the one that keeps the most of its pixels once it is fitted in, then the one that wastes
/// the least; the first of equals.
fn best_pinpoint(pinpoints: &[(usize, usize)], width: usize, height: usize) -> (usize, usize) {
    let (mut best, mut kept_most, mut wasted_least) = (pinpoints[0], 0, usize::MAX);
    for &(w, h) in pinpoints {
        let scale = (w as f32 / width as f32).min(h as f32 / height as f32);
        let fitted = (width as f32 * scale) as usize * (height as f32 * scale) as usize;
        let kept = fitted.min(width * height);
        let wasted = w * h - kept;
        if kept > kept_most || (kept == kept_most && wasted < wasted_least) {
            (best, kept_most, wasted_least) = ((w, h), kept, wasted);
        }
    }
    best
}

impl ClipParams {
    /// LLaVA 1.6's pinpoint for an image `width × height`, where it is cut into tiles (larger
    /// than a tile either way).
    fn pinpoint(&self, width: usize, height: usize) -> Option<(usize, usize)> {
        let tile = self.image_size;
        let larger = width > tile || height > tile;
        (larger && !self.pinpoints.is_empty())
            .then(|| best_pinpoint(&self.pinpoints, width, height))
    }

    /// Where an image `width × height` sits in a prompt.
    pub fn pieces(&self, width: usize, height: usize) -> Vec<Piece> {
        let text = |s: &str| Piece::Text(s.into());
        match self.projector {
            Projector::Gemma3 => vec![
                text("<start_of_image>"),
                Piece::Tile(0),
                text("<end_of_image>"),
            ],
            Projector::Mlp => match self.pinpoint(width, height) {
                None => vec![Piece::Tile(0)],
                Some((w, h)) => {
                    let n = (w / self.image_size) * (h / self.image_size);
                    (0..=n).map(Piece::Tile).collect()
                }
            },
            Projector::Idefics3 => {
                let g = Grid::of(self, width, height);
                let mut p = Vec::new();
                for y in 0..g.rows {
                    for x in 0..g.cols {
                        let at = format!("<fake_token_around_image><row_{}_col_{}>", y + 1, x + 1);
                        p.extend([Piece::Text(at), Piece::Tile(y * g.cols + x)]);
                    }
                    if y + 1 < g.rows {
                        p.push(Piece::Token("\n"));
                    }
                }
                let [_, blank, around, global] = IDEFICS3_TOKENS;
                p.extend([blank, around, global].map(Piece::Token));
                p.extend([Piece::Tile(g.rows * g.cols), Piece::Token(around)]);
                p
            }
        }
    }

    /// Every token [`Piece::Token`] may name: the language model's vocabulary must hold them.
    pub fn looked_up(&self) -> &'static [&'static str] {
        match self.projector {
            Projector::Idefics3 => &IDEFICS3_TOKENS,
            Projector::Gemma3 | Projector::Mlp => &[],
        }
    }

    /// `img`'s tiles as the tower reads them, each `[n_patches, 3 · patch²]`, in the order
    /// [`Piece::Tile`] numbers them.
    pub fn tiles(&self, img: &Rgb) -> Vec<Vec<f32>> {
        let pixels =
            |square: &Rgb| preprocess::patches(square, self.patch_size, self.mean, self.std);
        let side = self.image_size;
        let cut = |img: &Rgb, cols: usize, rows: usize| -> Vec<Vec<f32>> {
            (0..rows * cols)
                .map(|i| {
                    let (x, y) = (i % cols * side, i / cols * side);
                    pixels(&preprocess::crop(img, x, y, side, side))
                })
                .collect()
        };
        match self.projector {
            Projector::Mlp if !self.pinpoints.is_empty() => {
                let mut tiles = match self.pinpoint(img.width, img.height) {
                    Some((w, h)) => {
                        let refined = preprocess::fit(img, (w, h), self.filter, [0; 3]);
                        cut(&refined, w / side, h / side)
                    }
                    None => Vec::new(),
                };
                tiles.push(pixels(&preprocess::resize(img, side, side, self.filter)));
                tiles
            }
            Projector::Gemma3 | Projector::Mlp => {
                let square = preprocess::fit(img, (side, side), self.filter, self.pad);
                vec![pixels(&square)]
            }
            Projector::Idefics3 => {
                let g = Grid::of(self, img.width, img.height);
                let (w, h) = (g.cols * side, g.rows * side);
                let (refined, overview) = match g.resized {
                    Some((rw, rh)) => {
                        let resized = preprocess::resize(img, rw, rh, self.filter);
                        let refined = preprocess::resize(&resized, w, h, self.filter);
                        let overview = preprocess::resize(&refined, side, side, self.filter);
                        (refined, overview)
                    }
                    // mtmd's LLaVA-UHD defaults: bicubic, the refined image in black bands.
                    None => (
                        preprocess::fit(img, (w, h), Filter::Bicubic, [0; 3]),
                        preprocess::resize(img, side, side, Filter::Bicubic),
                    ),
                };
                let mut tiles = cut(&refined, g.cols, g.rows);
                tiles.push(pixels(&overview));
                tiles
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn idefics3(image_size: usize, longest_edge: usize) -> ClipParams {
        ClipParams {
            projector: Projector::Idefics3,
            n_embd: 8,
            n_head: 2,
            n_ff: 16,
            n_layer: 1,
            eps: 1e-6,
            image_size,
            patch_size: 16,
            mean: [0.5; 3],
            std: [0.5; 3],
            n_merge: 2,
            filter: Filter::Lanczos,
            pad: [0; 3],
            act: device::encoder::Act::Gelu,
            depth: 1,
            longest_edge,
            pinpoints: Vec::new(),
            min_pixels: 0,
            max_pixels: 0,
        }
    }

    #[test]
    fn a_wide_image_is_two_rows_of_tiles_and_an_overview() {
        // 150 × 100 to a longest edge of 256 is 256 × 170: two columns and two rows of
        // 128-pixel tiles.
        let c = idefics3(128, 256);
        assert_eq!(
            Grid::of(&c, 150, 100),
            Grid {
                resized: Some((256, 170)),
                cols: 2,
                rows: 2
            }
        );
        let p = c.pieces(150, 100);
        let text = |s: &str| Piece::Text(s.into());
        assert_eq!(
            p,
            vec![
                text("<fake_token_around_image><row_1_col_1>"),
                Piece::Tile(0),
                text("<fake_token_around_image><row_1_col_2>"),
                Piece::Tile(1),
                Piece::Token("\n"),
                text("<fake_token_around_image><row_2_col_1>"),
                Piece::Tile(2),
                text("<fake_token_around_image><row_2_col_2>"),
                Piece::Tile(3),
                Piece::Token("\n\n"),
                Piece::Token("<fake_token_around_image>"),
                Piece::Token("<global-img>"),
                Piece::Tile(4),
                Piece::Token("<fake_token_around_image>"),
            ]
        );
        // A tall one rounds its width up to even; an image of one row has no "\n".
        assert_eq!(Grid::of(&c, 33, 100).resized, Some((84, 256)));
        assert!(!c.pieces(300, 20).contains(&Piece::Token("\n")));
    }

    #[test]
    fn llava16_picks_the_pinpoint_that_keeps_the_most_pixels() {
        let pins = [(224, 112), (112, 224), (224, 224)];
        // 150 × 100 keeps all its 15000 pixels in 224 × 112 (168 × 112) and in 224 × 224, and
        // wastes less in the first.
        assert_eq!(best_pinpoint(&pins, 150, 100), (224, 112));
        assert_eq!(best_pinpoint(&pins, 100, 150), (112, 224));
        assert_eq!(best_pinpoint(&pins, 400, 390), (224, 224));
        let c = ClipParams {
            projector: Projector::Mlp,
            image_size: 112,
            patch_size: 14,
            pinpoints: pins.to_vec(),
            filter: Filter::Bicubic,
            ..idefics3(112, 0)
        };
        let tiles = |w, h| c.pieces(w, h).len();
        // Within a tile: the overview alone; larger: the pinpoint's tiles and the overview.
        assert_eq!(
            (tiles(100, 112), tiles(150, 100), tiles(400, 390)),
            (1, 3, 5)
        );
        let img = Rgb {
            width: 150,
            height: 100,
            data: (0..150 * 100 * 3).map(|i| (i * 13 % 253) as u8).collect(),
        };
        let got = c.tiles(&img);
        assert_eq!(got.len(), 3);
        let overview = preprocess::resize(&img, 112, 112, Filter::Bicubic);
        assert_eq!(
            got[2],
            preprocess::patches(&overview, 14, [0.5; 3], [0.5; 3])
        );
    }

    #[test]
    fn the_tiles_are_the_refined_image_cut_and_the_overview_last() {
        let c = idefics3(32, 64);
        let img = Rgb {
            width: 60,
            height: 30,
            data: (0..60 * 30 * 3).map(|i| (i * 7 % 251) as u8).collect(),
        };
        let tiles = c.tiles(&img);
        assert_eq!(tiles.len(), 2 + 1);
        let refined = preprocess::resize(
            &preprocess::resize(&img, 64, 32, Filter::Lanczos),
            64,
            32,
            Filter::Lanczos,
        );
        let right = preprocess::crop(&refined, 32, 0, 32, 32);
        assert_eq!(
            tiles[1],
            preprocess::patches(&right, 16, [0.5; 3], [0.5; 3])
        );
        let overview = preprocess::resize(&refined, 32, 32, Filter::Lanczos);
        assert_eq!(
            tiles[2],
            preprocess::patches(&overview, 16, [0.5; 3], [0.5; 3])
        );
    }
}
