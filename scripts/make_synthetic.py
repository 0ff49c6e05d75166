#!/usr/bin/env python3
"""Writes tiny random-weight GGUF models (llama, qwen2, qwen3) and their float64 reference
logits, the fixtures of crates/model/tests/synthetic.rs. Shapes no real model here has
are covered too: qwen3's head_dim differs from n_embd / n_head.

usage: python3 scripts/make_synthetic.py   (requires: pip install gguf numpy)
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


def write(arch, n_embd, n_head, n_head_kv, head_dim, n_ff, n_layer, n_vocab, matrix_type, seed):
    rng = np.random.default_rng(seed)
    path = os.path.join(OUT, f"{arch}-tiny.gguf")
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

    def matrix(name, rows, cols, ty=matrix_type):
        a = (rng.standard_normal((rows, cols)) / np.sqrt(cols)).astype(np.float32)
        if ty == Q.F32:
            w.add_tensor(name, a)
        elif ty == Q.F16:
            w.add_tensor(name, a.astype(np.float16))
        else:
            w.add_tensor(name, gguf.quants.quantize(a, ty), raw_dtype=ty)

    def vector(name, n, scale=0.1, center=1.0):
        w.add_tensor(name, (center + scale * rng.standard_normal(n)).astype(np.float32))

    q, kv = n_head * head_dim, n_head_kv * head_dim
    matrix("token_embd.weight", n_vocab, n_embd, Q.Q8_0)
    for i in range(n_layer):
        p = f"blk.{i}."
        vector(p + "attn_norm.weight", n_embd)
        matrix(p + "attn_q.weight", q, n_embd)
        matrix(p + "attn_k.weight", kv, n_embd)
        matrix(p + "attn_v.weight", kv, n_embd)
        if arch == "qwen2":
            for s, n in (("q", q), ("k", kv), ("v", kv)):
                vector(p + f"attn_{s}.bias", n, 0.5, 0.0)
        if arch == "qwen3":
            vector(p + "attn_q_norm.weight", head_dim)
            vector(p + "attn_k_norm.weight", head_dim)
        matrix(p + "attn_output.weight", n_embd, q)
        vector(p + "ffn_norm.weight", n_embd)
        matrix(p + "ffn_gate.weight", n_ff, n_embd)
        matrix(p + "ffn_up.weight", n_ff, n_embd)
        matrix(p + "ffn_down.weight", n_embd, n_ff, Q.F16)
    vector("output_norm.weight", n_embd)
    if arch != "qwen2":
        matrix("output.weight", n_vocab, n_embd, Q.F32)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    logits = reference_forward(path)(TOKENS)
    return {"file": os.path.basename(path), "tokens": TOKENS, "logits": [[float(v) for v in row] for row in logits]}


def main():
    os.makedirs(OUT, exist_ok=True)
    cases = [
        write("llama", 64, 4, 2, 16, 128, 2, 64, Q.Q8_0, 1),
        write("qwen2", 64, 4, 1, 16, 96, 2, 64, Q.Q4_0, 2),
        write("qwen3", 64, 4, 2, 32, 128, 2, 64, Q.F32, 3),
    ]
    json.dump({"source": "scripts/make_synthetic.py", "cases": cases}, open(os.path.join(OUT, "reference.json"), "w"))


if __name__ == "__main__":
    main()
