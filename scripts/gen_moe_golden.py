#!/usr/bin/env python3
"""llama.cpp's reading of mixtures of experts, as golden data: Mixtral, qwen2moe (gated
shared expert) and qwen3moe models written by `tandem synth` with f32 weights (so that no
engine rounds activations) and SmolLM2's tokenizer; llama.cpp (the `llama-cpp-python`
package, f32 KV cache) scores 64 teacher-forced tokens, and its top-5 log-probabilities at
every position go to crates/model/tests/golden/moe-llamacpp.json, which
crates/model/tests/moe.rs compares tandem with. Its logits are also checked against the
float64 numpy forward of scripts/ref_forward.py (printed; the script fails above 1e-4).

usage: python3 scripts/gen_moe_golden.py TANDEM_BINARY
(requires: pip install gguf==0.19.0 numpy llama-cpp-python; SmolLM2 pulled)
"""
import json
import os
import subprocess
import sys
import tempfile

import numpy as np
from llama_cpp import Llama

sys.path.insert(0, os.path.dirname(__file__))
from ref_forward import reference_forward  # noqa: E402

OUT = os.path.join(os.path.dirname(__file__), "..", "crates", "model", "tests", "golden", "moe-llamacpp.json")
SHAPE = {"n_embd": 64, "n_layer": 2, "n_head": 4, "n_head_kv": 2, "n_ff": 128, "n_ff_exp": 32, "seed": 1}
MODELS = [
    ("llama", 8, 2),
    ("qwen2moe", 16, 4),
    ("qwen3moe", 32, 3),
    ("qwen3moe", 64, 8),
]


def main(binary):
    tokens = [int(t) for t in np.random.default_rng(5).integers(0, 49152, 64)]
    worst_all = 0.0
    cases = []
    with tempfile.TemporaryDirectory() as tmp:
        for arch, n_expert, k in MODELS:
            path = os.path.join(tmp, f"{arch}-{k}of{n_expert}.gguf")
            subprocess.run(
                [binary, "synth", "-o", path, "--arch", arch, "--experts", str(n_expert), "--experts-used", str(k),
                 "--type", "f32", "--tokenizer", "smollm2-135m"]
                + [a for key, v in SHAPE.items() for a in ("--" + key.replace("_", "-"), str(v))],
                check=True, capture_output=True,
            )
            # An f32 KV cache too: llama.cpp's default f16 one moves logits by ~1e-3 and can
            # flip a close expert choice.
            llm = Llama(path, n_ctx=128, n_batch=64, n_threads=2, logits_all=True, type_k=0, type_v=0,
                        verbose=False)
            llm.eval(tokens)
            ours = np.array(llm.scores[: len(tokens)], dtype=np.float64)
            margins = []
            ref = reference_forward(path)[0](tokens, margins)
            scale = np.maximum(np.abs(ref).max(-1), 1.0)
            worst = float((np.abs(ours - ref).max(-1) / scale).max())
            same_top = int((ours.argmax(-1) == ref.argmax(-1)).sum())
            print(f"{arch} {k} of {n_expert}: largest relative logit difference {worst:.2e}, "
                  f"same top token at {same_top}/{len(tokens)} positions (closest expert choice: "
                  f"{min(margins):.1e} relative)")
            worst_all = max(worst_all, worst)
            lp = ours - ours.max(-1, keepdims=True)
            lp = lp - np.log(np.exp(lp).sum(-1, keepdims=True))
            top5 = [[[int(i), float(row[i])] for i in np.argsort(-row, kind="stable")[:5]] for row in lp]
            cases.append({"arch": arch, "n_expert": n_expert, "n_expert_used": k, "tokens": tokens, "top5": top5})
            del llm
    json.dump({"source": "scripts/gen_moe_golden.py, llama.cpp of llama-cpp-python 0.3.36", "shape": SHAPE,
               "cases": cases}, open(OUT, "w"))
    return worst_all


if __name__ == "__main__":
    worst = main(sys.argv[1])
    sys.exit(0 if worst < 1e-4 else 1)
