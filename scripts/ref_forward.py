#!/usr/bin/env python3
"""Reference forward pass in numpy (float64 activations) for llama (and Mixtral, and Mistral:
a llama file with `llama.attention.sliding_window`, every block windowed) / qwen2 / qwen2moe /
qwen3 / qwen3moe / gemma3 / phi3 (fused `attn_qkv` and `ffn_up` split by rows) GGUF models,
reading weights through the `gguf` package
(gguf.quants.dequantize). Mixtures of experts follow llama.cpp's build_moe_ffn: softmax
(or sigmoid) router, top-k, optional renormalization and scale, shared experts. Gemma 3
follows llama.cpp's gemma3 graph: scaled embeddings, post-norms, GELU (tanh), and five of
six blocks through a sliding window with RoPE base 10,000.

It scores the golden greedy cases teacher-forced (prompt + llama.cpp's 64 tokens) and
writes the top-5 log-probabilities at the first N_POSITIONS generated positions, so that
tandem's forward can be checked tightly against an exact computation, independent of
llama.cpp's quantized-activation arithmetic. For a model with a sliding window, one more case
repeats the first prompt past the window, so that windowed blocks see only part of it.

usage: python3 scripts/ref_forward.py MODEL.gguf GREEDY_GOLDEN.json OUT.json
(requires: pip install gguf==0.19.0 numpy)
"""
import json
import sys

import gguf
import numpy as np

N_POSITIONS = 16


