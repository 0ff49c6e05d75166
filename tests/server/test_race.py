"""`tandem bench race`: a race of two real `tandem serve` configurations, and fake targets
whose failures and inconsistencies the harness must report rather than count."""

import itertools
import json
import os
import socket
import subprocess
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from conftest import ROOT

BINARY = os.environ.get("TANDEM_BIN", str(ROOT / "target" / "debug" / "tandem"))


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def race(out, *args, timeout=900):
    done = subprocess.run(
        [BINARY, "bench", "race", "--out", str(out), "--port", str(free_port()), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert done.returncode == 0, done.stderr
    doc = json.loads((out / "race.json").read_text())
    assert doc["kind"] == "tandem-race" and doc["version"] == 1
    return doc, (out / "race.md").read_text()


@pytest.mark.slow
def test_two_tandem_configurations(tmp_path):
    """Slow tier: the harness's accounting is checked against a fake server below, its
    report's parts by the `bench` crate's tests."""
    serve = f"{BINARY} serve -m smollm2-135m -t 2 -np 2 -c 4096"
    doc, md = race(
        tmp_path,
        "--launch", f"plain={serve}",
        "--launch", f"ngram={serve} --spec-type ngram",
        "--users", "1,2",
        "--prompt-sizes", "short,1k",
        "--runs", "1",
        "--max-tokens", "32",
    )
    for name in ["race.md", "race.json", "total-tok-s-short.svg", "total-tok-s-1k.svg", "ttft.svg"]:
        path = tmp_path / name
        assert path.stat().st_size > 0, name
        if name.endswith(".svg"):
            assert path.read_text().lstrip().startswith("<svg")

    # Warm-up aside: 1 + 2 users at 2 sizes, and one repeat per size, per target.
    assert len(doc["requests"]) == 2 * (2 * 3 + 2)
    assert all(r["outcome"] == "ok" and r["finish_reason"] for r in doc["requests"])
    assert {r["tag"] for r in doc["requests"] if r["pass"] != "repeat"} == {
        r["tag"] for r in doc["requests"] if r["target"] == "plain" and r["pass"] != "repeat"
    }, "both targets get the same prompts"
    assert len({r["tag"] for r in doc["requests"] if r["target"] == "plain" and r["pass"] != "repeat"}) == 6
    for t in doc["targets"]:
        assert t["error"] is None and t["sized_by_tokenizer"] and t["peak_rss_mib"] > 50
        assert t["warmup"]["outcome"] == "ok"

    assert len(doc["cells"]) == 2 * 2 * 2
    for c in doc["cells"]:
        assert c["requests"] == c["users"] and c["ok"] == c["users"] and not c["failures"]
        assert c["ttft_s"] > 0 and c["prompt_tok_s"] > 0 and c["decode_tok_s"] > 0 and c["total_tok_s"] > 0
        assert all(v > 0 for v in c["itl_ms"])
        sized = 64 if c["size"] == "short" else 1024
        assert sized <= c["prompt_tokens"] <= sized * 1.1 + 64, c
        # Only the chat template's fixed start may come from a cache.
        assert c["cached_tokens"] < 64
    for c in doc["cells"]:
        records = [
            r for r in doc["requests"]
            if (r["target"], r["size"], r["users"]) == (c["target"], c["size"], c["users"]) and r["pass"] != "repeat"
        ]
        tokens = sum(r["completion_tokens"] for r in records)
        level = next(
            lv for lv in doc["levels"] if (lv["target"], lv["size"], lv["users"]) == (c["target"], c["size"], c["users"])
        )
        assert c["total_tok_s"] == pytest.approx(tokens / level["wall_s"])

    checks = {c["what"]: c for c in doc["consistency"]}
    across = checks["plain vs ngram"]
    assert across["compared"] == 6 and across["identical"] == 6, across
    for name in ["plain", "ngram"]:
        repeat = checks[f"{name}: first answer vs asked again alone"]
        assert repeat["compared"] == 2 and repeat["identical"] == 2, repeat

    assert "## short prompts (64 tokens)" in md and "| measure | plain | ngram |" in md
    assert "2 users: total tok/s" in md and "## Formulas" in md


class Fake(BaseHTTPRequestHandler):
    """An OpenAI-compatible target that fails with llama.cpp's out-of-memory answer
    (`compute_error`) or streams different text every time (`random_text`)."""

    mode = "compute_error"
    answers = itertools.count()

    def log_message(self, *args):
        pass

    def do_GET(self):
        if self.path == "/v1/models":
            return self.reply(200, json.dumps({"object": "list", "data": [{"id": "fake", "object": "model"}]}))
        self.reply(404, json.dumps({"error": {"message": "not found"}}))

    def do_POST(self):
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        if self.path != "/v1/chat/completions":
            return self.reply(404, json.dumps({"error": {"message": "not found"}}))
        if self.mode == "compute_error":
            return self.reply(500, json.dumps({"error": {"code": 500, "message": "Compute error.", "type": "server_error"}}))
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Connection", "close")
        self.end_headers()
        words = ["answer", "number", str(next(self.answers))]
        for w in words:
            chunk = {"choices": [{"index": 0, "delta": {"content": w + " "}, "finish_reason": None}]}
            self.wfile.write(f"data: {json.dumps(chunk)}\n\n".encode())
            self.wfile.flush()
        end = {"choices": [{"index": 0, "delta": {}, "finish_reason": "length"}],
               "usage": {"prompt_tokens": 70, "completion_tokens": len(words)}}
        self.wfile.write(f"data: {json.dumps(end)}\n\ndata: [DONE]\n\n".encode())
        self.close_connection = True

    def reply(self, status, body):
        data = body.encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


@pytest.fixture
def fake():
    servers = []

    def start(mode):
        handler = type("Handler", (Fake,), {"mode": mode})
        httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        threading.Thread(target=httpd.serve_forever, daemon=True).start()
        servers.append(httpd)
        return f"http://127.0.0.1:{httpd.server_address[1]}"

    yield start
    for s in servers:
        s.shutdown()
        s.server_close()


def test_compute_errors_are_failures_not_throughput(tmp_path, fake):
    doc, md = race(tmp_path, "--target", f"oom={fake('compute_error')}", "--users", "1,2",
                   "--prompt-sizes", "short", "--runs", "1", "--max-tokens", "8")
    assert not doc["targets"][0]["sized_by_tokenizer"]
    cells = doc["cells"]
    assert [c["users"] for c in cells] == [1, 2]
    for c in cells:
        assert c["ok"] == 0 and c["failures"] == {"memory": c["users"]}
        assert c["total_tok_s"] is None and c["decode_tok_s"] is None and c["ttft_s"] is None
        assert "Compute error." in c["first_error"]
    assert all(r["status"] == 500 for r in doc["requests"])
    assert "1/1 (memory 1)" in md and "2/2 (memory 2)" in md and "## Failures" in md


def test_changing_text_is_flagged(tmp_path, fake):
    doc, md = race(tmp_path, "--target", f"flaky={fake('random_text')}", "--users", "1,2",
                   "--prompt-sizes", "short", "--runs", "2", "--max-tokens", "8")
    assert all(r["outcome"] == "ok" for r in doc["requests"])
    assert all(c["ok"] == c["requests"] and c["total_tok_s"] > 0 for c in doc["cells"])
    (repeat,) = [c for c in doc["consistency"] if "again alone" in c["what"]]
    assert repeat["compared"] == 1
    assert repeat["identical"] == 0 and repeat["first_difference"] is not None
    assert "**differs**" in md
