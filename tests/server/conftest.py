"""Starts a real `tandem serve` on 127.0.0.1 with an ephemeral port, and stops it by PID.

The binary is $TANDEM_BIN, else target/debug/tandem (scripts/test builds it); the model is
SmolLM2-135M, pulled by scripts/test into the tandem model cache.
"""

import os
import re
import signal
import subprocess
import tempfile
import time
from pathlib import Path

import httpx
import openai
import pytest

ROOT = Path(__file__).resolve().parents[2]
BINARY = os.environ.get("TANDEM_BIN", str(ROOT / "target" / "debug" / "tandem"))
API_KEY = "test-key-123"


class Server:
    def __init__(self, *flags, model="smollm2-135m", timeout=120.0, env=None):
        self.log = tempfile.NamedTemporaryFile(prefix="tandem-serve-", suffix=".log", delete=False)
        chosen = ["-m", model] if model else []
        self.proc = subprocess.Popen(
            [BINARY, "serve", *chosen, "--port", "0", "-t", "2", *flags],
            stdout=self.log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=env,
        )
        self.url = self._wait_ready(timeout)

    def _wait_ready(self, timeout=120.0):
        deadline = time.monotonic() + timeout
        url = None
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"tandem serve exited {self.proc.returncode}:\n{self.output()}")
            if url is None:
                m = re.search(r"listening on (http://[\d.]+:\d+)", self.output())
                url = m.group(1) if m else None
            if url is not None:
                try:
                    if httpx.get(url + "/health", timeout=2).status_code == 200:
                        return url
                except httpx.HTTPError:
                    pass
            time.sleep(0.05)
        self.stop()
        raise RuntimeError(f"tandem serve not ready in {timeout} s:\n{self.output()}")

    def output(self):
        return Path(self.log.name).read_text(errors="replace")

    def stop(self):
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.kill(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        os.unlink(self.log.name)

    def client(self, api_key=API_KEY, **kw):
        return openai.OpenAI(base_url=self.url + "/v1", api_key=api_key, max_retries=0, **kw)

    def get(self, path, **kw):
        return httpx.get(self.url + path, headers={"Authorization": f"Bearer {API_KEY}"}, timeout=60, **kw)

    def post(self, path, json=None, timeout=120, **kw):
        return httpx.post(
            self.url + path, json=json, headers={"Authorization": f"Bearer {API_KEY}"}, timeout=timeout, **kw
        )


def pytest_configure(config):
    config.addinivalue_line(
        "markers",
        "slow: the slow tier (`scripts/test --slow`): repeats what a faster test checks",
    )


@pytest.fixture(scope="session")
def server():
    s = Server("-c", "8192", "-np", "8", "--kv-unified", "--api-key", API_KEY, "--metrics")
    yield s
    s.stop()


@pytest.fixture(scope="session")
def client(server):
    return server.client()


@pytest.fixture(scope="session")
def model_id(client):
    return client.models.list().data[0].id
