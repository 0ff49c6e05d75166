#!/usr/bin/env python3
"""Writes tiny random-weight GGUF models and their float64 reference logits: dense llama,
qwen2, qwen3, phi3 (fused QKV and gate/up), Mistral (a llama with a sliding window on every
block) and gemma3 (post-norms, GELU, a window on five of six blocks)
(crates/model/tests/synthetic.rs), and mixtures of experts with 1 to 8
experts per token out of 8 to 64 (Mixtral, qwen2moe with its gated shared expert, qwen3moe,
and a DeepSeek-style variant: sigmoid gating, scaled weights, ungated shared experts and a
leading dense block; crates/model/tests/moe.rs). Shapes no real model here has are covered
too: qwen3's head_dim differs from n_embd / n_head.

A mixture's fixture is redrawn (next seed) until every routing decision of its reference
run is clear of a tie by MIN_MARGIN, so that float32 rounding cannot flip an expert choice.

usage: python3 scripts/make_synthetic.py   (requires: pip install gguf==0.19.0 numpy)
"""
import json
import os
import sys

import gguf
import numpy as np

sys.path.insert(0, os.path.dirname(__file__))
from ref_forward import reference_forward  # noqa: E402

OUT = os.path.join(os.path.dirname(__file__), "..", "crates", "model", "tests", "fixtures")
Q = gguf.GGMLQuantizationType
TOKENS = [1, 5, 9, 2, 33, 61, 7, 7, 40, 12, 3, 58, 20, 0]
MOE_TOKENS = [int(t) for t in np.random.default_rng(99).integers(0, 64, 64)]
MIN_MARGIN = 1e-3


def write(arch, n_embd, n_head, n_head_kv, head_dim, n_ff, n_layer, n_vocab, matrix_type, seed,
          moe=None, name=None, tokens=TOKENS, window=None):
    """One fixture. `moe`: dict with n_expert, n_used, n_ff_exp, expert_type and optionally
    n_ff_shexp (a gated shared expert), shared_count, gating ("sigmoid"), scale, dense_lead.
    `window`: `attention.sliding_window`."""
    rng = np.random.default_rng(seed)
    path = os.path.join(OUT, f"{name or arch + '-tiny'}.gguf")
    w = gguf.GGUFWriter(path, arch)
    w.add_embedding_length(n_embd)
    w.add_block_count(n_layer)
    w.add_feed_forward_length(n_ff)
    w.add_head_count(n_head)
    w.add_head_count_kv(n_head_kv)
    if head_dim != n_embd // n_head:
        w.add_key_length(head_dim)
        w.add_value_length(head_dim)
    w.add_layer_norm_rms_eps(1e-6)
    w.add_rope_freq_base(10000.0)
    w.add_vocab_size(n_vocab)
    if window:
        w.add_sliding_window(window)
    if moe:
        w.add_expert_count(moe["n_expert"])
        w.add_expert_used_count(moe["n_used"])
        if arch != "llama":  # llama.cpp reads a Mixtral's expert width from feed_forward_length
            w.add_expert_feed_forward_length(moe["n_ff_exp"])
        if "n_ff_shexp" in moe:
            w.add_expert_shared_feed_forward_length(moe["n_ff_shexp"])
        if "shared_count" in moe:
            w.add_expert_shared_count(moe["shared_count"])
        if moe.get("gating") == "sigmoid":
            w.add_expert_gating_func(gguf.ExpertGatingFuncType.SIGMOID)
            w.add_expert_weights_norm(True)
        if "scale" in moe:
            w.add_expert_weights_scale(moe["scale"])
        if "dense_lead" in moe:
            w.add_leading_dense_block_count(moe["dense_lead"])

    def tensor(name, a, ty):
        if ty == Q.F32:
            w.add_tensor(name, a)
        elif ty == Q.F16:
            w.add_tensor(name, a.astype(np.float16))
        else:
            w.add_tensor(name, gguf.quants.quantize(a, ty), raw_dtype=ty)

    def matrix(name, rows, cols, ty=matrix_type, experts=None, scale=1.0):
        shape = (rows, cols) if experts is None else (experts, rows, cols)
        tensor(name, (scale * rng.standard_normal(shape) / np.sqrt(cols)).astype(np.float32), ty)

    def vector(name, n, scale=0.1, center=1.0):
        w.add_tensor(name, (center + scale * rng.standard_normal(n)).astype(np.float32))

    q, kv = n_head * head_dim, n_head_kv * head_dim
    matrix("token_embd.weight", n_vocab, n_embd, Q.Q8_0)
    for i in range(n_layer):
        p = f"blk.{i}."
        vector(p + "attn_norm.weight", n_embd)
        if arch == "phi3":
            matrix(p + "attn_qkv.weight", q + 2 * kv, n_embd)
        else:
            matrix(p + "attn_q.weight", q, n_embd)
            matrix(p + "attn_k.weight", kv, n_embd)
            matrix(p + "attn_v.weight", kv, n_embd)
        if arch in ("qwen2", "qwen2moe"):
            for s, n in (("q", q), ("k", kv), ("v", kv)):
                vector(p + f"attn_{s}.bias", n, 0.5, 0.0)
        if arch in ("qwen3", "qwen3moe", "gemma3"):
            vector(p + "attn_q_norm.weight", head_dim)
            vector(p + "attn_k_norm.weight", head_dim)
        matrix(p + "attn_output.weight", n_embd, q)
        if arch == "gemma3":
            vector(p + "post_attention_norm.weight", n_embd)
            vector(p + "post_ffw_norm.weight", n_embd)
        vector(p + "ffn_norm.weight", n_embd)
        if moe and i >= moe.get("dense_lead", 0):
            ne, ff, ty = moe["n_expert"], moe["n_ff_exp"], moe["expert_type"]
            matrix(p + "ffn_gate_inp.weight", ne, n_embd, Q.F32, scale=4.0)
            matrix(p + "ffn_gate_exps.weight", ff, n_embd, ty, ne)
            matrix(p + "ffn_up_exps.weight", ff, n_embd, ty, ne)
            matrix(p + "ffn_down_exps.weight", n_embd, ff, ty, ne)
            shexp = moe.get("n_ff_shexp") or ff * moe.get("shared_count", 0)
            if shexp:
                matrix(p + "ffn_gate_shexp.weight", shexp, n_embd)
                matrix(p + "ffn_up_shexp.weight", shexp, n_embd)
                matrix(p + "ffn_down_shexp.weight", n_embd, shexp, Q.F16)
            if "n_ff_shexp" in moe:
                vector(p + "ffn_gate_inp_shexp.weight", n_embd, 1.0, 0.0)
        elif arch == "phi3":
            matrix(p + "ffn_up.weight", 2 * n_ff, n_embd)
            matrix(p + "ffn_down.weight", n_embd, n_ff, Q.F16)
        else:
            matrix(p + "ffn_gate.weight", n_ff, n_embd)
            matrix(p + "ffn_up.weight", n_ff, n_embd)
            matrix(p + "ffn_down.weight", n_embd, n_ff, Q.F16)
    vector("output_norm.weight", n_embd)
    if arch not in ("qwen2", "qwen2moe", "gemma3"):
        matrix("output.weight", n_vocab, n_embd, Q.F32)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    margins = []
    logits = reference_forward(path)[0](tokens, margins)
    case = {"file": os.path.basename(path), "tokens": tokens, "logits": [[float(v) for v in row] for row in logits]}
    if moe:
        case["min_margin"] = float(min(margins))
    return case


