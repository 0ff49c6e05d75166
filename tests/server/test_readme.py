"""The README, run: it has exactly two set-up commands; its serve command (the default model, on a
free port here) prints an address where the web page loads and answers a message (in chromium
when installed); every example under "Try it" runs against that server and prints an answer."""

import json
import os
import re
import shutil
import subprocess
import sys

import httpx
import pytest

from conftest import ROOT, Server

README = (ROOT / "README.md").read_text()


def section(title):
    m = re.search(rf"^## {re.escape(title)}\n(.*?)(?=^## |\Z)", README, re.S | re.M)
    assert m, f"no section {title}"
    return m.group(1)


def setup_commands():
    return [line.strip() for line in section("Set up").splitlines() if line.startswith("    ")]


def examples():
    return re.findall(r"```(sh|python)\n(.*?)```", section("Try it"), re.S)


@pytest.fixture(scope="module")
def served():
    serve = setup_commands()[0]
    args = serve.split(" -- ", 1)[1].split()
    assert args[0] == "serve"
    s = Server(*args[1:], model=None)
    yield s
    s.stop()


def test_there_are_two_setup_commands():
    assert setup_commands() == ["cargo run --release -p tandem -- serve", "scripts/test"]
    assert "http://127.0.0.1:8080" in section("Set up")


def test_the_serve_command_prints_an_address_where_the_page_answers(served):
    assert re.search(r"listening on http://127\.0\.0\.1:\d+", served.output())
    page = httpx.get(served.url + "/")
    assert page.status_code == 200 and "<title>tandem</title>" in page.text
    chromium, driver = shutil.which("chromium"), shutil.which("chromedriver")
    if not (chromium and driver):
        if os.environ.get("TANDEM_REQUIRE_BROWSER"):
            raise RuntimeError("chromium and chromedriver are required")
        pytest.skip("chromium is not installed")
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    opts = webdriver.ChromeOptions()
    opts.binary_location = chromium
    for a in ["--headless=new", "--no-sandbox", "--disable-dev-shm-usage"]:
        opts.add_argument(a)
    b = webdriver.Chrome(service=Service(driver), options=opts)
    try:
        b.get(served.url + "/")
        WebDriverWait(b, 30).until(lambda d: d.find_element(By.ID, "model").text)
        b.find_element(By.ID, "input").send_keys("Hello!")
        b.find_element(By.ID, "send").click()
        answer = "const m = [...document.querySelectorAll('.msg.assistant')].pop(); " \
                 "return m && document.getElementById('stop').hidden ? m.textContent : ''"
        WebDriverWait(b, 120).until(lambda d: len(d.execute_script(answer)) > len("assistant"))
    finally:
        b.quit()


@pytest.mark.parametrize("i", range(len(examples())))
def test_each_example_runs(served, i):
    lang, code = examples()[i]
    code = code.replace("http://127.0.0.1:8080", served.url)
    cmd = ["bash", "-c", code] if lang == "sh" else [sys.executable, "-c", code]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip(), r.stderr
    if lang == "sh":
        assert json.loads(r.stdout)["choices"][0]["message"]["content"]
