#!/usr/bin/env python3
"""Two builds of tandem side by side in one run: `tandem bench model --json` of build A
and build B on each model, alternating A, B, A, B (--rounds), so that both meet the same
machine noise. Prints, per model, pp, tg, batch-8 aggregate and the verify k=8 cost of
each build (the mean of its rounds) and B over A; writes the raw reports as JSON.

    scripts/bench_ab.py --a /tmp/tandem-before --b target/release/tandem \
        [--models smollm2-135m,qwen2.5-coder-0.5b,qwen2.5-coder-1.5b] [--rounds 2] \
        [--out bench/results/ab.json] [-- extra bench model flags]
"""

import argparse
import json
import subprocess
import sys
import time


def bench(binary, model, extra):
    cmd = [binary, "bench", "model", "-m", model, "--json"] + extra
    out = json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True).stdout)
    # With a peer the report sits under "tandem"; alone it is the whole object.
    return out.get("tandem", out)


def figures(report):
    batch = {p["batch"]: p for p in report["batched"]}
    verify = {p["k"]: p for p in report["verify"]}
    return {
        "pp": report["pp_tok_s"],
        "tg": report["tg_tok_s"],
        "b8": batch.get(8, {}).get("tok_s"),
        "b8x": batch.get(8, {}).get("ratio"),
        "v8": verify.get(8, {}).get("ms"),
        "v8x": verify.get(8, {}).get("ratio"),
    }


def mean(xs):
    xs = [x for x in xs if x is not None]
    return sum(xs) / len(xs) if xs else None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--a", required=True, help="build A (the baseline)")
    ap.add_argument("--b", required=True, help="build B")
    ap.add_argument("--models", default="smollm2-135m,qwen2.5-coder-0.5b,qwen2.5-coder-1.5b")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--out")
    ap.add_argument("extra", nargs="*", help="flags for tandem bench model")
    args = ap.parse_args()
    raw = {}
    rows = []
    for model in args.models.split(","):
        runs = {"a": [], "b": []}
        for _ in range(args.rounds):
            for side in ("a", "b"):
                runs[side].append(bench(getattr(args, side), model, args.extra))
        raw[model] = runs
        f = {s: [figures(r) for r in runs[s]] for s in runs}
        m = {s: {k: mean([x[k] for x in f[s]]) for k in f[s][0]} for s in f}
        rows.append((model, m["a"], m["b"]))
    print("| model | pp512 A / B tok/s | tg128 A / B tok/s | batch-8 A / B tok/s | verify k=8 A / B ms | B/A pp, tg, b8, 1/v8 |")
    print("|---|---|---|---|---|---|")
    for model, a, b in rows:
        ratios = ", ".join(
            f"{r:.3f}"
            for r in (b["pp"] / a["pp"], b["tg"] / a["tg"], b["b8"] / a["b8"], a["v8"] / b["v8"])
        )
        print(
            f"| {model} | {a['pp']:.1f} / {b['pp']:.1f} | {a['tg']:.2f} / {b['tg']:.2f} "
            f"| {a['b8']:.1f} / {b['b8']:.1f} | {a['v8']:.1f} / {b['v8']:.1f} | {ratios} |"
        )
    if args.out:
        with open(args.out, "w") as fh:
            json.dump(
                {"a": args.a, "b": args.b, "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "runs": raw},
                fh,
                indent=1,
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