def write_moe(arch, k, n_expert, expert_type, seed, n_layer=2, **extra):
    """A mixture fixture (64 tokens), redrawn until its routing is clear of ties."""
    while True:
        moe = {"n_expert": n_expert, "n_used": k, "n_ff_exp": 32, "expert_type": expert_type, **extra}
        n_ff = 32 if arch == "llama" else 96
        case = write(arch, 64, 4, 2, 16, n_ff, n_layer, 64, Q.Q8_0, seed, moe, f"{arch}-moe-k{k}", MOE_TOKENS)
        if case["min_margin"] >= MIN_MARGIN:
            return case
        seed += 1000


def main():
    os.makedirs(OUT, exist_ok=True)
    cases = [
        write("llama", 64, 4, 2, 16, 128, 2, 64, Q.Q8_0, 1),
        write("qwen2", 64, 4, 1, 16, 96, 2, 64, Q.Q4_0, 2),
        write("qwen3", 64, 4, 2, 32, 128, 2, 64, Q.F32, 3),
        write("phi3", 64, 4, 2, 16, 96, 2, 64, Q.Q8_0, 4),
        write("llama", 64, 4, 2, 16, 128, 2, 64, Q.Q4_0, 5, name="mistral-tiny", window=5),
        write("gemma3", 64, 4, 1, 32, 96, 6, 64, Q.Q8_0, 6, window=4),
    ]
    json.dump({"source": "scripts/make_synthetic.py", "cases": cases}, open(os.path.join(OUT, "reference.json"), "w"))
    moe = [
        write_moe("llama", 1, 8, Q.Q8_0, 11),
        write_moe("llama", 2, 8, Q.F16, 12),
        write_moe("qwen3moe", 3, 16, Q.Q4_0, 13),
        write_moe("qwen2moe", 4, 60, Q.Q8_0, 14, n_ff_shexp=64),
        write_moe("qwen3moe", 5, 32, Q.Q4_1, 15, n_layer=3, gating="sigmoid", scale=2.5,
                  shared_count=2, dense_lead=1),
        write_moe("qwen2moe", 6, 64, Q.Q4_0, 16, n_ff_shexp=32),
        write_moe("qwen3moe", 7, 24, Q.Q5_0, 17),
        write_moe("qwen3moe", 8, 64, Q.Q8_0, 18),
    ]
    for c in moe:
        print(f"{c['file']}: smallest routing margin {c['min_margin']:.2e}", file=sys.stderr)
    json.dump({"source": "scripts/make_synthetic.py", "cases": moe}, open(os.path.join(OUT, "moe-reference.json"), "w"))


if __name__ == "__main__":
    main()
