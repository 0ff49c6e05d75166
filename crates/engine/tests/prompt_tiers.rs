//! The prefix cache's disk tier (`--cache-dir`, `--cache-dir-max`) on a small synthetic
//! llama with SmolLM2's vocabulary ([`common::write_synthetic`]): what a server computed
//! before a restart is read back with the same tokens, a damaged file is ignored, and a
//! limited folder gives up the ends of its least recent conversations first.

#[allow(dead_code)]
mod common;

use std::path::Path;
use std::sync::Arc;

use common::{engine_config, run_all, PROMPTS};
use engine::{DiskTier, EngineConfig};
use model::Model;
use text::Tokenizer;

/// A test's model: its file in a folder of its own, and its tokenizer.
struct Subject {
    dir: tempfile::TempDir,
    tok: Arc<Tokenizer>,
}

impl Subject {
    fn new() -> Subject {
        let dir = tempfile::tempdir().unwrap();
        let model = Model::load(common::write_synthetic(dir.path(), "llama")).unwrap();
        let tok = Arc::new(Tokenizer::from_gguf(&model.file.header.metadata).unwrap());
        Subject { dir, tok }
    }

    fn load(&self) -> Model {
        Model::load(self.dir.path().join("llama.gguf")).unwrap()
    }
}

fn tier(dir: &Path, max_bytes: Option<u64>) -> &'static DiskTier {
    Box::leak(Box::new(DiskTier {
        dir: dir.to_path_buf(),
        max_bytes,
    }))
}

fn server(m: &Subject, tier: Option<&'static DiskTier>) -> engine::EngineHandle {
    let cfg = EngineConfig {
        cache_dir: tier,
        ..engine_config(1024, 1, true)
    };
    engine::start(m.load(), m.tok.clone(), cfg, None, None).unwrap()
}

/// One greedy request of 8 tokens on a fresh server with `tier`: its tokens and summary,
/// after the engine has finished the step that retired it (its blocks written).
fn ask(
    m: &Subject,
    tier: Option<&'static DiskTier>,
    prompt: &[u32],
) -> (Vec<u32>, engine::Summary) {
    let handle = server(m, tier);
    let answer = run_all(&handle, &[prompt.to_vec()], 8).remove(0);
    handle.snapshot_blocking().unwrap();
    answer
}

/// The file name of block `i` of `tokens`.
fn block_file(tokens: &[u32], i: usize) -> String {
    let blocks = kv::HostCache::new(0).blocks(tokens, i + 1, kv::SHARED);
    format!("{:016x}.kvb", blocks[i].0)
}

/// The block files under `root`'s folders: their names and their bytes together.
fn files(root: &Path) -> (Vec<String>, u64) {
    let (mut names, mut bytes) = (Vec::new(), 0);
    for folder in std::fs::read_dir(root).unwrap() {
        for f in std::fs::read_dir(folder.unwrap().path()).unwrap() {
            let f = f.unwrap();
            bytes += f.metadata().unwrap().len();
            names.push(f.file_name().to_string_lossy().into_owned());
        }
    }
    (names, bytes)
}

