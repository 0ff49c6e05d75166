#!/usr/bin/env python3
"""Split against one process: `tandem serve` alone, then `tandem box --layers 0:L` and
`tandem serve --split-at L --box ADDR`, the same invocation otherwise; each answers RUNS
completions (a ~512-token prompt of tests/data/eval-prose.txt, tagged so no prefix is
reused, 128 tokens, temperature 0, ignore_eos) one at a time, and the server's own timings
give prompt and decode tok/s. With --box-ns/--head-ns the box runs in one network namespace
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


def post(ns, url, body):
    if not ns:
        req = urllib.request.Request(url, json.dumps(body).encode(), {"Content-Type": "application/json"})
        return json.load(urllib.request.urlopen(req, timeout=900))
    out = subprocess.run(
        ["ip", "netns", "exec", ns, "curl", "-s", "-H", "Content-Type: application/json", "-d", json.dumps(body), url],
        capture_output=True, check=True, text=True,
    )
    return json.loads(out.stdout)


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
            flags = ["--split-at", str(a.split), "--box", f"{a.box_host}:9402"]
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
        return rows
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
    single, split = measure(a, False), measure(a, True)
    print("| | prompt tok/s | decode tok/s |\n|---|---|---|")
    for name, rows in (("one process", single), (f"split at {a.split}", split)):
        print(f"| {name} | {mean([r[0] for r in rows]):.1f} | {mean([r[1] for r in rows]):.2f} |")
    print(f"| ratio | {mean([r[0] for r in split]) / mean([r[0] for r in single]):.2f}× | "
          f"{mean([r[1] for r in split]) / mean([r[1] for r in single]):.2f}× |")


if __name__ == "__main__":
    main()
