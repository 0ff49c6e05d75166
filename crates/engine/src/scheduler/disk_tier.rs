//! The disk tier of the prefix cache (`--cache-dir`): each full block the host tier takes
//! is also written to a file of its own, named by its prefix key, under a folder named by
//! the model's and the pool's fingerprint, so that a restarted server reads a conversation
//! back instead of computing it. A file is trusted only whole: its magic, fingerprint,
//! key, parent key, tokens and length must be the ones asked for and its checksum must
//! hold; anything else is ignored (a stale, foreign or torn file costs a recomputation,
//! never a wrong answer).
//!
//! ```text
//! DIR/<fingerprint, 16 hex>/<key, 16 hex>.kvb:
//!   "TDKVBLK1" | fingerprint (32) | key u64 | parent u64 | tokens 16 × u32 | len u64 |
//!   the block's bytes | SHA-256 of everything before (32)
//! ```

use std::io::Write;
use std::path::{Path, PathBuf};

use kv::{KvConfig, BLOCK_SIZE};
use model::Model;
use sha2::{Digest, Sha256};

const MAGIC: &[u8; 8] = b"TDKVBLK1";

pub(super) struct DiskCache {
    dir: PathBuf,
    fingerprint: [u8; 32],
}

/// What makes two pools' blocks interchangeable: the model's metadata (its tokenizer
/// included), every tensor's name, shape, type and place, the first and last 256 bytes of
/// its data, and the pool's shape.
fn fingerprint(model: &Model, kv: &KvConfig) -> [u8; 32] {
    let file = &model.file;
    let mut h = Sha256::new();
    for (k, v) in file.header.metadata.iter() {
        h.update(format!("{k}={v:?};").as_bytes());
    }
    for t in &file.header.tensors {
        let info = format!("{}:{:?}:{}:{};", t.name, t.dims, t.ggml_type, t.offset);
        h.update(info.as_bytes());
        let data = file.tensor_bytes(t);
        h.update(&data[..data.len().min(256)]);
        h.update(&data[data.len().saturating_sub(256)..]);
    }
    h.update(format!("{:?}{:?}", model.stage.layers, kv).as_bytes());
    h.finalize().into()
}

impl DiskCache {
    /// The tier in `dir` for `model`'s pool shaped `kv` (its folder made if missing).
    pub(super) fn open(dir: &Path, model: &Model, kv: &KvConfig) -> std::io::Result<DiskCache> {
        let fingerprint = fingerprint(model, kv);
        let hex: String = fingerprint[..8]
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        let dir = dir.join(hex);
        std::fs::create_dir_all(&dir)?;
        Ok(DiskCache { dir, fingerprint })
    }

    fn path(&self, key: u64) -> PathBuf {
        self.dir.join(format!("{key:016x}.kvb"))
    }

    fn header(&self, key: u64, parent: u64, tokens: &[u32], len: usize) -> Vec<u8> {
        let mut b = Vec::with_capacity(8 + 32 + 16 + 4 * BLOCK_SIZE + 8);
        b.extend_from_slice(MAGIC);
        b.extend_from_slice(&self.fingerprint);
        b.extend_from_slice(&key.to_le_bytes());
        b.extend_from_slice(&parent.to_le_bytes());
        tokens
            .iter()
            .for_each(|t| b.extend_from_slice(&t.to_le_bytes()));
        b.extend_from_slice(&(len as u64).to_le_bytes());
        b
    }

    /// Whether a file for the block keyed `key` exists (it may not hold it).
    pub(super) fn has(&self, key: u64) -> bool {
        self.path(key).exists()
    }

    /// Writes the block keyed `key` unless its file exists: to a temporary file, then
    /// renamed into place. A failure is said once per block and otherwise ignored.
    pub(super) fn write(&self, key: u64, parent: u64, tokens: &[u32], data: &[u8]) {
        let path = self.path(key);
        let mut bytes = self.header(key, parent, tokens, data.len());
        bytes.extend_from_slice(data);
        let sum = Sha256::digest(&bytes);
        bytes.extend_from_slice(&sum);
        let tmp = path.with_extension(format!("tmp{}", std::process::id()));
        let done = std::fs::File::create(&tmp)
            .and_then(|mut f| f.write_all(&bytes))
            .and_then(|()| std::fs::rename(&tmp, &path));
        if let Err(e) = done {
            let _ = std::fs::remove_file(&tmp);
            eprintln!("warning: --cache-dir: cannot write {}: {e}", path.display());
        }
    }

    /// The bytes of the block keyed `key` (after `parent`, holding `tokens`, `len` bytes),
    /// when its file holds exactly that; a file that does not is removed, to be written
    /// again.
    pub(super) fn read(
        &self,
        key: u64,
        parent: u64,
        tokens: &[u32],
        len: usize,
    ) -> Option<Vec<u8>> {
        let path = self.path(key);
        let bytes = std::fs::read(&path).ok()?;
        let header = self.header(key, parent, tokens, len);
        let block = bytes
            .split_at_checked(header.len() + len)
            .filter(|(body, sum)| {
                body.starts_with(&header) && *sum == Sha256::digest(body).as_slice()
            })
            .map(|(body, _)| body[header.len()..].to_vec());
        if block.is_none() {
            let _ = std::fs::remove_file(&path);
        }
        block
    }
}
