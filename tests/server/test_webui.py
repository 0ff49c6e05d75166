"""The web UI in a real browser (Debian's chromium and chromium-driver, selenium from PyPI),
against SmolLM2 behind an API key, its template opening a `<think>` block so that answers
start in reasoning: the page loads with no request leaving the machine and asks for the key;
a message streams an answer into its thinking panel; stop stops it (and frees the slot);
regenerate and edit work; a `<script>` and an `onerror` image in the model's output (forced
by the UI's JSON-schema mode) render as text and run nothing; the engine view shows a slot
busy during a request. Screenshots go to $TANDEM_ARTIFACTS (default target/artifacts)."""

import json
import os
import shutil
import time
from pathlib import Path

import pytest

from conftest import API_KEY, ROOT, Server

webdriver = pytest.importorskip("selenium.webdriver")
from selenium.common.exceptions import ElementNotInteractableException  # noqa: E402
from selenium.webdriver.chrome.service import Service  # noqa: E402
from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.support.ui import WebDriverWait  # noqa: E402

ARTIFACTS = Path(os.environ.get("TANDEM_ARTIFACTS", ROOT / "target" / "artifacts"))
CHROMIUM = shutil.which("chromium")
DRIVER = shutil.which("chromedriver")
THINKING_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n<think>\n{% endif %}"
)
XSS = '<script>window.__pwned = 1</script><img src=x onerror="window.__pwned = 2">'

if not (CHROMIUM and DRIVER):
    if os.environ.get("TANDEM_REQUIRE_BROWSER"):
        raise RuntimeError("chromium and chromedriver are required (apt install chromium chromium-driver)")
    pytest.skip("chromium and chromedriver are not installed", allow_module_level=True)


@pytest.fixture(scope="module")
def smol(tmp_path_factory):
    template = tmp_path_factory.mktemp("tpl") / "thinking.jinja"
    template.write_text(THINKING_TEMPLATE)
    s = Server("-c", "4096", "-np", "2", "--api-key", API_KEY, "--chat-template-file", str(template),
               "--reasoning", "on")
    yield s
    s.stop()


@pytest.fixture(scope="module")
def browser():
    opts = webdriver.ChromeOptions()
    opts.binary_location = CHROMIUM
    for a in ["--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--window-size=1400,900",
              "--disable-background-networking", "--no-first-run"]:
        opts.add_argument(a)
    opts.set_capability("goog:loggingPrefs", {"performance": "ALL", "browser": "ALL"})
    d = webdriver.Chrome(service=Service(DRIVER), options=opts)
    yield d
    d.quit()


def shot(browser, name):
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    browser.save_screenshot(str(ARTIFACTS / f"webui-{name}.png"))


def wait(browser, cond, timeout=60):
    return WebDriverWait(browser, timeout, poll_frequency=0.05).until(lambda d: cond(d))


def requested_urls(browser):
    urls = []
    for entry in browser.get_log("performance"):
        msg = json.loads(entry["message"])["message"]
        if msg["method"] == "Network.requestWillBeSent":
            urls.append(msg["params"]["request"]["url"])
    return urls


def set_knob(browser, name, value):
    box = browser.find_element(By.ID, f"knob-{name}")
    box.clear()
    box.send_keys(str(value))
    browser.execute_script("arguments[0].dispatchEvent(new Event('change'))", box)


def send(browser, text):
    box = browser.find_element(By.ID, "input")
    box.send_keys(text)
    browser.find_element(By.ID, "send").click()


LAST = "[...document.querySelectorAll('.msg.assistant')].pop()"


def last_text(browser, part=".content"):
    """The text of `part` of the last assistant message ('' when none)."""
    return browser.execute_script(f"const m = {LAST}; const e = m && m.querySelector('{part}'); "
                                  "return e ? e.textContent : ''")


def running(browser):
    return not browser.execute_script("return document.getElementById('stop').hidden")


def idle(smol):
    return not any(s["is_processing"] for s in smol.get("/slots").json())


