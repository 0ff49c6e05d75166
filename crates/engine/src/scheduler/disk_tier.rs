//! The disk tier of the prefix cache (`--cache-dir`): each full block the host tier takes
//! is also written to a file of its own, named by its prefix key, under a folder named by
//! the model's and the pool's fingerprint, so that a restarted server reads a conversation
//! back instead of computing it. A file is trusted only whole: its magic, fingerprint,
//! key, parent key, tokens and length must be the ones asked for and its checksum must
//! hold; anything else is ignored (a stale, foreign or torn file costs a recomputation,
//! never a wrong answer). With a limit (`--cache-dir-max`), a read touches its file and a
//! write past the limit removes blocks, least recently used first among those no other
//! file continues, until a tenth of the limit is free again.
//!
//! ```text
//! DIR/<fingerprint, 16 hex>/<key, 16 hex>.kvb:
//!   "TDKVBLK1" | fingerprint (32) | key u64 | parent u64 | tokens 16 × u32 | len u64 |
//!   the block's bytes | SHA-256 of everything before (32)
//! ```

use std::cell::Cell;
use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use kv::{KvConfig, BLOCK_SIZE};
use model::Model;
use sha2::{Digest, Sha256};

use crate::DiskTier;

const MAGIC: &[u8; 8] = b"TDKVBLK1";
/// Bytes of a file before its parent key ends: magic, fingerprint, key, parent.
const LINKS: usize = 8 + 32 + 8 + 8;
/// A temporary file older than this is a crashed writer's and is removed when counting.
const STALE_TMP: Duration = Duration::from_secs(3600);

pub(super) struct DiskCache {
    root: PathBuf,
    dir: PathBuf,
    fingerprint: [u8; 32],
    max_bytes: Option<u64>,
    /// Bytes under `root` at the last count plus those written since (with a limit).
    used: Cell<u64>,
}

/// One block file under the root, as eviction sees it.
struct Entry {
    path: PathBuf,
    bytes: u64,
    used: SystemTime,
    parent: Option<usize>,
    children: usize,
}

/// The key and parent key a block file starts with, when it starts as one.
fn links(path: &Path) -> Option<(u64, u64)> {
    let mut head = [0u8; LINKS];
    std::fs::File::open(path).ok()?.read_exact(&mut head).ok()?;
    let word = |at: usize| u64::from_le_bytes(head[at..at + 8].try_into().expect("8 bytes"));
    head.starts_with(MAGIC).then(|| (word(40), word(48)))
}

/// Every block file in the root's folders (stale temporary files removed), each linked to
/// the file of its parent key in the same folder.
fn survey(root: &Path) -> Vec<Entry> {
    let mut entries = Vec::new();
    let mut keys: HashMap<(PathBuf, u64), usize> = HashMap::new();
    let mut parents = Vec::new();
    let folders = std::fs::read_dir(root).into_iter().flatten().flatten();
    for folder in folders.map(|f| f.path()).filter(|p| p.is_dir()) {
        for file in std::fs::read_dir(&folder).into_iter().flatten().flatten() {
            let (path, Ok(meta)) = (file.path(), file.metadata()) else {
                continue;
            };
            let used = meta.modified().unwrap_or(SystemTime::UNIX_EPOCH);
            let ext = path.extension().and_then(|e| e.to_str()).unwrap_or("");
            if ext.starts_with("tmp") {
                if used.elapsed().is_ok_and(|age| age > STALE_TMP) {
                    let _ = std::fs::remove_file(&path);
                }
                continue;
            }
            if ext != "kvb" {
                continue;
            }
            let link = links(&path);
            if let Some((key, _)) = link {
                keys.insert((folder.clone(), key), entries.len());
            }
            parents.push(link.map(|(_, parent)| (folder.clone(), parent)));
            entries.push(Entry {
                path,
                bytes: meta.len(),
                used,
                parent: None,
                children: 0,
            });
        }
    }
    for (i, parent) in parents.into_iter().enumerate() {
        if let Some(&p) = parent.and_then(|p| keys.get(&p)).filter(|&&p| p != i) {
            entries[i].parent = Some(p);
            entries[p].children += 1;
        }
    }
    entries
}

/// What makes two pools' blocks interchangeable: the model's metadata (its tokenizer
/// included), every tensor's name, shape, type and place, the first and last 256 bytes of
/// its data, and the pool's shape and rotation.
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
    h.update(format!("{:?}{kv:?}{:?}", model.stage.layers, kv.rotation()).as_bytes());
    h.finalize().into()
}

impl DiskCache {
    /// The tier in `tier.dir` for `model`'s pool shaped `kv` (its folder made if missing);
    /// with a limit, the folder is brought under it now.
    pub(super) fn open(
        tier: &DiskTier,
        model: &Model,
        kv: &KvConfig,
    ) -> std::io::Result<DiskCache> {
        let fingerprint = fingerprint(model, kv);
        let hex: String = fingerprint[..8]
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        let dir = tier.dir.join(hex);
        std::fs::create_dir_all(&dir)?;
        let cache = DiskCache {
            root: tier.dir.clone(),
            dir,
            fingerprint,
            max_bytes: tier.max_bytes,
            used: Cell::new(0),
        };
        if let Some(max) = cache.max_bytes {
            cache.evict(max);
        }
        Ok(cache)
    }

    /// Removes block files until the root's hold at most `target` bytes (counted anew): the
    /// least recently used first among those no kept file continues, so every kept block
    /// stays reachable from its conversation's first.
    fn evict(&self, target: u64) {
        let mut entries = survey(&self.root);
        let mut total: u64 = entries.iter().map(|e| e.bytes).sum();
        let mut leaves: BinaryHeap<Reverse<(SystemTime, usize)>> = entries
            .iter()
            .enumerate()
            .filter(|(_, e)| e.children == 0)
            .map(|(i, e)| Reverse((e.used, i)))
            .collect();
        while total > target {
            let Some(Reverse((_, i))) = leaves.pop() else {
                break;
            };
            if std::fs::remove_file(&entries[i].path).is_err() {
                continue;
            }
            total -= entries[i].bytes;
            if let Some(p) = entries[i].parent {
                entries[p].children -= 1;
                if entries[p].children == 0 {
                    leaves.push(Reverse((entries[p].used, p)));
                }
            }
        }
        self.used.set(total);
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
            return;
        }
        if let Some(max) = self.max_bytes {
            self.used.set(self.used.get() + bytes.len() as u64);
            if self.used.get() > max {
                self.evict(max - max / 10);
            }
        }
    }

    /// The bytes of the block keyed `key` (after `parent`, holding `tokens`, of one of the
    /// lengths `lens`), when its file holds exactly that; a file that does not is removed, to
    /// be written again.
    pub(super) fn read(
        &self,
        key: u64,
        parent: u64,
        tokens: &[u32],
        lens: &[usize],
    ) -> Option<Vec<u8>> {
        let path = self.path(key);
        let bytes = std::fs::read(&path).ok()?;
        let block = lens.iter().find_map(|&len| {
            let header = self.header(key, parent, tokens, len);
            let (body, sum) = bytes.split_at_checked(header.len() + len)?;
            let whole = body.starts_with(&header) && sum == Sha256::digest(body).as_slice();
            whole.then(|| body[header.len()..].to_vec())
        });
        match block.is_some() {
            true if self.max_bytes.is_some() => {
                let touch = std::fs::File::options().write(true).open(&path);
                let _ = touch.and_then(|f| f.set_modified(SystemTime::now()));
            }
            true => {}
            false => {
                let _ = std::fs::remove_file(&path);
            }
        }
        block
    }
}
