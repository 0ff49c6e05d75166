#!/usr/bin/env python3
"""Split against one process: `tandem serve` alone, then `tandem box --layers 0:L` and
`tandem serve --split-at L --box ADDR`, the same invocation otherwise; each answers RUNS
completions (a ~512-token prompt of tests/data/eval-prose.txt, tagged so no prefix is
reused, 128 tokens, temperature 0, ignore_eos) one at a time, and the server's own timings
give prompt and decode tok/s; the split head's /metrics gives the per-hop figures (box and
head compute per step, what the link adds, bytes per step and per generated token). With --box-ns/--head-ns the box runs in one network namespace
and the head (and this client) in another, the box reached at --box-host (for a veth pair
with netem delay between them; made by the caller).

usage: scripts/bench_split.py BINARY MODEL SPLIT [--threads 2] [--runs 3]
       [--box-ns NS --head-ns NS --box-host IP]
"""
import argparse
import json
import os
import re
import signal
import subprocess
import tempfile
import time
import urllib.request

ROOT = os.path.join(os.path.dirname(__file__), "..")


def start(ns, argv, log):
    prefix = ["ip", "netns", "exec", ns] if ns else []
    return subprocess.Popen(prefix + argv, stdout=open(log, "w"), stderr=subprocess.STDOUT)


def wait_for(log, pattern, timeout=600):
    deadline = time.time() + timeout
    while time.time() < deadline:
        m = re.search(pattern, open(log).read())
        if m:
            return m.group(1)
        time.sleep(0.1)
    raise RuntimeError(open(log).read())


def fetch(ns, url, body=None):
    """The response body to a POST of `body` as JSON (a GET without one), as text."""
    if not ns:
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(url, data, {"Content-Type": "application/json"})
        return urllib.request.urlopen(req, timeout=900).read().decode()
    args = [] if body is None else ["-H", "Content-Type: application/json", "-d", json.dumps(body)]
    out = subprocess.run(["ip", "netns", "exec", ns, "curl", "-s", *args, url],
                         capture_output=True, check=True, text=True)
    return out.stdout


def post(ns, url, body):
    return json.loads(fetch(ns, url, body))


def hops(metrics):
    """Per-hop figures from the split head's /metrics."""
    v = {l.split()[0][len("tandem:"):]: float(l.split()[1]) for l in metrics.splitlines()
         if l.startswith("tandem:") and " " in l}
    steps = max(v["box_requests_total"], 1)
    return {
        "steps": int(steps),
        "box compute ms/step": 1e3 * v["box_compute_seconds_total"] / steps,
        "link ms/step": 1e3 * (v["box_wait_seconds_total"] - v["box_compute_seconds_total"]) / steps,
        "head compute ms/step": 1e3 * v["head_compute_seconds_total"] / steps,
        "bytes/step": (v["box_bytes_sent_total"] + v["box_bytes_received_total"]) / steps,
        "bytes/token": v["box_bytes_per_token"],
    }


def measure(a, split):
    text = open(os.path.join(ROOT, "tests", "data", "eval-prose.txt")).read()
    logs = tempfile.mkdtemp(prefix="tandem-bench-split-")
    procs = []
    common = ["-m", a.model, "-t", str(a.threads), "-c", "4096"]
    try:
        flags = []
        if split:
            procs.append(start(a.box_ns, [a.binary, "box", *common, "--layers", f"0:{a.split}",
                                          "--listen", f"{a.box_host}:9402"], f"{logs}/box.log"))
            wait_for(f"{logs}/box.log", r"listening on (\S+)")
            flags = ["--split-at", str(a.split), "--box", f"{a.box_host}:9402", "--metrics"]
        procs.append(start(a.head_ns, [a.binary, "serve", *common, "-np", "1", "--port", "9403", *flags],
                           f"{logs}/serve.log"))
        wait_for(f"{logs}/serve.log", r"(ready)")
        url = "http://127.0.0.1:9403/v1/completions"
        post(a.head_ns, url, {"prompt": "warm up", "max_tokens": 8, "temperature": 0})
        rows = []
        for r in range(a.runs):
            prompt = f"[{'split' if split else 'single'} {r}] " + text[r * 3000: r * 3000 + 2400]
            t = post(a.head_ns, url, {"prompt": prompt, "max_tokens": 128, "temperature": 0, "ignore_eos": True})
            rows.append((t["timings"]["prompt_per_second"], t["timings"]["predicted_per_second"]))
        return rows, hops(fetch(a.head_ns, "http://127.0.0.1:9403/metrics")) if split else None
    finally:
        for p in reversed(procs):
            os.kill(p.pid, signal.SIGTERM)
            p.wait()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("binary")
    ap.add_argument("model")
    ap.add_argument("split", type=int)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--box-ns")
    ap.add_argument("--head-ns")
    ap.add_argument("--box-host", default="127.0.0.1")
    a = ap.parse_args()
    mean = lambda xs: sum(xs) / len(xs)
    (single, _), (split, link) = measure(a, False), measure(a, True)
    print("| | prompt tok/s | decode tok/s |\n|---|---|---|")
    for name, rows in (("one process", single), (f"split at {a.split}", split)):
        print(f"| {name} | {mean([r[0] for r in rows]):.1f} | {mean([r[1] for r in rows]):.2f} |")
    print(f"| ratio | {mean([r[0] for r in split]) / mean([r[0] for r in single]):.2f}× | "
          f"{mean([r[1] for r in split]) / mean([r[1] for r in single]):.2f}× |")
    print("\nper hop (every step of the split run, prefill chunks and decode steps):")
    print(" | ".join(f"{k} {v:.2f}" if isinstance(v, float) else f"{k} {v}" for k, v in link.items()))


if __name__ == "__main__":
    main()
