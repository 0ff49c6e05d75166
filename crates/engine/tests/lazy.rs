//! `--lazy-mode on`: the embedding table (Q8_0, larger than everything the plan holds: the
//! output head is Q4_0) stays in the file, its rows read as tokens need them. The plan
//! counts it apart from the weights it holds, the process's resident memory grows by less
//! than the table and stays within the plan, and the tokens are those of `off`. (Alone in
//! its binary: it measures the process's resident memory.)

#[allow(dead_code)]
mod common;

use engine::{ContextConfig, Executor, MemoryPlan};
use gguf::GgmlType;
use model::{LazyMode, Model};

/// This process's resident memory in bytes (`VmRSS`).
fn resident() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let line = status.lines().find(|l| l.starts_with("VmRSS:")).unwrap();
    line.split_whitespace()
        .nth(1)
        .unwrap()
        .parse::<u64>()
        .unwrap()
        * 1024
}

const VOCAB: usize = 400_000;
const EMBD: usize = 1024;

/// The greedy tokens, the plan and how much resident memory grew from before the load to
/// after the tokens, with the tables left in the file as `mode` says.
fn run(path: &std::path::Path, mode: LazyMode) -> (Vec<u32>, MemoryPlan, u64) {
    let before = resident();
    let mut model = Model::load(path).unwrap();
    model.set_lazy(mode);
    let cfg = ContextConfig {
        n_ctx: 256,
        n_ubatch: 32,
        n_threads: 2,
        ..ContextConfig::default()
    };
    let plan = MemoryPlan::new(&model, &cfg);
    let mut exec = Executor::new(model, cfg).unwrap();
    let tokens = common::greedy_alone(&mut exec, &[1, 5, 9, 300_000, 42], 8);
    let grown = resident().saturating_sub(before);
    (tokens, plan, grown)
}

#[test]
fn a_lazy_table_stays_in_the_file_and_gives_the_same_tokens() {
    if !cfg!(target_os = "linux") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("wide-vocab.gguf");
    model::synthetic::Synthetic {
        arch: model::Arch::from_name("llama").unwrap(),
        n_embd: EMBD,
        n_layer: 2,
        n_head: 4,
        n_head_kv: 4,
        n_ff: 1024,
        experts: None,
        delta: None,
        nextn: 0,
        window: None,
        ty: GgmlType::Q4_0,
        seed: 3,
    }
    .write_placeholder_vocab(VOCAB, &path)
    .unwrap();
    let table = (VOCAB * EMBD / 32 * 34) as u64;
    let (on_tokens, on_plan, on_grown) = run(&path, LazyMode::On);
    let (off_tokens, off_plan, off_grown) = run(&path, LazyMode::Off);
    assert!(
        table > on_plan.total(),
        "the table outgrows the plan: {on_plan}"
    );
    assert_eq!(on_tokens, off_tokens, "lazy rows read the same values");
    assert_eq!((on_plan.on_disk, off_plan.on_disk), (table, 0));
    assert_eq!(off_plan.weights - on_plan.weights, table);
    assert!(
        on_grown + table / 2 < off_grown,
        "resident growth: lazy {on_grown} bytes, not lazy {off_grown}, table {table}"
    );
    assert!(
        on_grown < on_plan.total() + (32 << 20),
        "lazy: grew {on_grown} bytes, plan {on_plan}"
    );
}