/// A conversation computed before a restart is read back from the disk tier
/// (`--cache-dir`) with the same tokens, up to a block whose file was damaged.
#[test]
fn the_disk_tier_survives_a_restart_and_ignores_a_damaged_file() {
    let m = Subject::new();
    let tok = &m.tok;
    let prompt = tok
        .encode(&PROMPTS.join(" ").repeat(3), true, false)
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let path = tier(dir.path(), None);
    let (first, _) = ask(&m, Some(path), &prompt);
    let mut turn2 = prompt.clone();
    turn2.extend(&first);
    turn2.extend(tok.encode(" And then", false, false).unwrap());
    let full_blocks = (prompt.len() + first.len() - 1) / 16 * 16;
    let (want, cold) = ask(&m, None, &turn2);
    let (got, warm) = ask(&m, Some(path), &turn2);
    assert_eq!((cold.cache_n, warm.cache_n), (0, full_blocks));
    assert_eq!(got, want);

    let folder = std::fs::read_dir(dir.path())
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .path();
    let files: Vec<_> = std::fs::read_dir(&folder)
        .unwrap()
        .map(|f| f.unwrap().path())
        .collect();
    let turn2_blocks = (turn2.len() + got.len() - 1) / 16;
    assert_eq!(files.len(), turn2_blocks, "a file per block of both turns");
    let damaged = folder.join(block_file(&turn2, 3));
    let mut bytes = std::fs::read(&damaged).unwrap();
    let at = bytes.len() / 2;
    bytes[at] ^= 1;
    std::fs::write(&damaged, bytes).unwrap();
    let (got, warm) = ask(&m, Some(path), &turn2);
    assert_eq!(warm.cache_n, 3 * 16, "read back up to the damaged block");
    assert_eq!(got, want);
    let (_, warm) = ask(&m, Some(path), &turn2);
    assert_eq!(
        warm.cache_n, full_blocks,
        "the damaged file was written again"
    );
}

/// With a limit, a conversation written after another one stays whole and the older one
/// loses blocks from its end only: the folder keeps under the limit, and the older
/// conversation is read back after a restart exactly as far as its files still reach.
#[test]
fn a_limited_disk_tier_gives_up_the_ends_of_the_least_recent_conversations() {
    let m = Subject::new();
    let tok = &m.tok;
    let text = |from: usize| PROMPTS[from..from + 4].join(" ").repeat(4);
    let turns = |tokens: &[u32], answer: &[u32]| {
        let mut turn2 = tokens.to_vec();
        turn2.extend(answer);
        turn2.extend(tok.encode(" And then", false, false).unwrap());
        let blocks = (tokens.len() + answer.len() - 1) / 16;
        (turn2, blocks)
    };
    let a = tok.encode(&text(0), true, false).unwrap();
    let b = tok.encode(&text(4), true, false).unwrap();
    let unlimited = tempfile::tempdir().unwrap();
    let (answer_a, _) = ask(&m, Some(tier(unlimited.path(), None)), &a);
    let (names, bytes) = files(unlimited.path());
    let (turn2_a, blocks_a) = turns(&a, &answer_a);
    assert_eq!(names.len(), blocks_a);
    let per_block = bytes / blocks_a as u64;

    let dir = tempfile::tempdir().unwrap();
    let (_, blocks_b) = turns(&b, &[0; 8]);
    let max = per_block * (blocks_b + blocks_a / 2) as u64;
    let limited = tier(dir.path(), Some(max));
    ask(&m, Some(limited), &a);
    assert_eq!(files(dir.path()).0.len(), blocks_a, "a fits alone");
    let (answer_b, _) = ask(&m, Some(limited), &b);
    let (turn2_b, blocks_b) = turns(&b, &answer_b);
    let (names, bytes) = files(dir.path());
    assert!(bytes <= max, "{bytes} bytes kept, limit {max}");
    let kept = |turn2: &[u32], n: usize| -> Vec<bool> {
        (0..n)
            .map(|i| names.contains(&block_file(turn2, i)))
            .collect()
    };
    assert!(
        kept(&turn2_b, blocks_b).iter().all(|k| *k),
        "the newer conversation stays whole"
    );
    let kept_a = kept(&turn2_a, blocks_a);
    let reach = kept_a.iter().take_while(|k| **k).count();
    assert!(reach > 0 && reach < blocks_a, "{kept_a:?}");
    assert!(
        kept_a[reach..].iter().all(|k| !*k),
        "blocks went from the end only: {kept_a:?}"
    );

    let (want, cold) = ask(&m, None, &turn2_a);
    let (got, warm) = ask(&m, Some(limited), &turn2_a);
    assert_eq!((cold.cache_n, warm.cache_n), (0, reach * 16));
    assert_eq!(got, want);
}
