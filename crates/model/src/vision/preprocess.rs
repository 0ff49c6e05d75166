//! An image's pixels as a tower reads them, made as llama.cpp's mtmd makes them: resized
//! with Pillow's separable filters in 8-bit fixed point (`mtmd-image.cpp`), padded to the
//! tower's square keeping the aspect ratio, scaled to `[0, 1]`, normalized per channel, and
//! cut into patches.

/// Decoded 8-bit RGB pixels, row by row.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rgb {
    pub width: usize,
    pub height: usize,
    /// `[height, width, 3]`.
    pub data: Vec<u8>,
}

/// Pillow's resampling filters.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Filter {
    Bilinear,
    Bicubic,
    Lanczos,
}

impl Filter {
    fn support(self) -> f64 {
        match self {
            Filter::Bilinear => 1.0,
            Filter::Bicubic => 2.0,
            Filter::Lanczos => 3.0,
        }
    }

    fn weight(self, x: f64) -> f64 {
        let sinc = |v: f64| {
            if v == 0.0 {
                1.0
            } else {
                (v * std::f64::consts::PI).sin() / (v * std::f64::consts::PI)
            }
        };
        match self {
            Filter::Lanczos if (-3.0..3.0).contains(&x) => sinc(x) * sinc(x / 3.0),
            Filter::Lanczos => 0.0,
            Filter::Bilinear => (1.0 - x.abs()).max(0.0),
            Filter::Bicubic => {
                const A: f64 = -0.5;
                let x = x.abs();
                if x < 1.0 {
                    ((A + 2.0) * x - (A + 3.0)) * x * x + 1.0
                } else if x < 2.0 {
                    (((x - 5.0) * x + 8.0) * x - 4.0) * A
                } else {
                    0.0
                }
            }
        }
    }
}

const PRECISION_BITS: u32 = 22;

/// Per output pixel of one axis: the first input pixel, and the fixed-point weights of the
/// input pixels from there.
fn axis_weights(in_size: usize, out_size: usize, filter: Filter) -> Vec<(usize, Vec<i32>)> {
    let scale = in_size as f64 / out_size as f64;
    let filterscale = scale.max(1.0);
    let support = filter.support() * filterscale;
    let one = (1u64 << PRECISION_BITS) as f64;
    (0..out_size)
        .map(|xx| {
            let center = (xx as f64 + 0.5) * scale;
            let xmin = ((center - support + 0.5) as i64).max(0) as usize;
            let xmax = ((center + support + 0.5) as i64).min(in_size as i64) as usize;
            let w: Vec<f64> = (xmin..xmax)
                .map(|x| filter.weight((x as f64 - center + 0.5) / filterscale))
                .collect();
            let sum: f64 = w.iter().sum();
            let fixed = w
                .iter()
                .map(|&v| {
                    let v = if sum != 0.0 { v / sum } else { v };
                    (v * one + if v < 0.0 { -0.5 } else { 0.5 }) as i32
                })
                .collect();
            (xmin, fixed)
        })
        .collect()
}

fn clip8(v: i32) -> u8 {
    (v >> PRECISION_BITS).clamp(0, 255) as u8
}

/// `img` resized to `width × height` by `filter`, horizontally then vertically, each pass
/// only where that axis changes.
pub fn resize(img: &Rgb, width: usize, height: usize, filter: Filter) -> Rgb {
    let bias = 1i32 << (PRECISION_BITS - 1);
    let mut cur = img.clone();
    if width != cur.width {
        let ws = axis_weights(cur.width, width, filter);
        let mut data = vec![0u8; width * cur.height * 3];
        for y in 0..cur.height {
            let src = &cur.data[y * cur.width * 3..][..cur.width * 3];
            for (xx, (xmin, k)) in ws.iter().enumerate() {
                let mut acc = [bias; 3];
                for (i, &w) in k.iter().enumerate() {
                    for c in 0..3 {
                        acc[c] += src[(xmin + i) * 3 + c] as i32 * w;
                    }
                }
                for c in 0..3 {
                    data[(y * width + xx) * 3 + c] = clip8(acc[c]);
                }
            }
        }
        cur = Rgb {
            width,
            height: cur.height,
            data,
        };
    }
    if height != cur.height {
        let ws = axis_weights(cur.height, height, filter);
        let row = cur.width * 3;
        let mut data = vec![0u8; row * height];
        for (yy, (ymin, k)) in ws.iter().enumerate() {
            let mut acc = vec![bias; row];
            for (i, &w) in k.iter().enumerate() {
                let src = &cur.data[(ymin + i) * row..][..row];
                acc.iter_mut()
                    .zip(src)
                    .for_each(|(a, &s)| *a += s as i32 * w);
            }
            data[yy * row..][..row]
                .iter_mut()
                .zip(&acc)
                .for_each(|(d, &a)| *d = clip8(a));
        }
        cur = Rgb {
            width: cur.width,
            height,
            data,
        };
    }
    cur
}

