#!/usr/bin/env python3
"""What long stop strings cost the other users: USERS streams decode plainly while one more
request carries the largest stop strings allowed (16 of 1 KiB, none of which occurs), against
the same run with that request carrying none. Prints the other users' mean decode tok/s in
both arms and their ratio.

usage: scripts/bench_stops.py BINARY [--model smollm2-135m] [--users 3] [--tokens 256] [--threads 2]
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

STOPS = [chr(ord("A") + i) * 1023 + "#" for i in range(16)]


def post(url, body):
    req = urllib.request.Request(url, json.dumps(body).encode(), {"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=1800) as r:
        return json.loads(r.read())


def run(url, users, tokens, stops):
    def one(i):
        body = {"prompt": f"Story {i}: Once upon a time", "max_tokens": tokens, "temperature": 0,
                "ignore_eos": True}
        if i == users and stops:
            body["stop"] = STOPS
        return post(url + "/v1/completions", body)

    with ThreadPoolExecutor(users + 1) as pool:
        answers = list(pool.map(one, range(users + 1)))
    others = [a["timings"]["predicted_per_second"] for a in answers[:users]]
    return sum(others) / len(others)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("binary")
    ap.add_argument("--model", default="smollm2-135m")
    ap.add_argument("--users", type=int, default=3)
    ap.add_argument("--tokens", type=int, default=256)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=3)
    a = ap.parse_args()
    log = tempfile.NamedTemporaryFile(prefix="bench-stops-", suffix=".log", delete=False).name
    proc = subprocess.Popen([a.binary, "serve", "-m", a.model, "--port", "0", "-t", str(a.threads),
                             "-np", str(a.users + 1), "-c", "8192", "--kv-unified"],
                            stdout=open(log, "w"), stderr=subprocess.STDOUT)
    try:
        while True:
            text = open(log).read()
            m = re.search(r"listening on (http://[\d.]+:\d+)", text)
            if m and "ready in" in text:
                url = m.group(1)
                break
            if proc.poll() is not None:
                raise RuntimeError(text)
            time.sleep(0.2)
        plain, stopped = [], []
        for _ in range(a.rounds):
            plain.append(run(url, a.users, a.tokens, False))
            stopped.append(run(url, a.users, a.tokens, True))
        p, s = sum(plain) / len(plain), sum(stopped) / len(stopped)
        print(f"{a.model}, {a.users} other users: decode tok/s each {p:.1f} without, {s:.1f} beside a request "
              f"with 16 stop strings of 1 KiB ({s / p:.3f}x; {a.rounds} rounds each, alternating)")
    finally:
        os.kill(proc.pid, signal.SIGTERM)
        proc.wait()


if __name__ == "__main__":
    main()
