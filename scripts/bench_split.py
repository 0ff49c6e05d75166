#!/usr/bin/env python3
"""Split against one process: `tandem serve` alone, then `tandem box --layers 0:L` and
`tandem serve --split-at L --box ADDR`, the same invocation otherwise; each answers RUNS
completions (a ~512-token prompt of tests/data/eval-prose.txt, tagged so no prefix is
reused, 128 tokens, temperature 0, ignore_eos) one at a time, and the server's own timings
give prompt and decode tok/s; the split head's /metrics gives the per-hop figures (box and
head compute per step, what the link adds, bytes per step and per generated token). With --box-ns/--head-ns the box runs in one network namespace
and the head (and this client) in another, the box reached at --box-host (for a veth pair
with netem delay between them; made by the caller).

With --users N, each run sends N completions at once (distinct prompts, both servers
with -np N), and the aggregate tok/s (all tokens over the run's wall time) is compared too;
with --pipeline the split head pipelines them (--box-pipeline: one cohort on the box while
the head finishes the other).
--prompt-chars sets the prompt's length (2400 characters ≈ 512 tokens), --box-chunk the
rows per streamed prompt chunk, --box-threads/--head-threads each stage's threads (default
--threads). The split run also reports how long both stages computed at once
(tandem:split_both_busy_seconds_total) against its wall time.

usage: scripts/bench_split.py BINARY MODEL SPLIT [--threads 2] [--runs 3] [--users 1]
       [--prompt-chars 2400] [--box-chunk N] [--pipeline] [--box-threads T] [--head-threads T]
       [--delay-ms D] [--box-ns NS --head-ns NS --box-host IP]

--delay-ms D puts scripts/delay_link.py between head and box (D ms each way, for a kernel
without netem; it runs beside the head and takes some of its CPU).
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
from concurrent.futures import ThreadPoolExecutor

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


def values(metrics):
    return {l.split()[0][len("tandem:"):]: float(l.split()[1]) for l in metrics.splitlines()
            if l.startswith("tandem:") and " " in l}


def hops(metrics):
    """Per-hop figures from the split head's /metrics."""
    v = values(metrics)
    steps = max(v["box_requests_total"], 1)
    return {
        "steps": int(steps),
        "box compute ms/step": 1e3 * v["box_compute_seconds_total"] / steps,
        "wait beyond box compute ms/step": 1e3 * (v["box_wait_seconds_total"] - v["box_compute_seconds_total"]) / steps,
        "head compute ms/step": 1e3 * v["head_compute_seconds_total"] / steps,
        "bytes/step": (v["box_bytes_sent_total"] + v["box_bytes_received_total"]) / steps,
        "bytes/token": v["box_bytes_per_token"],
        "reconnects": int(v["box_reconnects_total"]),
    }


def measure(a, split):
    """Per request (prompt tok/s, decode tok/s), per run (tokens, wall seconds), the split
    head's per-hop figures and the seconds both stages computed at once in the runs."""
    text = open(os.path.join(ROOT, "tests", "data", "eval-prose.txt")).read()
    logs = tempfile.mkdtemp(prefix="tandem-bench-split-")
    procs = []
    common = ["-m", a.model, "-c", str(4096 * a.users)]
    try:
        flags, threads = [], a.threads
        if split:
            procs.append(start(a.box_ns, [a.binary, "box", *common, "-t", str(a.box_threads or a.threads),
                                          "--layers", f"0:{a.split}", "--listen", f"{a.box_host}:9402"],
                               f"{logs}/box.log"))
            wait_for(f"{logs}/box.log", r"listening on (\S+)")
            box_at = f"{a.box_host}:9402"
            if a.delay_ms:
                procs.append(start(a.head_ns, ["python3", os.path.join(ROOT, "scripts", "delay_link.py"),
                                               "127.0.0.1:9404", box_at, str(a.delay_ms)], f"{logs}/link.log"))
                wait_for(f"{logs}/link.log", r"(delaying)")
                box_at = "127.0.0.1:9404"
            flags = ["--split-at", str(a.split), "--box", box_at, "--metrics"]
            if a.box_chunk:
                flags += ["--box-chunk", str(a.box_chunk)]
            if a.pipeline:
                flags += ["--box-pipeline"]
            threads = a.head_threads or a.threads
        procs.append(start(a.head_ns, [a.binary, "serve", *common, "-t", str(threads), "-np", str(a.users),
                                       "--port", "9403", *flags], f"{logs}/serve.log"))
        wait_for(f"{logs}/serve.log", r"(ready)")
        url = "http://127.0.0.1:9403/v1/completions"
        post(a.head_ns, url, {"prompt": "warm up", "max_tokens": 8, "temperature": 0})
        both = lambda: values(fetch(a.head_ns, "http://127.0.0.1:9403/metrics")).get(
            "split_both_busy_seconds_total", 0.0) if split else 0.0
        rows, runs, both0 = [], [], both()
        n = a.prompt_chars
        with ThreadPoolExecutor(a.users) as pool:
            for r in range(a.runs):
                ask = lambda u: post(a.head_ns, url, {
                    "prompt": f"[{'split' if split else 'single'} {r} {u}] "
                              + text[(r * a.users + u) * 3000 % len(text):][:n],
                    "max_tokens": 128, "temperature": 0, "ignore_eos": True})
                t0 = time.monotonic()
                done = list(pool.map(ask, range(a.users)))
                runs.append((sum(d["usage"]["completion_tokens"] for d in done), time.monotonic() - t0))
                rows += [(d["timings"]["prompt_per_second"], d["timings"]["predicted_per_second"]) for d in done]
        link = hops(fetch(a.head_ns, "http://127.0.0.1:9403/metrics")) if split else None
        return rows, runs, link, both() - both0
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
    ap.add_argument("--users", type=int, default=1)
    ap.add_argument("--prompt-chars", type=int, default=2400)
    ap.add_argument("--box-chunk", type=int)
    ap.add_argument("--pipeline", action="store_true")
    ap.add_argument("--delay-ms", type=float)
    ap.add_argument("--box-threads", type=int)
    ap.add_argument("--head-threads", type=int)
    ap.add_argument("--box-ns")
    ap.add_argument("--head-ns")
    ap.add_argument("--box-host", default="127.0.0.1")
    a = ap.parse_args()
    mean = lambda xs: sum(xs) / len(xs)
    (single, single_runs, _, _), (split, split_runs, link, both) = measure(a, False), measure(a, True)
    agg = lambda runs: sum(t for t, _ in runs) / sum(w for _, w in runs)
    print("| | prompt tok/s | decode tok/s | aggregate tok/s |\n|---|---|---|---|")
    for name, rows, runs in (("one process", single, single_runs), (f"split at {a.split}", split, split_runs)):
        print(f"| {name} | {mean([r[0] for r in rows]):.1f} | {mean([r[1] for r in rows]):.2f} | {agg(runs):.2f} |")
    print(f"| ratio | {mean([r[0] for r in split]) / mean([r[0] for r in single]):.2f}× | "
          f"{mean([r[1] for r in split]) / mean([r[1] for r in single]):.2f}× | "
          f"{agg(split_runs) / agg(single_runs):.2f}× |")
    wall = sum(w for _, w in split_runs)
    print(f"\nboth stages computing at once: {both:.2f} s of {wall:.2f} s wall ({100 * both / wall:.1f}%)")
    print("per hop (every step of the split run, prefill chunks and decode steps):")
    print(" | ".join(f"{k} {v:.2f}" if isinstance(v, float) else f"{k} {v}" for k, v in link.items()))


if __name__ == "__main__":
    main()