/// `img` fitted into a `width × height` frame of `pad` (mtmd's `PAD_CEIL`): scaled by the
/// smaller of the two ratios (each edge rounded up, at most the frame's), centered (offsets
/// rounded down). The same image when it is already that size.
pub fn fit(img: &Rgb, (width, height): (usize, usize), filter: Filter, pad: [u8; 3]) -> Rgb {
    if img.width == width && img.height == height {
        return img.clone();
    }
    let scale = (width as f32 / img.width as f32).min(height as f32 / img.height as f32);
    let w = ((img.width as f32 * scale).ceil() as usize).min(width);
    let h = ((img.height as f32 * scale).ceil() as usize).min(height);
    let inner = resize(img, w, h, filter);
    let (ox, oy) = ((width - w) / 2, (height - h) / 2);
    let mut data = pad.repeat(width * height);
    for y in 0..h {
        data[((oy + y) * width + ox) * 3..][..w * 3]
            .copy_from_slice(&inner.data[y * w * 3..][..w * 3]);
    }
    Rgb {
        width,
        height,
        data,
    }
}

/// The `w × h` pixels of `img` from `(x, y)` (inside it).
pub fn crop(img: &Rgb, x: usize, y: usize, w: usize, h: usize) -> Rgb {
    assert!(
        x + w <= img.width && y + h <= img.height,
        "a crop inside the image"
    );
    let data = (y..y + h)
        .flat_map(|r| &img.data[(r * img.width + x) * 3..][..w * 3])
        .copied()
        .collect();
    Rgb {
        width: w,
        height: h,
        data,
    }
}

/// A square image of `side` pixels as `[n_patches, 3 · patch²]`: patch `py · (side / patch)
/// + px`, each row its channels, then rows, then columns (a convolution kernel's order),
/// every value `(v / 255 - mean[c]) / std[c]`.
pub fn patches(img: &Rgb, patch: usize, mean: [f32; 3], std: [f32; 3]) -> Vec<f32> {
    let side = img.width;
    let per_side = side / patch;
    let mut out = Vec::with_capacity(side * side * 3);
    for py in 0..per_side {
        for px in 0..per_side {
            for c in 0..3 {
                for ky in 0..patch {
                    for kx in 0..patch {
                        let (y, x) = (py * patch + ky, px * patch + kx);
                        let v = img.data[(y * side + x) * 3 + c] as f32 / 255.0;
                        out.push((v - mean[c]) / std[c]);
                    }
                }
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gradient(width: usize, height: usize) -> Rgb {
        let data = (0..height)
            .flat_map(|y| {
                (0..width).flat_map(move |x| {
                    [
                        (x * 7 % 256) as u8,
                        (y * 5 % 256) as u8,
                        ((x + y) % 256) as u8,
                    ]
                })
            })
            .collect();
        Rgb {
            width,
            height,
            data,
        }
    }

    #[test]
    fn a_constant_image_stays_constant_through_every_filter() {
        let img = Rgb {
            width: 37,
            height: 23,
            data: [200u8, 10, 99].repeat(37 * 23),
        };
        for f in [Filter::Bilinear, Filter::Bicubic, Filter::Lanczos] {
            for (w, h) in [(64, 64), (10, 31), (37, 5)] {
                let out = resize(&img, w, h, f);
                assert_eq!(out.data, [200u8, 10, 99].repeat(w * h), "{f:?} to {w}x{h}");
            }
        }
    }

    #[test]
    fn halving_by_bilinear_widens_the_triangle_to_two_input_pixels() {
        let img = gradient(8, 2);
        let out = resize(&img, 4, 2, Filter::Bilinear);
        let r = |x: usize| img.data[x * 3] as f64;
        // Output pixel 0 is centered at input 1.0 and sees inputs 0, 1, 2 at distances
        // 0.25, 0.25, 0.75 (in units of two input pixels): weights 3 : 3 : 1.
        let want = (3.0 * r(0) + 3.0 * r(1) + r(2)) / 7.0;
        assert_eq!(out.data[0] as f64, want.round());
        // Pixel 1, at input 3.0, sees inputs 1 to 4: weights 1 : 3 : 3 : 1.
        let want = (r(1) + 3.0 * r(2) + 3.0 * r(3) + r(4)) / 8.0;
        assert_eq!(out.data[3] as f64, want.round());
    }

    #[test]
    fn a_wide_image_is_centered_between_black_bands() {
        let img = Rgb {
            width: 40,
            height: 20,
            data: vec![255; 40 * 20 * 3],
        };
        let sq = fit(&img, (16, 16), Filter::Bilinear, [0; 3]);
        let at = |x: usize, y: usize| sq.data[(y * 16 + x) * 3];
        assert_eq!(
            (at(5, 0), at(5, 3), at(5, 4), at(5, 11), at(5, 12)),
            (0, 0, 255, 255, 0)
        );
    }

    #[test]
    fn patches_follow_the_kernel_order() {
        let img = gradient(4, 4);
        let p = patches(&img, 2, [0.0; 3], [1.0; 3]);
        assert_eq!(p.len(), 4 * 12);
        let px = |x: usize, y: usize, c: usize| img.data[(y * 4 + x) * 3 + c] as f32 / 255.0;
        // Patch 1 is the top right one; its row is channel 0's 2 × 2, then channel 1's.
        assert_eq!(
            &p[12..16],
            &[px(2, 0, 0), px(3, 0, 0), px(2, 1, 0), px(3, 1, 0)]
        );
        assert_eq!(p[16], px(2, 0, 1));
    }
}
