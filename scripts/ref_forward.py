#!/usr/bin/env python3
"""Reference forward pass in numpy (float64 activations) for llama / qwen2 / qwen3 GGUF
models, reading weights through the `gguf` package (gguf.quants.dequantize).

It scores the golden greedy cases teacher-forced (prompt + llama.cpp's 64 tokens) and
writes the top-5 log-probabilities at the first N_POSITIONS generated positions, so that
tandem's forward can be checked tightly against an exact computation, independent of
llama.cpp's quantized-activation arithmetic.

usage: python3 scripts/ref_forward.py MODEL.gguf GREEDY_GOLDEN.json OUT.json
(requires: pip install gguf numpy)
"""
import json
import sys

import gguf
import numpy as np

N_POSITIONS = 16


def reference_forward(model_path):
    """A function mapping a token list to float64 logits `[n_tokens, n_vocab]`."""
    r = gguf.GGUFReader(model_path)
    arch = r.fields["general.architecture"].contents()
    tensors = {t.name: t for t in r.tensors}

    def meta(key, default=None):
        return r.fields[key].contents() if key in r.fields else default

    def weight(name):
        t = tensors[name]
        a = gguf.quants.dequantize(t.data, t.tensor_type).astype(np.float32)
        return a.reshape([int(x) for x in reversed(t.shape)]) if len(t.shape) > 1 else a.reshape(-1)

    n_embd = meta(f"{arch}.embedding_length")
    n_head = meta(f"{arch}.attention.head_count")
    n_head_kv = meta(f"{arch}.attention.head_count_kv", n_head)
    head_dim = meta(f"{arch}.attention.key_length", n_embd // n_head)
    n_layer = meta(f"{arch}.block_count")
    eps = meta(f"{arch}.attention.layer_norm_rms_epsilon")
    base = meta(f"{arch}.rope.freq_base", 10000.0)
    neox = arch != "llama"

    def rms(x, w):
        return x / np.sqrt((x * x).mean(-1, keepdims=True) + eps) * w

    def forward(tokens):
        n = len(tokens)
        x = weight("token_embd.weight")[tokens].astype(np.float64)
        inv = base ** (-np.arange(0, head_dim, 2) / head_dim)
        ang = np.arange(n)[:, None] * inv[None, :]
        cos, sin = np.cos(ang)[:, None], np.sin(ang)[:, None]

        def rope(q):  # [n, heads, head_dim]
            if neox:
                a, b = q[..., : head_dim // 2], q[..., head_dim // 2 :]
                return np.concatenate([a * cos - b * sin, a * sin + b * cos], -1)
            a, b = q[..., 0::2], q[..., 1::2]
            out = np.empty_like(q)
            out[..., 0::2], out[..., 1::2] = a * cos - b * sin, a * sin + b * cos
            return out

        mask = np.triu(np.full((n, n), -np.inf), 1)[None]
        for layer in range(n_layer):
            p = f"blk.{layer}."
            h = rms(x, weight(p + "attn_norm.weight"))
            q, k, v = (h @ weight(p + f"attn_{s}.weight").T for s in "qkv")
            if p + "attn_q.bias" in tensors:
                q, k, v = (m + weight(p + f"attn_{s}.bias") for m, s in zip((q, k, v), "qkv"))
            q, k, v = q.reshape(n, n_head, head_dim), k.reshape(n, n_head_kv, head_dim), v.reshape(n, n_head_kv, head_dim)
            if p + "attn_q_norm.weight" in tensors:
                q, k = rms(q, weight(p + "attn_q_norm.weight")), rms(k, weight(p + "attn_k_norm.weight"))
            q, k = rope(q), rope(k)
            rep = n_head // n_head_kv
            k, v = np.repeat(k, rep, axis=1), np.repeat(v, rep, axis=1)
            s = np.einsum("qhd,khd->hqk", q, k) / np.sqrt(head_dim) + mask
            s = np.exp(s - s.max(-1, keepdims=True))
            s /= s.sum(-1, keepdims=True)
            o = np.einsum("hqk,khd->qhd", s, v).reshape(n, n_head * head_dim)
            x = x + o @ weight(p + "attn_output.weight").T
            h = rms(x, weight(p + "ffn_norm.weight"))
            g, u = h @ weight(p + "ffn_gate.weight").T, h @ weight(p + "ffn_up.weight").T
            x = x + (g / (1 + np.exp(-g)) * u) @ weight(p + "ffn_down.weight").T
        x = rms(x, weight("output_norm.weight"))
        out = weight("output.weight" if "output.weight" in tensors else "token_embd.weight")
        return x @ out.T

    return forward


def main(model_path, golden_path, out_path):
    forward = reference_forward(model_path)
    golden = json.load(open(golden_path))
    cases = []
    for case in golden["greedy"]:
        prompt, gen = case["prompt_tokens"], case["tokens"][:N_POSITIONS]
        logits = forward(prompt + gen[:-1])[len(prompt) - 1 :]
        lp = logits - logits.max(-1, keepdims=True)
        lp = lp - np.log(np.exp(lp).sum(-1, keepdims=True))
        top5 = [[[int(i), float(row[i])] for i in np.argsort(-row, kind="stable")[:5]] for row in lp]
        cases.append({"prompt_tokens": prompt, "forced_tokens": gen, "top5": top5})
        print(f"case done: top1 at first position {top5[0][0]}", file=sys.stderr)
    json.dump({"source": "scripts/ref_forward.py on " + model_path.split("/")[-1], "cases": cases}, open(out_path, "w"))


if __name__ == "__main__":
    main(*sys.argv[1:4])