def reference_forward(model_path):
    """A function mapping a token list to float64 logits `[n_tokens, n_vocab]`. Given a list
    as `margins`, it appends, for every row of every mixture block, the relative gap between
    the k-th and the (k+1)-th expert probability (how far the routing is from a tie)."""
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
    n_expert = meta(f"{arch}.expert_count", 0)
    n_used = meta(f"{arch}.expert_used_count", 0)
    norm_w = meta(f"{arch}.expert_weights_norm", arch != "qwen2moe")
    scale_w = meta(f"{arch}.expert_weights_scale", 0.0) or 1.0
    sigmoid_gating = meta(f"{arch}.expert_gating_func", 1) == 2
    n_dense_lead = meta(f"{arch}.leading_dense_block_count", 0)

    gemma = arch == "gemma3"
    window = meta(f"{arch}.attention.sliding_window", 0) if arch in ("gemma3", "llama") else 0

    def windowed(layer):
        return window > 0 and (layer % 6 < 5 if gemma else True)

    def rms(x, w):
        return x / np.sqrt((x * x).mean(-1, keepdims=True) + eps) * w

    def swiglu(h, p, suffix=""):
        if p + "ffn_gate.weight" not in tensors and not suffix:
            g, u = np.split(h @ weight(p + "ffn_up.weight").T, 2, axis=-1)
        else:
            g, u = h @ weight(p + f"ffn_gate{suffix}.weight").T, h @ weight(p + f"ffn_up{suffix}.weight").T
        if gemma:
            act = 0.5 * g * (1 + np.tanh(np.sqrt(2 / np.pi) * (g + 0.044715 * g**3)))
        else:
            act = g / (1 + np.exp(-g))
        return (act * u) @ weight(p + f"ffn_down{suffix}.weight").T

    def moe(h, p, margins):
        logits = h @ weight(p + "ffn_gate_inp.weight").T  # [n, n_expert]
        if sigmoid_gating:
            probs = 1 / (1 + np.exp(-logits))
        else:
            probs = np.exp(logits - logits.max(-1, keepdims=True))
            probs /= probs.sum(-1, keepdims=True)
        gate, up, down = (weight(p + f"ffn_{s}_exps.weight") for s in ("gate", "up", "down"))
        out = np.zeros_like(h)
        for r in range(h.shape[0]):
            order = np.argsort(-probs[r], kind="stable")
            chosen = order[:n_used]
            if margins is not None and n_used < n_expert:
                a, b = probs[r, order[n_used - 1]], probs[r, order[n_used]]
                margins.append((a - b) / a)
            w = probs[r, chosen]
            if norm_w:
                w = w / max(w.sum(), 6.103515625e-5)
            w = w * scale_w
            for e, we in zip(chosen, w):
                g, u = gate[e] @ h[r], up[e] @ h[r]
                out[r] += we * (down[e] @ (g / (1 + np.exp(-g)) * u))
        if p + "ffn_gate_shexp.weight" in tensors:
            shared = swiglu(h, p, "_shexp")
            if p + "ffn_gate_inp_shexp.weight" in tensors:
                gsh = h @ weight(p + "ffn_gate_inp_shexp.weight")
                shared = shared * (1 / (1 + np.exp(-gsh)))[:, None]
            out = out + shared
        return out

    def forward(tokens, margins=None, first=0):
        n = len(tokens)
        x = weight("token_embd.weight")[tokens].astype(np.float64)
        if gemma:
            x = x * np.float32(np.sqrt(np.float32(n_embd)))

        def rope(q, base):  # [n, heads, head_dim]
            inv = base ** (-np.arange(0, head_dim, 2) / head_dim)
            ang = np.arange(n)[:, None] * inv[None, :]
            cos, sin = np.cos(ang)[:, None], np.sin(ang)[:, None]
            if neox:
                a, b = q[..., : head_dim // 2], q[..., head_dim // 2 :]
                return np.concatenate([a * cos - b * sin, a * sin + b * cos], -1)
            a, b = q[..., 0::2], q[..., 1::2]
            out = np.empty_like(q)
            out[..., 0::2], out[..., 1::2] = a * cos - b * sin, a * sin + b * cos
            return out

        mask = np.triu(np.full((n, n), -np.inf), 1)[None]
        back = np.arange(n)[:, None] - np.arange(n)[None, :]
        window_mask = np.where(back >= window, -np.inf, 0.0)[None] + mask
        for layer in range(n_layer):
            p = f"blk.{layer}."
            h = rms(x, weight(p + "attn_norm.weight"))
            if p + "attn_qkv.weight" in tensors:
                qkv = h @ weight(p + "attn_qkv.weight").T
                q, k, v = np.split(qkv, [n_head * head_dim, (n_head + n_head_kv) * head_dim], axis=-1)
            else:
                q, k, v = (h @ weight(p + f"attn_{s}.weight").T for s in "qkv")
            if p + "attn_q.bias" in tensors:
                q, k, v = (m + weight(p + f"attn_{s}.bias") for m, s in zip((q, k, v), "qkv"))
            q, k, v = q.reshape(n, n_head, head_dim), k.reshape(n, n_head_kv, head_dim), v.reshape(n, n_head_kv, head_dim)
            if p + "attn_q_norm.weight" in tensors:
                q, k = rms(q, weight(p + "attn_q_norm.weight")), rms(k, weight(p + "attn_k_norm.weight"))
            layer_base = 10000.0 if gemma and windowed(layer) else base
            q, k = rope(q, layer_base), rope(k, layer_base)
            rep = n_head // n_head_kv
            k, v = np.repeat(k, rep, axis=1), np.repeat(v, rep, axis=1)
            m = window_mask if windowed(layer) else mask
            s = np.einsum("qhd,khd->hqk", q, k) / np.sqrt(head_dim) + m
            s = np.exp(s - s.max(-1, keepdims=True))
            s /= s.sum(-1, keepdims=True)
            o = np.einsum("hqk,khd->qhd", s, v).reshape(n, n_head * head_dim)
            o = o @ weight(p + "attn_output.weight").T
            if gemma:
                o = rms(o, weight(p + "post_attention_norm.weight"))
            x = x + o
            h = rms(x, weight(p + "ffn_norm.weight"))
            f = moe(h, p, margins) if n_expert and layer >= n_dense_lead else swiglu(h, p)
            if gemma:
                f = rms(f, weight(p + "post_ffw_norm.weight"))
            x = x + f
        x = rms(x[first:], weight("output_norm.weight"))
        out = weight("output.weight" if "output.weight" in tensors else "token_embd.weight")
        return x @ out.T

    return forward, window


def main(model_path, golden_path, out_path):
    forward, window = reference_forward(model_path)
    golden = json.load(open(golden_path))
    cases = [(c["prompt_tokens"], c["tokens"][:N_POSITIONS]) for c in golden["greedy"]]
    if window:
        first = cases[0][0]
        long = first + first[1:] * (window // (len(first) - 1) + 1)
        cases.append((long, cases[0][1]))
    out = []
    for prompt, gen in cases:
        logits = forward(prompt + gen[:-1], first=len(prompt) - 1)
        lp = logits - logits.max(-1, keepdims=True)
        lp = lp - np.log(np.exp(lp).sum(-1, keepdims=True))
        top5 = [[[int(i), float(row[i])] for i in np.argsort(-row, kind="stable")[:5]] for row in lp]
        out.append({"prompt_tokens": prompt, "forced_tokens": gen, "top5": top5})
        print(f"case done: top1 at first position {top5[0][0]}", file=sys.stderr)
    json.dump({"source": "scripts/ref_forward.py on " + model_path.split("/")[-1], "cases": out}, open(out_path, "w"))


if __name__ == "__main__":
    main(*sys.argv[1:4])
