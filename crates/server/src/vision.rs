//! Images in prompts (`--mmproj`): decoded at the edge within limits, encoded by the tower
//! on a thread and device of its own (the GPU's adapter with the model there, else the
//! CPU's threads), and placed in the prompt as the
//! projector says: the chat template renders a [`MARKER`] where a message had an image,
//! and each marker becomes the projector's pieces ([`model::vision::layout`]): texts,
//! looked-up tokens and the rows of the image's tiles.
//!
//! An image's rows carry placeholder tokens; the request's prefix-cache namespace is mixed
//! with a digest of every image's SHA-256 in order, so a cached prefix is reused only by a prompt with
//! the same images in the same places.

use std::collections::{HashMap, VecDeque};
use std::path::Path;
use std::sync::mpsc::{channel, Sender};
use std::sync::{Arc, Mutex};

use base64::Engine as _;
use engine::{GenRequest, PromptImage};
use gguf::GgufFile;
use model::vision::{decode, Limits, Piece, Projector, Rgb, Tower};
use sha2::{Digest, Sha256};
use text::Tokenizer;

use crate::error::ApiError;
use crate::prompts::OnePrompt;
use crate::state::Ready;

/// Where a rendered prompt had an image (llama.cpp's `mtmd_default_marker`).
pub const MARKER: &str = "<__media__>";

/// Images whose embeddings are kept, most recent first.
const CACHED: usize = 16;

/// An image's embeddings: per tile, `[n_tokens, n_embd]`.
type Tiles = Arc<[Arc<[f32]>]>;

/// Recent images' embeddings by their contents' SHA-256, most recent first.
type Recent = VecDeque<([u8; 32], Tiles)>;

/// An image of a request, decoded.
pub struct Picture {
    pub rgb: Rgb,
    pub sha: [u8; 32],
}

/// An image's tiles' pixels to encode, in order.
struct Job {
    tiles: Vec<Vec<f32>>,
    reply: Sender<Vec<Arc<[f32]>>>,
}

/// A loaded tower and the thread that runs it.
pub struct Vision {
    pub projector: Projector,
    /// Embeddings per tile (an image is one tile but for Idefics3's).
    pub n_tokens: usize,
    /// The device the tower encodes on, as it describes itself.
    pub device: String,
    params: model::vision::ClipParams,
    /// The ids of the tokens the projector looks up by their text.
    looked_up: HashMap<&'static str, u32>,
    jobs: Mutex<Sender<Job>>,
    cache: Mutex<Recent>,
    pub limits: Limits,
    /// `--image-urls allow`: http(s) image URLs are fetched ([`crate::image_fetch`]).
    pub fetch_urls: bool,
}

impl Vision {
    /// Loads the tower of `path` for a language model `n_embd` wide whose tokenizer is
    /// `tok`, on a device of its own beside the model's `device`
    /// ([`engine::DeviceKind::encoder`]; the CPU's of `threads` threads). Errors when the
    /// vocabulary lacks a token the projector places images with.
    pub fn start(
        path: &Path,
        (n_embd, tok): (usize, &Tokenizer),
        device: engine::DeviceKind,
        threads: usize,
    ) -> Result<Vision, String> {
        let what = |e: &dyn std::fmt::Display| format!("--mmproj {}: {e}", path.display());
        let file = Arc::new(GgufFile::open(path).map_err(|e| what(&e))?);
        let mut dev = device.encoder(threads).map_err(|e| what(&e))?;
        let tower = Tower::load(file, &mut *dev).map_err(|e| what(&e))?;
        if tower.n_embd_out != n_embd {
            return Err(what(&format!(
                "the tower's embeddings are {} wide, the model's {n_embd}",
                tower.n_embd_out
            )));
        }
        let params = tower.params.clone();
        let looked_up = params
            .looked_up()
            .iter()
            .map(|&t| match tok.lookup(t) {
                Some(id) => Ok((t, id)),
                None => Err(what(&format!(
                    "the {:?} projector places images with the token {t:?}, which the model's \
                     vocabulary lacks",
                    params.projector
                ))),
            })
            .collect::<Result<_, _>>()?;
        let device = dev.describe();
        let (tx, rx) = channel::<Job>();
        std::thread::Builder::new()
            .name("vision".into())
            .spawn(move || {
                for job in rx {
                    let tiles = job.tiles.iter();
                    let out = tiles.map(|t| tower.encode(&mut *dev, t).into()).collect();
                    let _ = job.reply.send(out);
                }
            })
            .map_err(|e| what(&e))?;
        Ok(Vision {
            projector: params.projector,
            n_tokens: params.n_tokens(),
            device,
            params,
            looked_up,
            jobs: Mutex::new(tx),
            cache: Mutex::new(VecDeque::new()),
            limits: Limits::default(),
            fetch_urls: false,
        })
    }

