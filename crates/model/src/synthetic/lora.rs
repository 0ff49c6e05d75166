//! A random LoRA adapter for a model file: for tests of adapters against llama.cpp.

use std::path::Path;

use gguf::{GgmlType, GgufFile, GgufWriter, Value};

use super::{scale, write_file, Rng, Tensors};
use crate::Result;

/// The weights an adapter adapts: the attention and feed-forward matrices of the blocks.
const ADAPTED: &[&str] = &[
    "attn_q",
    "attn_k",
    "attn_v",
    "attn_output",
    "ffn_gate",
    "ffn_up",
    "ffn_down",
];

/// A rank-`rank` adapter (`adapter.lora.alpha` = `alpha`) for every 2-D weight of `base`
/// named `blk.N.{attn_q, attn_k, attn_v, attn_output, ffn_gate, ffn_up, ffn_down}.weight`,
/// f32 factors uniform with variance `1 / n_in` (A) and `1 / rank` (B), written to `path`.
pub fn write_adapter(
    base: &GgufFile,
    rank: usize,
    alpha: f32,
    seed: u64,
    path: &Path,
) -> Result<()> {
    let md = &base.header.metadata;
    let mut w = GgufWriter::new();
    w.metadata(
        "general.architecture",
        Value::String(md.str("general.architecture")?.into()),
    );
    w.metadata("general.type", Value::String("adapter".into()));
    w.metadata("adapter.type", Value::String("lora".into()));
    w.metadata("adapter.lora.alpha", Value::F32(alpha));
    let mut t = Tensors {
        w: &mut w,
        rng: Rng::new(seed),
    };
    for info in &base.header.tensors {
        let adapted = info.name.strip_prefix("blk.").is_some_and(|rest| {
            ADAPTED
                .iter()
                .any(|a| rest.ends_with(&format!(".{a}.weight")))
        });
        let &[n_in, n_out] = info.dims.as_slice() else {
            continue;
        };
        if !adapted {
            continue;
        }
        let (n_in, n_out) = (n_in as usize, n_out as usize);
        let a = format!("{}.lora_a", info.name);
        t.matrix(&a, &[n_in, rank], GgmlType::F32, scale(n_in))?;
        let b = format!("{}.lora_b", info.name);
        t.matrix(&b, &[rank, n_out], GgmlType::F32, scale(rank))?;
    }
    write_file(&w, path)
}
