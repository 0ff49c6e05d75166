//! `tandem info`: what a model is and what running it will take.

use std::collections::BTreeMap;

use engine::MemoryPlan;

use crate::cli::InfoArgs;
use crate::CliError;

pub fn execute(a: InfoArgs) -> Result<(), CliError> {
    let path = a.model.path()?;
    let model = a.model.load(&path, model::Part::Whole)?;
    let kind = a.model.device.resolve();
    let hp = &model.hparams;
    let md = &model.file.header.metadata;
    println!("file:          {}", path.display());
    if let Some(name) = md.opt_str("general.name")? {
        println!("name:          {name}");
    }
    println!("architecture:  {}", hp.arch);
    println!(
        "n_vocab {}  n_embd {}  n_layer {}  n_head {}  n_head_kv {}  head_dim {}  n_ff {}",
        hp.n_vocab, hp.n_embd, hp.n_layer, hp.n_head, hp.n_head_kv, hp.head_dim, hp.n_ff
    );
    println!(
        "n_rot {}  rope_freq_base {}  rms_eps {:e}  n_ctx_train {}",
        hp.n_rot, hp.rope_freq_base, hp.rms_eps, hp.n_ctx_train
    );
    if let Some(sl) = hp.sliding {
        let global: Vec<String> = (0..hp.n_layer)
            .filter(|&il| hp.window(il).is_none())
            .map(|il| il.to_string())
            .collect();
        println!(
            "sliding:       window {} on {} of {} blocks (RoPE base {}); global blocks {}",
            sl.window,
            hp.n_layer - global.len(),
            hp.n_layer,
            hp.rope_base(
                (0..hp.n_layer)
                    .find(|&il| hp.window(il).is_some())
                    .unwrap_or(0)
            ),
            if global.is_empty() {
                "none".to_string()
            } else {
                global.join(", ")
            }
        );
    }
    if let Some(moe) = &hp.moe {
        let shared = match moe.shared {
            Some(s) if s.gated => format!(", gated shared expert of {}", s.n_ff),
            Some(s) => format!(", shared experts of {} in all", s.n_ff),
            None => String::new(),
        };
        println!(
            "experts:       {} of {} per token, n_ff_exp {}, {:?} gating{}{}{}",
            moe.n_expert_used,
            moe.n_expert,
            moe.n_ff_exp,
            moe.gating,
            if moe.norm_weights {
                ", renormalized"
            } else {
                ""
            },
            shared,
            match moe.n_dense_lead {
                0 => String::new(),
                n => format!(", first {n} blocks dense"),
            }
        );
        let expert_bytes: u64 = model
            .tensors
            .matrices
            .iter()
            .filter(|m| matches!(m.reads, model::Reads::Expert { .. }))
            .map(|m| {
                let w = &m.weight;
                kind.matrix_bytes(w.ty, w.n_rows, w.n_cols, device::Role::Multiply)
            })
            .sum::<u64>();
        let layers = hp.n_layer - moe.n_dense_lead;
        println!(
            "               expert weights {:.1} MiB ({:.2} MiB per expert and block; a token reads {:.1} MiB of them)",
            expert_bytes as f64 / 1048576.0,
            expert_bytes as f64 / (layers * moe.n_expert) as f64 / 1048576.0,
            expert_bytes as f64 * moe.n_expert_used as f64 / moe.n_expert as f64 / 1048576.0,
        );
    }
    for (i, l) in model.adapters.iter().enumerate() {
        let ranks: std::collections::BTreeSet<usize> = l.pairs.iter().map(|p| p.rank).collect();
        println!(
            "lora {i}:        {} at scale {}, {} matrices of rank {ranks:?}, alpha {}",
            l.path.display(),
            l.scale,
            l.pairs.len(),
            l.alpha
        );
    }
    let mut by_type: BTreeMap<String, (usize, u64, gguf::GgmlType)> = BTreeMap::new();
    for t in &model.file.header.tensors {
        let e = by_type
            .entry(t.ggml_type.to_string())
            .or_insert((0, 0, t.ggml_type));
        e.0 += 1;
        e.1 += t.n_bytes;
    }
    let all_bytes: u64 = by_type.values().map(|e| e.1).sum();
    println!(
        "tensors:       {} (each type: its share of the bytes, bits per weight, how the CPU and GPU backends run it, - where they refuse it)",
        model.file.header.tensors.len()
    );
    for (ty, (n, bytes, t)) in by_type {
        println!(
            "  {ty:<7} {n:>4} tensors  {:>9.1} MiB {:>5.1}%  {:>5.2} bpw   cpu {}, gpu {}",
            bytes as f64 / 1048576.0,
            100.0 * bytes as f64 / all_bytes.max(1) as f64,
            8.0 * t.type_size() as f64 / t.block_size() as f64,
            kernels::forms::form_name(t).unwrap_or("-"),
            gpu::form_name(t).unwrap_or("-"),
        );
    }
    let cfg = engine::ContextConfig {
        n_seq: a.parallel,
        ..a.model.context_config()
    };
    let plan = MemoryPlan::new(&model, &cfg);
    println!(
        "context:       {} positions over {} sequence(s), ubatch {}, KV {}, {} threads",
        cfg.n_ctx, a.parallel, cfg.n_ubatch, cfg.kv_type, cfg.n_threads
    );
    let kv_cfg = cfg.kv_config(&model);
    let per_token = kv_cfg.full_block_bytes() / kv::BLOCK_SIZE;
    if per_token > 0 {
        println!(
            "KV per token:  {per_token} bytes of context{}",
            if kv_cfg.records.is_some() {
                " (the compressed rows and indexer keys every block of positions leaves)"
            } else {
                ""
            }
        );
    }
    if let Some(w) = kv_cfg.window {
        println!(
            "windowed KV:   {} blocks keep {} positions: a {}-position window per sequence and a forward's rows (--swa-full keeps all)",
            w.layers.count_ones(),
            w.n_blocks * kv::BLOCK_SIZE,
            w.size
        );
    }
    if let Some(s) = kv_cfg.state {
        println!(
            "recurrent:     {} blocks keep a state of {:.1} MiB per sequence (and its checkpoint), whatever its length, and {} snapshots of it for prefixes to resume from (--ctx-checkpoints per slot)",
            s.n_layers(),
            (s.n_layers() * s.floats * 4) as f64 / (1 << 20) as f64,
            s.n_snaps
        );
    }
    if hp.n_nextn > 0 {
        println!(
            "nextn:         {} multi-token-prediction block(s) after the {}, not run by the model (--spec-type draft-mtp drafts with them)",
            hp.n_nextn, hp.n_layer
        );
    }
    let adapter = cfg.device.adapter();
    match &adapter {
        Some(a) => println!(
            "device:        {} ({})",
            cfg.device.resolve().name(),
            a.name
        ),
        None => println!("device:        {}", cfg.device.resolve().name()),
    }
    let own = adapter.and_then(gpu::Adapter::own);
    println!(
        "memory plan:   {plan} ({})",
        server::memory::placement(cfg.device, own.as_ref())
    );
    Ok(())
}