    /// `--image-min-tokens`/`--image-max-tokens` ([`model::vision::ClipParams::limit_tokens`]):
    /// false where the tower makes a fixed count.
    pub fn limit_tokens(&mut self, min: Option<usize>, max: Option<usize>) -> bool {
        self.params.limit_tokens(min, max)
    }

    /// `pic`'s tiles' embeddings, from the cache or the tower (blocking).
    fn embeddings(&self, pic: &Picture) -> Result<Tiles, ApiError> {
        let cached = |c: &Recent| {
            c.iter()
                .find(|(k, _)| *k == pic.sha)
                .map(|(_, e)| e.clone())
        };
        if let Some(e) = cached(&self.cache.lock().expect("cache")) {
            return Ok(e);
        }
        let (reply, rx) = channel();
        let tiles = self.params.tiles(&pic.rgb);
        let sent = self.jobs.lock().expect("jobs").send(Job { tiles, reply });
        let e: Tiles = sent
            .ok()
            .and_then(|()| rx.recv().ok())
            .ok_or_else(|| ApiError::bad_request("the vision tower stopped"))?
            .into();
        let mut c = self.cache.lock().expect("cache");
        c.push_front((pic.sha, e.clone()));
        c.truncate(CACHED);
        Ok(e)
    }
}

/// The image of an OpenAI `image_url` (`{"url": "data:image/png;base64,..."}` or the URL
/// alone), decoded: a data URL's, or with `--image-urls allow` an http(s) URL's, fetched;
/// a 400 naming `field` for anything else.
pub fn image_url(v: &serde_json::Value, field: &str, vision: &Vision) -> Result<Picture, ApiError> {
    let limits = &vision.limits;
    let url = match v {
        serde_json::Value::String(u) => u.as_str(),
        v => v
            .get("url")
            .and_then(|u| u.as_str())
            .ok_or_else(|| ApiError::invalid(field, format!("{field}: needs a string `url`")))?,
    };
    let web = url.starts_with("http://") || url.starts_with("https://");
    if web && vision.fetch_urls {
        let bytes = crate::image_fetch::fetch(url, limits.max_bytes)
            .map_err(|e| ApiError::invalid(field, format!("{field}: {e}")))?;
        return picture(&bytes, field, limits);
    }
    let Some(rest) = url.strip_prefix("data:") else {
        let why = match web {
            true => "http(s) image URLs are fetched only by a server started with --image-urls allow; send a data: URL",
            false => "only data: and, with --image-urls allow, http(s) URLs are read",
        };
        return Err(ApiError::invalid(field, format!("{field}: {why}")));
    };
    let (_, b64) = rest.split_once(";base64,").ok_or_else(|| {
        ApiError::invalid(
            field,
            format!("{field}: a data URL must be base64 (data:image/...;base64,...)"),
        )
    })?;
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(b64.trim())
        .map_err(|e| ApiError::invalid(field, format!("{field}: bad base64: {e}")))?;
    picture(&bytes, field, limits)
}

