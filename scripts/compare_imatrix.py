#!/usr/bin/env python3
"""Compares two GGUF importance matrices (tandem imatrix's and llama-imatrix's, say):
the entries each has, the counts, and per entry the largest relative difference of
in_sum2 (|a - b| / max(|a|, |b|) over the columns), plus the relative difference of the
means llama-quantize would use. Usage: compare_imatrix.py OURS.gguf THEIRS.gguf"""

import sys

import numpy as np
from gguf import GGUFReader


def entries(path):
    r = GGUFReader(path)
    t = {x.name: np.array(x.data, dtype=np.float64).reshape(-1) for x in r.tensors}
    meta = {}
    for k in ("imatrix.chunk_count", "imatrix.chunk_size"):
        f = r.fields[k]
        meta[k] = int(f.parts[f.data[0]][0])
    out = {}
    for name in t:
        if name.endswith(".in_sum2"):
            base = name[: -len(".in_sum2")]
            out[base] = (t[name], t[base + ".counts"])
    return out, meta


def main():
    a, ma = entries(sys.argv[1])
    b, mb = entries(sys.argv[2])
    print("metadata:", ma, "vs", mb)
    only_a, only_b = sorted(set(a) - set(b)), sorted(set(b) - set(a))
    print(f"entries: {len(a)} vs {len(b)}; only in the first: {only_a}; only in the second: {only_b}")
    worst, worst_name, rels = 0.0, None, []
    for name in sorted(set(a) & set(b)):
        (sa, ca), (sb, cb) = a[name], b[name]
        assert sa.shape == sb.shape, (name, sa.shape, sb.shape)
        assert np.array_equal(ca, cb), (name, ca, cb)
        den = np.maximum(np.abs(sa), np.abs(sb))
        rel = np.where(den > 0, np.abs(sa - sb) / np.where(den > 0, den, 1), 0)
        rels.append(rel)
        if rel.max() > worst:
            worst, worst_name = rel.max(), name
    allrel = np.concatenate(rels)
    print(f"counts equal for every shared entry")
    print(f"in_sum2 relative difference: max {worst:.3e} ({worst_name}), "
          f"median {np.median(allrel):.3e}, 99th percentile {np.percentile(allrel, 99):.3e}, "
          f"mean {allrel.mean():.3e} over {allrel.size} values")


main()