@pytest.fixture(scope="module")
def page(browser, smol):
    browser.get(smol.url + "/")
    dialog = wait(browser, lambda d: d.find_element(By.ID, "key-dialog").is_displayed() and
                  d.find_element(By.ID, "key-dialog"))
    assert dialog
    browser.find_element(By.ID, "key-input").send_keys(API_KEY)
    browser.find_element(By.ID, "key-save").click()
    wait(browser, lambda d: d.find_element(By.ID, "model").text != "")
    return browser


def test_the_page_loads_from_this_server_only_and_asks_for_the_key(page, smol):
    assert page.find_element(By.ID, "model").text.startswith("SmolLM2")
    urls = requested_urls(page)
    assert any(u.endswith("/webui/app.js") for u in urls)
    outside = [u for u in urls if not (u.startswith(smol.url) or u.startswith("data:"))]
    assert outside == []
    r = smol.get("/")
    assert "script-src 'self'" in r.headers["content-security-policy"]
    assert "connect-src 'self'" in r.headers["content-security-policy"]
    shot(page, "loaded")


def test_a_message_streams_into_the_thinking_panel(page, smol):
    set_knob(page, "temperature", 0)
    set_knob(page, "max_tokens", 48)
    send(page, "Why is the sky blue?")
    lengths = set()

    def done(d):
        lengths.add(len(last_text(d, ".reasoning")))
        return not running(d) and len(lengths) > 1
    wait(page, done, 120)
    reasoning = last_text(page, ".reasoning")
    assert reasoning.strip()
    assert len([n for n in lengths if 0 < n < len(reasoning)]) >= 1, lengths
    api = smol.client().chat.completions.create(model="m", messages=[{"role": "user", "content": "Why is the sky blue?"}],
                                                temperature=0, max_tokens=48)
    assert api.choices[0].message.reasoning_content.strip()[:20] in reasoning
    shot(page, "thinking")


def test_stop_stops_the_answer_and_frees_the_slot(page, smol):
    set_knob(page, "temperature", 0.8)
    set_knob(page, "max_tokens", 1500)
    send(page, "Tell me a very long story about a dragon.")
    wait(page, lambda d: len(last_text(d, ".reasoning") + last_text(d)) > 80, 120)
    page.find_element(By.ID, "stop").click()
    wait(page, lambda d: not running(d), 10)
    n = len(last_text(page, ".reasoning") + last_text(page))
    time.sleep(1.0)
    assert len(last_text(page, ".reasoning") + last_text(page)) == n
    wait(page, lambda d: idle(smol), 10)


def test_regenerate_and_edit(page):
    set_knob(page, "temperature", 0)
    set_knob(page, "max_tokens", 16)
    count = "return document.querySelectorAll('.msg').length"
    before = page.execute_script(count)
    page.find_element(By.ID, "regenerate").click()
    wait(page, lambda d: running(d), 10)
    wait(page, lambda d: not running(d), 120)
    assert page.execute_script(count) == before
    page.find_elements(By.CSS_SELECTOR, ".msg.user .edit")[-1].click()
    assert page.find_element(By.ID, "input").get_attribute("value").startswith("Tell me a very long story")
    assert page.execute_script(count) == before - 2
    page.find_element(By.ID, "input").clear()


def test_markup_in_the_answer_renders_as_text(page):
    page.find_element(By.ID, "new-chat").click()
    page.find_element(By.CSS_SELECTOR, "#settings details:nth-of-type(3) summary").click()
    schema = page.find_element(By.ID, "schema")
    schema.clear()
    # The schema forces the answer; its `</think>` ends the reasoning the template opened,
    # so that the markup lands in the answer's content.
    schema.send_keys(json.dumps({"const": "</think>" + XSS}))
    page.find_element(By.ID, "schema-on").click()
    set_knob(page, "max_tokens", 200)
    send(page, "Say something.")
    wait(page, lambda d: not running(d) and "onerror" in last_text(d), 120)
    text = last_text(page)
    assert "<script>" in text and "onerror" in text
    assert page.execute_script(f"return {LAST}.querySelectorAll('script, img').length") == 0
    assert page.execute_script("return window.__pwned === undefined")
    shot(page, "markup-as-text")
    page.find_element(By.ID, "schema-on").click()


