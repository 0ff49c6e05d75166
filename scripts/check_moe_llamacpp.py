#!/usr/bin/env python3
"""Checks that llama.cpp reads tandem's mixtures of experts as tandem does: for Mixtral,
qwen2moe (gated shared expert) and qwen3moe models written by `tandem synth` with f32
weights (so that neither engine rounds activations), llama.cpp's logits over 64 teacher-
forced tokens (through the `llama-cpp-python` package) are compared with the float64 numpy
forward of scripts/ref_forward.py, which crates/model/tests/moe.rs holds tandem to.

usage: python3 scripts/check_moe_llamacpp.py TANDEM_BINARY
(requires: pip install gguf==0.19.0 numpy llama-cpp-python)
"""
import os
import subprocess
import sys
import tempfile

import numpy as np
from llama_cpp import Llama

sys.path.insert(0, os.path.dirname(__file__))
from ref_forward import reference_forward  # noqa: E402

MODELS = [
    ("llama", 8, 2),
    ("qwen2moe", 16, 4),
    ("qwen3moe", 32, 3),
    ("qwen3moe", 64, 8),
]


def main(binary):
    tokens = [int(t) for t in np.random.default_rng(5).integers(0, 49152, 64)]
    worst_all = 0.0
    with tempfile.TemporaryDirectory() as tmp:
        for arch, n_expert, k in MODELS:
            path = os.path.join(tmp, f"{arch}-{k}of{n_expert}.gguf")
            subprocess.run(
                [binary, "synth", "-o", path, "--arch", arch, "--n-embd", "64", "--n-layer", "2", "--n-head", "4",
                 "--n-head-kv", "2", "--n-ff", "128", "--experts", str(n_expert), "--experts-used", str(k),
                 "--n-ff-exp", "32", "--type", "f32", "--tokenizer", "smollm2-135m"],
                check=True, capture_output=True,
            )
            llm = Llama(path, n_ctx=128, n_batch=64, n_threads=2, logits_all=True, verbose=False)
            llm.eval(tokens)
            ours = np.array(llm.scores[: len(tokens)], dtype=np.float64)
            ref = reference_forward(path)(tokens)
            scale = np.maximum(np.abs(ref).max(-1), 1.0)
            worst = float((np.abs(ours - ref).max(-1) / scale).max())
            same_top = int((ours.argmax(-1) == ref.argmax(-1)).sum())
            print(f"{arch} {k} of {n_expert}: largest relative logit difference {worst:.2e}, "
                  f"same top token at {same_top}/{len(tokens)} positions")
            worst_all = max(worst_all, worst)
            del llm
    return worst_all


if __name__ == "__main__":
    worst = main(sys.argv[1])
    sys.exit(0 if worst < 1e-3 else 1)
