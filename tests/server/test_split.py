"""A model split across two processes on 127.0.0.1: `tandem box` holds SmolLM2's embeddings
and blocks 0..15, `tandem serve --split-at 15 --box ADDR` the other 15 and the output head.
At temperature 0 the split server's answers are byte-identical to one process's, for 4 users
at once, plainly, with a draft, and with prompts streamed in chunks and two cohorts
pipelined; a box with a key killed (-9) mid-answer and started again is
replayed and the answer completes byte-identical (also for a small synthetic DeepSeek-V4, whose
records and hyper-connection streams cross the split, and a Qwen 3.5 whose recurrent states the
restarted box computes again from position 0); a synthetic Qwen 3.5 with recurrent states on
both sides of its split keeps one process's text through mostly rejected drafts; a box that stays down past the grace window gives
503 with Retry-After (and the streaming answer in flight a retryable error event), /ready
says so while /health stays 200; a hung box is lost by its heartbeats, while answering and
while idle; a head whose box is not there refuses to start."""

import os
import re
import signal
import subprocess
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest

from conftest import BINARY, Server

PROMPTS = [
    "Write a Python function that adds two numbers.",
    "Why is the sky blue?",
    "List three uses of copper.",
    "Describe a cat in two sentences.",
]
SPLIT = 15
FLAGS = ["-c", "8192", "-np", "4", "--metrics"]
DRAFT = ["-md", "smollm2-135m", "--spec-draft-vocab", "0", "--spec-policy", "fixed", "--spec-draft-n-max", "4"]