def test_the_engine_view_shows_a_slot_busy(page, smol):
    set_knob(page, "temperature", 0.8)
    set_knob(page, "max_tokens", 1500)
    send(page, "Write a long poem about the ocean.")
    wait(page, lambda d: running(d), 30)
    page.find_element(By.ID, "tab-engine").click()
    busy = "return document.querySelectorAll('#slots tr.slot[data-state=generating]').length"
    wait(page, lambda d: d.execute_script(busy) > 0, 30)
    wait(page, lambda d: "tok/s" in d.find_element(By.ID, "rate-text").text, 10)
    shot(page, "engine")
    page.find_element(By.ID, "tab-chat").click()
    # At temperature 0.8 the poem may end by itself before the tab switch; the stop button
    # is then hidden, and there is nothing left to stop.
    try:
        page.find_element(By.ID, "stop").click()
    except ElementNotInteractableException:
        assert not running(page)
    wait(page, lambda d: idle(smol), 10)


def test_on_a_router_the_page_chats_with_the_model_chosen(browser, tmp_path):
    cache = Path(os.environ.get("TANDEM_MODELS", Path.home() / ".cache" / "tandem" / "models"))
    d = tmp_path / "models"
    d.mkdir()
    (d / "smol.gguf").symlink_to(cache / "SmolLM2-135M-Instruct.Q4_1.gguf")
    (d / "qwen.gguf").symlink_to(cache / "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf")
    s = Server("--models-dir", str(d), "-c", "1024", model=None)
    try:
        browser.get(s.url + "/")
        select = wait(browser, lambda b: b.find_element(By.ID, "model-select").is_displayed() and
                      b.find_element(By.ID, "model-select"))
        options = [o.get_attribute("value") for o in select.find_elements(By.TAG_NAME, "option")]
        assert sorted(options) == ["qwen", "smol"]
        for name in ["qwen", "smol"]:
            browser.execute_script(
                "const s = document.getElementById('model-select'); s.value = arguments[0];"
                "s.dispatchEvent(new Event('change'))", name)
            set_knob(browser, "max_tokens", 8)
            send(browser, "Hello!")
            wait(browser, lambda b: running(b), 30)
            wait(browser, lambda b: not running(b), 120)
            assert last_text(browser, ".stats").startswith(name + " ·")
        shot(browser, "router")
    finally:
        s.stop()


def test_an_image_attached_on_the_page_is_answered_as_llama_mtmd_cli_answers_it(browser, tmp_path):
    """Gemma 3 270M with a synthetic tower: the page offers images when /props says the server
    reads them, sends the attached file as a data URL beside the text, and the streamed answer
    is llama-mtmd-cli's (tests/server/golden/vision-gemma3.json)."""
    import subprocess

    from conftest import BINARY

    golden = json.loads((ROOT / "tests/server/golden/vision-gemma3.json").read_text())
    tower = tmp_path / "tower.gguf"
    subprocess.run([BINARY, "synth", "--mmproj", "gemma3-270m", *golden["tower"], "-o", str(tower)],
                   check=True, capture_output=True)
    s = Server("-c", "2048", "-np", "1", "--mmproj", str(tower), model="gemma3-270m")
    try:
        browser.get(s.url + "/")
        wait(browser, lambda b: b.find_element(By.ID, "attach").is_displayed())
        set_knob(browser, "temperature", 0)
        set_knob(browser, "max_tokens", golden["max_tokens"])
        browser.find_element(By.ID, "image").send_keys(str(ROOT / golden["image"]))
        wait(browser, lambda b: b.find_element(By.ID, "attached").text == Path(golden["image"]).name)
        send(browser, golden["text_before_image"])
        wait(browser, lambda b: running(b), 30)
        wait(browser, lambda b: not running(b), 120)
        # The page renders the answer's lines as lines: compare the words.
        assert last_text(browser).split() == golden["answer"].split()
        assert browser.execute_script("return document.querySelector('.msg.user img') !== null")
        shot(browser, "image")
    finally:
        s.stop()
