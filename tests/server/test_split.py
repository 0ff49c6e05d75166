"""A model split across two processes on 127.0.0.1: `tandem box` holds SmolLM2's embeddings
and blocks 0..15, `tandem serve --split-at 15 --box ADDR` the other 15 and the output head.
At temperature 0 the split server's answers are byte-identical to one process's, for 4 users
at once, plainly and with a draft; a head whose box is not there refuses to start."""

import os
import re
import signal
import subprocess
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

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


class Box:
    def __init__(self):
        self.log = tempfile.NamedTemporaryFile(prefix="tandem-box-", suffix=".log", delete=False)
        self.proc = subprocess.Popen(
            [BINARY, "box", "-m", "smollm2-135m", "--layers", f"0:{SPLIT}", "--listen", "127.0.0.1:0",
             "-t", "2", "-c", "8192"],
            stdout=self.log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            m = re.search(r"listening on ([\d.]+:\d+)", Path(self.log.name).read_text())
            if m:
                self.addr = m.group(1)
                return
            if self.proc.poll() is not None:
                raise RuntimeError(Path(self.log.name).read_text())
            time.sleep(0.05)
        self.stop()
        raise RuntimeError("tandem box did not start")

    def stop(self):
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
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


@pytest.mark.parametrize("arm", ["plain", "draft"])
def test_split_text_is_the_single_process_text(single, arm):
    box = Box()
    try:
        texts, metrics = run(*(DRAFT if arm == "draft" else []), box=box)
    finally:
        box.stop()
    assert texts == single
    if arm == "draft":
        line = next(l for l in metrics.splitlines() if l.startswith("vllm:spec_decode_num_draft_tokens "))
        assert float(line.split()[1]) > 0


def test_a_head_without_its_box_refuses_to_start():
    with pytest.raises(RuntimeError, match="connection to the box"):
        Server(*FLAGS, "--split-at", str(SPLIT), "--box", "127.0.0.1:9")