/// `bytes` decoded; a 400 naming `field` when they are not an image tandem reads.
pub fn picture(bytes: &[u8], field: &str, limits: &Limits) -> Result<Picture, ApiError> {
    let rgb =
        decode(bytes, limits).map_err(|e| ApiError::invalid(field, format!("{field}: {e}")))?;
    let mut h = Sha256::new();
    h.update((rgb.width as u64).to_le_bytes());
    h.update((rgb.height as u64).to_le_bytes());
    h.update(&rgb.data);
    Ok(Picture {
        rgb,
        sha: h.finalize().into(),
    })
}

/// A request's images, placed: their rows' embeddings, and a digest of their contents.
pub struct Pictured {
    images: Vec<PromptImage>,
    digest: u64,
}

impl Pictured {
    /// `req` with these images, its prefix-cache namespace mixed with their contents.
    pub fn attach(self, req: &mut GenRequest) {
        req.images = self.images;
        req.cache_namespace = crate::namespace_of(("images", req.cache_namespace, self.digest));
    }
}

/// `text` as a prompt: with `pictures`, its tokens ([`pictured_prompt`] on `ready`'s tower)
/// and the images; without, the text. Errors name `field`.
pub fn prompt(
    ready: &Ready,
    text: String,
    pictures: &[Picture],
    field: &str,
) -> Result<(OnePrompt, Option<Pictured>), ApiError> {
    match ready.vision.as_ref().filter(|_| !pictures.is_empty()) {
        None => Ok((OnePrompt::Text(text), None)),
        Some(v) => {
            let (ids, pictured) = pictured_prompt(v, &ready.tok, &text, pictures, field)?;
            Ok((OnePrompt::Tokens(ids), Some(pictured)))
        }
    }
}

/// A rendered prompt with [`MARKER`]s made tokens: the texts between markers tokenized
/// apart (special tokens added to the first only), each marker the projector's pieces for
/// that image, a tile's rows `n_tokens` placeholders (the pieces' first token, or token 0);
/// with the tiles (their embeddings from the tower, in order). Errors name `field`.
pub fn pictured_prompt(
    vision: &Vision,
    tok: &Tokenizer,
    text: &str,
    pictures: &[Picture],
    field: &str,
) -> Result<(Vec<u32>, Pictured), ApiError> {
    let pieces: Vec<&str> = text.split(MARKER).collect();
    if pieces.len() != pictures.len() + 1 {
        return Err(ApiError::invalid(
            field,
            format!(
                "{field}: the prompt has {} image markers ({MARKER}) for {} images",
                pieces.len() - 1,
                pictures.len()
            ),
        ));
    }
    let encode = |t: &str, first: bool| {
        tok.encode(t, first, true)
            .map_err(|e| ApiError::invalid(field, format!("{field}: cannot tokenize: {e}")))
    };
    let mut ids = encode(pieces[0], true)?;
    let mut images = Vec::with_capacity(pictures.len());
    let mut h = Sha256::new();
    for (pic, piece) in pictures.iter().zip(&pieces[1..]) {
        let tiles = vision.embeddings(pic)?;
        let start = ids.len();
        for p in vision.params.pieces(pic.rgb.width, pic.rgb.height) {
            match p {
                Piece::Text(t) => ids.extend(encode(&t, false)?),
                Piece::Token(t) => ids.push(vision.looked_up[t]),
                Piece::Tile(i) => {
                    images.push(PromptImage {
                        at: ids.len(),
                        n: vision.n_tokens,
                        embeddings: tiles[i].clone(),
                        bidirectional: vision.projector.bidirectional(),
                    });
                    // Never embedded: a row's token only names it among the prompt's.
                    let placeholder = ids.get(start).copied().unwrap_or(0);
                    ids.extend(std::iter::repeat_n(placeholder, vision.n_tokens));
                }
            }
        }
        ids.extend(encode(piece, false)?);
        h.update(pic.sha);
    }
    let digest = h.finalize();
    let digest = u64::from_le_bytes(digest[..8].try_into().expect("8 bytes"));
    Ok((ids, Pictured { images, digest }))
}
