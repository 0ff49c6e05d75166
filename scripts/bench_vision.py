#!/usr/bin/env python3
"""First token with one image: Gemma 3 270M with a synthetic Gemma 3 tower of the real
geometry (896-pixel images, 14-pixel patches: 4096 patches, 256 embeddings; --tower-* shape its
width and depth), a 512 x 512 PNG in one chat message, streamed at temperature 0; the time from
sending the request to the first streamed token, on `tandem serve --mmproj` and on llama-server
--mmproj (the peer, same files, same threads, flash attention off), in the same run. Each round
sends an image neither server has seen (so neither prefix cache nor embedding cache helps);
prints the medians and tandem's time over the peer's, and writes bench/results/vision.{json,md}.

usage: scripts/bench_vision.py TANDEM_BINARY LLAMA_SERVER_BINARY [--rounds 5] [--threads 2]
(the peer's shared libraries on LD_LIBRARY_PATH)
"""
import argparse
import base64
import json
import os
import platform
import re
import signal
import statistics
import struct
import subprocess
import tempfile
import time
import urllib.request
import zlib

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def png(width, height, seed):
    rows = []
    for y in range(height):
        row = bytearray(b"\x00")
        for x in range(width):
            row += bytes(((x * 7 + seed * 31) % 256, (y * 5 + seed * 17) % 256, ((x ^ y) + seed) % 256))
        rows.append(bytes(row))

    def chunk(kind, data):
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(b"".join(rows))) + chunk(b"IEND", b"")


def start(cmd, log, env=None):
    proc = subprocess.Popen(cmd, stdout=open(log, "w"), stderr=subprocess.STDOUT, env=env)
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        text = open(log).read()
        m = re.search(r"listening on (http://[\d.]+:\d+)", text) or re.search(r"server is listening on (http://[\d.]+:\d+)", text)
        if m:
            url = m.group(1)
            try:
                with urllib.request.urlopen(url + "/health", timeout=2) as r:
                    if r.status == 200:
                        return proc, url
            except Exception:
                pass
        if proc.poll() is not None:
            raise RuntimeError(f"{cmd[0]} exited:\n{text}")
        time.sleep(0.1)
    raise RuntimeError(f"{cmd[0]} not ready:\n{open(log).read()}")


def first_token_s(url, image):
    body = {
        "model": "m",
        "stream": True,
        "temperature": 0,
        "max_tokens": 4,
        "messages": [{"role": "user", "content": [
            {"type": "text", "text": "Describe this image."},
            {"type": "image_url", "image_url": {"url": "data:image/png;base64," + base64.b64encode(image).decode()}},
        ]}],
    }
    req = urllib.request.Request(url + "/v1/chat/completions", json.dumps(body).encode(), {"Content-Type": "application/json"})
    t0 = time.monotonic()
    with urllib.request.urlopen(req, timeout=1800) as r:
        for line in r:
            if line.startswith(b"data: ") and b'"content"' in line:
                return time.monotonic() - t0
    raise RuntimeError("no token streamed")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("tandem")
    ap.add_argument("peer")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--tower-embd", type=int, default=128)
    ap.add_argument("--tower-layers", type=int, default=2)
    a = ap.parse_args()
    model = subprocess.run([a.tandem, "pull", "gemma3-270m"], check=True, capture_output=True, text=True).stdout.strip()
    tmp = tempfile.mkdtemp()
    tower = os.path.join(tmp, "tower.gguf")
    subprocess.run([a.tandem, "synth", "--mmproj", model, "--n-embd", str(a.tower_embd), "--n-layer", str(a.tower_layers),
                    "--n-head", str(max(1, a.tower_embd // 32)), "--n-ff", str(4 * a.tower_embd), "-o", tower],
                   check=True, capture_output=True)
    # Gemma 3 270M's file has no template; llama-server's built-in "gemma" drops the image's
    # marker, so it reads this Jinja one (tandem's built-in Gemma template renders the same).
    template = os.path.join(tmp, "gemma.jinja")
    with open(template, "w") as f:
        f.write("{{ bos_token }}{% for m in messages %}<start_of_turn>{{ 'model' if m['role'] == 'assistant' "
                "else m['role'] }}\n{% if m['content'] is string %}{{ m['content'] }}{% else %}{% for p in "
                "m['content'] %}{{ p['text'] }}{% endfor %}{% endif %}<end_of_turn>\n{% endfor %}"
                "{% if add_generation_prompt %}<start_of_turn>model\n{% endif %}")
    arms = {
        "tandem": [a.tandem, "serve", "-m", model, "--mmproj", tower, "--port", "0", "-t", str(a.threads), "-np", "1", "-c", "2048"],
        "llama.cpp": [a.peer, "-m", model, "--mmproj", tower, "--port", "18931", "-t", str(a.threads), "-np", "1", "-c", "2048",
                      "-fa", "off", "--jinja", "--chat-template-file", template],
    }
    times = {}
    for name, cmd in arms.items():
        proc, url = start(cmd, os.path.join(tmp, name + ".log"))
        try:
            first_token_s(url, png(512, 512, 1000))
            times[name] = [first_token_s(url, png(512, 512, r)) for r in range(a.rounds)]
        finally:
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=30)
    med = {k: statistics.median(v) for k, v in times.items()}
    ratio = med["tandem"] / med["llama.cpp"]
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout.strip()
    cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), platform.machine())
    result = {
        "bench": "vision first token", "commit": commit, "cpu": cpu, "threads": a.threads,
        "model": "gemma-3-270m-q4_k_m", "tower": {"image_size": 896, "patch": 14, "n_embd": a.tower_embd, "layers": a.tower_layers},
        "image": "512x512 PNG", "rounds": a.rounds, "first_token_s": times, "median_s": med,
        "tandem_over_llama_cpp": ratio,
    }
    os.makedirs(os.path.join(ROOT, "bench/results"), exist_ok=True)
    with open(os.path.join(ROOT, "bench/results/vision.json"), "w") as f:
        json.dump(result, f, indent=1)
    md = (f"# First token with one image\n\nGemma 3 270M (Q4_K_M) with a synthetic Gemma 3 tower ({a.tower_embd} wide, "
          f"{a.tower_layers} blocks, 896-pixel images: 4096 patches, 256 embeddings), one 512x512 PNG in a chat "
          f"message, streamed; {a.rounds} rounds of images neither server had seen; {cpu}, {a.threads} threads; "
          f"commit {commit}; `scripts/bench_vision.py`.\n\n"
          f"| server | median first token (s) |\n|---|---|\n"
          f"| tandem serve --mmproj | {med['tandem']:.3f} |\n| llama-server --mmproj | {med['llama.cpp']:.3f} |\n\n"
          f"tandem / llama.cpp: **{ratio:.2f}x** the time (lower is better).\n")
    with open(os.path.join(ROOT, "bench/results/vision.md"), "w") as f:
        f.write(md)
    print(md)


if __name__ == "__main__":
    main()
