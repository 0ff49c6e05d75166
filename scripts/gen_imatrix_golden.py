#!/usr/bin/env python3
"""llama-imatrix's importance matrix as golden data: a qwen2moe model (attention with
biases, a router, 8 experts of which 3 per token, a gated shared expert) written by
`tandem synth` with f32 weights (so that no engine rounds activations to 8 bits) and
SmolLM2's tokenizer, over tests/data/eval-prose.txt with `-c 64 --chunks 2`. Per entry:
the counts, and per matrix (expert) the sum of its in_sum2 and its first 8 columns, to
crates/tandem/tests/golden/imatrix-llamacpp.json, which crates/tandem/tests/cli_imatrix.rs
compares `tandem imatrix` with.

usage: python3 scripts/gen_imatrix_golden.py TANDEM_BINARY LLAMA_IMATRIX_BINARY
(requires: pip install gguf numpy; SmolLM2 pulled)
"""
import json
import os
import subprocess
import sys
import tempfile

import numpy as np
from gguf import GGUFReader

ROOT = os.path.join(os.path.dirname(__file__), "..")
OUT = os.path.join(ROOT, "crates", "tandem", "tests", "golden", "imatrix-llamacpp.json")
TEXT = os.path.join(ROOT, "tests", "data", "eval-prose.txt")
SHAPE = {"arch": "qwen2moe", "n_embd": 64, "n_layer": 2, "n_head": 4, "n_head_kv": 2, "n_ff": 96,
         "experts": 8, "experts_used": 3, "n_ff_exp": 32, "seed": 1}
CTX, CHUNKS, COLUMNS = 64, 2, 8


def main(tandem, llama_imatrix):
    smollm2 = subprocess.run([tandem, "pull", "smollm2-135m"], check=True, capture_output=True,
                             text=True).stdout.strip()
    with tempfile.TemporaryDirectory() as tmp:
        model = os.path.join(tmp, "model.gguf")
        flags = [f"--{k.replace('_', '-')}={v}" for k, v in SHAPE.items()]
        subprocess.run([tandem, "synth", "-o", model, *flags, "--type", "f32", "--tokenizer", smollm2],
                       check=True)
        out = os.path.join(tmp, "imatrix.gguf")
        subprocess.run([llama_imatrix, "-m", model, "-f", TEXT, "-o", out, "-c", str(CTX), "--chunks",
                        str(CHUNKS), "-t", "1"], check=True, capture_output=True)
        r = GGUFReader(out)
        t = {x.name: np.array(x.data, dtype=np.float64).reshape(-1) for x in r.tensors}
    entries = {}
    for name in sorted(t):
        if not name.endswith(".in_sum2"):
            continue
        base = name[: -len(".in_sum2")]
        counts = t[base + ".counts"]
        rows = t[name].reshape(len(counts), -1)
        entries[base] = {
            "counts": [int(c) for c in counts],
            "sums": [float(f"{s:.7g}") for s in rows.sum(axis=1)],
            "columns": [[float(f"{v:.7g}") for v in row[:COLUMNS]] for row in rows],
        }
    golden = {"shape": SHAPE, "ctx": CTX, "chunks": CHUNKS, "entries": entries}
    with open(OUT, "w") as f:
        json.dump(golden, f, indent=1)
        f.write("\n")
    print(f"{len(entries)} entries to {OUT}")


main(sys.argv[1], sys.argv[2])