def free_port():
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class Box:
    def __init__(self, port=0, flags=(), model="smollm2-135m", split=SPLIT):
        self.log = tempfile.NamedTemporaryFile(prefix="tandem-box-", suffix=".log", delete=False)
        self.proc = subprocess.Popen(
            [BINARY, "box", "-m", model, "--layers", f"0:{split}", "--listen", f"127.0.0.1:{port}",
             "-t", "2", "-c", "8192", *flags],
            stdout=self.log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            m = re.search(r"listening on ([\d.]+:\d+) \(epoch \w+, model (\w+)", Path(self.log.name).read_text())
            if m:
                self.addr, self.model_hash = m.group(1), int(m.group(2), 16)
                return
            if self.proc.poll() is not None:
                raise RuntimeError(Path(self.log.name).read_text())
            time.sleep(0.05)
        self.stop()
        raise RuntimeError("tandem box did not start")

    def stop(self):
        """kill -9, as a crash would; stopping twice is a no-op."""
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
        if os.path.exists(self.log.name):
            os.unlink(self.log.name)


def answers(server):
    client = server.client()

    def ask(prompt):
        r = client.chat.completions.create(
            model="m", messages=[{"role": "user", "content": prompt}], max_tokens=48, temperature=0
        )
        assert r.choices[0].finish_reason in ("stop", "length")
        return r.choices[0].message.content

    with ThreadPoolExecutor(len(PROMPTS)) as pool:
        return list(pool.map(ask, PROMPTS))


def run(*flags, box=None):
    extra = ["--split-at", str(SPLIT), "--box", box.addr] if box else []
    s = Server(*FLAGS, *flags, *extra)
    try:
        return answers(s), s.get("/metrics").text
    finally:
        s.stop()


@pytest.fixture(scope="module")
def single():
    return run()[0]


ARMS = {
    "plain": [],
    "draft": DRAFT,
    "streamed in chunks of 7, pipelined, with a draft": ["--box-chunk", "7", "--box-pipeline", *DRAFT],
}


@pytest.mark.parametrize("arm", ARMS)
def test_split_text_is_the_single_process_text(single, arm):
    box = Box()
    try:
        texts, metrics = run(*ARMS[arm], box=box)
    finally:
        box.stop()
    assert texts == single
    if arm != "plain":
        line = next(l for l in metrics.splitlines() if l.startswith("vllm:spec_decode_num_draft_tokens "))
        assert float(line.split()[1]) > 0


def test_a_hybrid_model_split_with_states_on_both_sides_keeps_the_text(tmp_path):
    """A synthetic Qwen 3.5 (Gated DeltaNet blocks 0 to 2, attention block 3) split at block 2:
    both stages keep recurrent states. SmolLM2 drafts for it (same vocabulary) and is mostly
    wrong, so each rejection takes both sides back to their checkpoints: the text is one
    process's."""
    model = str(tmp_path / "qwen35.gguf")
    shape = [*SYNTH["qwen35"], "--type", "q8_0", "--tokenizer", "smollm2-135m"]
    subprocess.run([BINARY, "synth", "-o", model, "--arch", "qwen35", *shape], check=True, capture_output=True)
    s = Server(*FLAGS, model=model)
    try:
        want = answers(s)
    finally:
        s.stop()
    box = Box(model=model, split=2)
    s = Server(*FLAGS, *DRAFT, "--split-at", "2", "--box", box.addr, model=model)
    try:
        got = answers(s)
        metrics = s.get("/metrics").text
    finally:
        s.stop()
        box.stop()
    assert got == want
    value = lambda name: float(next(l for l in metrics.splitlines() if l.startswith(name + " ")).split()[1])
    drafted, accepted = value("vllm:spec_decode_num_draft_tokens"), value("vllm:spec_decode_num_accepted_tokens")
    assert 0 < drafted and accepted < drafted, (drafted, accepted)


def test_a_head_without_its_box_refuses_to_start():
    with pytest.raises(RuntimeError, match="connection to the box"):
        Server(*FLAGS, "--split-at", str(SPLIT), "--box", "127.0.0.1:9")


LONG = "Tell me a long story about a lighthouse keeper."


def stream_chat(server, on_chunk=None):
    """The streamed answer to LONG (256 tokens), and the error event if one came."""
    text, error = "", None
    with httpx.stream(
        "POST", server.url + "/v1/chat/completions", timeout=120,
        json={"messages": [{"role": "user", "content": LONG}], "max_tokens": 256, "temperature": 0,
              "ignore_eos": True, "stream": True},
    ) as r:
        assert r.status_code == 200
        n = 0
        for line in r.iter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            event = __import__("json").loads(line[6:])
            if "error" in event:
                error = event["error"]
                break
            text += event["choices"][0]["delta"].get("content") or ""
            n += 1
            if on_chunk:
                on_chunk(n)
    return text, error


def test_a_keyed_box_killed_mid_answer_is_replayed_and_the_text_stays(tmp_path):
    s = Server(*FLAGS)
    try:
        want, _ = stream_chat(s)
    finally:
        s.stop()
    port = free_port()
    key = tmp_path / "box.key"
    key.write_text("correct horse battery staple\n")
    box = [Box(port, ["--box-key-file", str(key)])]
    s = Server(*FLAGS, "--split-at", str(SPLIT), "--box", f"127.0.0.1:{port}", "--box-grace", "30",
               "--box-key", "correct horse battery staple")

    def kill_and_restart(n):
        if n == 20:
            box[0].stop()
            time.sleep(0.5)
            box[0] = Box(port, ["--box-key-file", str(key)])

    try:
        got, error = stream_chat(s, kill_and_restart)
        assert error is None, error
        assert got == want
        assert s.get("/ready").status_code == 200
        metrics = s.get("/metrics").text
        value = lambda name: float(next(l for l in metrics.splitlines() if l.startswith(name + " ")).split()[1])
        assert value("tandem:box_reconnects_total") >= 1
        assert value("tandem:box_replayed_rows_total") > 20
    finally:
        s.stop()
        box[0].stop()


SYNTH = {
    "deepseek4": ["--n-embd", "64", "--n-layer", "4", "--n-head", "4", "--dsv4-head-dim", "32", "--dsv4-rope-dim", "8",
                  "--dsv4-q-lora", "32", "--dsv4-o-lora", "16", "--dsv4-window", "8", "--dsv4-ratios", "4,128,4,0",
                  "--dsv4-indexer-dim", "64", "--dsv4-top-k", "4", "--experts", "8", "--experts-used", "2",
                  "--n-ff-exp", "32"],
    "qwen35": ["--experts", "0", "--n-embd", "128", "--n-layer", "4", "--n-head", "4", "--n-head-kv", "2", "--n-ff",
               "256", "--ssm-state-size", "32", "--ssm-group-count", "2", "--ssm-time-step-rank", "4"],
}


@pytest.mark.parametrize("arch", SYNTH)
def test_a_synthetic_box_killed_mid_answer_is_replayed_and_the_text_stays(tmp_path, arch):
    """DeepSeek-V4 (records and hyper-connection streams crossing the split) and Qwen 3.5 (recurrent
    states on both sides, computed again from position 0 on the restarted box)."""
    model = str(tmp_path / f"{arch}.gguf")
    shape = [*SYNTH[arch], "--type", "q8_0", "--tokenizer", "smollm2-135m"]
    subprocess.run([BINARY, "synth", "-o", model, "--arch", arch, *shape], check=True, capture_output=True)
    s = Server(*FLAGS, model=model)
    try:
        want, _ = stream_chat(s)
    finally:
        s.stop()
    port = free_port()
    box = [Box(port, model=model, split=2)]
    s = Server(*FLAGS, "--split-at", "2", "--box", f"127.0.0.1:{port}", "--box-grace", "30", model=model)

    def kill_and_restart(n):
        if n == 20:
            box[0].stop()
            time.sleep(0.5)
            box[0] = Box(port, model=model, split=2)

    try:
        got, error = stream_chat(s, kill_and_restart)
        assert error is None, error
        assert got == want and len(want) > 0
        metrics = s.get("/metrics").text
        value = lambda name: float(next(l for l in metrics.splitlines() if l.startswith(name + " ")).split()[1])
        assert value("tandem:box_reconnects_total") >= 1
        assert value("tandem:box_replayed_rows_total") > 20
    finally:
        s.stop()
        box[0].stop()


@contextmanager
def head_and_box(grace):
    """A box on a free port and a split head whose box grace is `grace` seconds; both are
    stopped afterwards."""
    port = free_port()
    box = Box(port)
    try:
        s = Server(*FLAGS, "--split-at", str(SPLIT), "--box", f"127.0.0.1:{port}", "--box-grace", str(grace))
        try:
            yield s, box
        finally:
            s.stop()
    finally:
        box.stop()


def test_a_hung_box_is_lost_by_its_heartbeats():
    with head_and_box(1) as (s, box):
        started = time.monotonic()
        _, error = stream_chat(s, lambda n: os.kill(box.proc.pid, signal.SIGSTOP) if n == 5 else None)
        waited = time.monotonic() - started
        assert error is not None and error["type"] == "unavailable_error", error
        # 1 s quiet, then 2 s without an answer to a heartbeat, then the grace window with one unanswered hello
        # (5 s); the step deadline alone (10 s + 50 ms a row, then the hello) takes 15 s.
        assert 3 <= waited < 12, waited
        assert s.get("/ready").status_code == 503


def test_an_idle_head_notices_a_hung_box_and_its_return():
    with head_and_box(1) as (s, box):
        assert s.get("/ready").status_code == 200
        os.kill(box.proc.pid, signal.SIGSTOP)
        started = time.monotonic()
        while s.get("/ready").status_code == 200:
            assert time.monotonic() - started < 15, "the idle head never noticed"
            time.sleep(0.2)
        os.kill(box.proc.pid, signal.SIGCONT)
        started = time.monotonic()
        while s.get("/ready").status_code != 200:
            assert time.monotonic() - started < 20, "the head never got the box back"
            time.sleep(0.2)
        got, error = stream_chat(s)
        assert error is None and got, error


def test_a_box_that_stays_down_gives_503_with_retry_after():
    with head_and_box(2) as (s, box):
        assert s.get("/ready").status_code == 200
        started = time.monotonic()
        _, error = stream_chat(s, lambda n: box.stop() if n == 5 else None)
        assert error is not None and error["type"] == "unavailable_error", error
        assert time.monotonic() - started < 30
        r = s.post("/v1/chat/completions", json={"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 8})
        assert r.status_code == 503, r.text
        assert int(r.headers["Retry-After"]) > 0
        assert r.json()["error"]["type"] == "unavailable_error"
        assert s.get("/health").status_code == 200
        assert s.get("/ready").status_code == 503
