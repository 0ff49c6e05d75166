"""Router mode: two models in a directory (SmolLM2 and Qwen2.5-Coder-0.5B, linked from the model
cache), behind one port and an API key, with room for one (`--models-max 1`): requests by name
reach each (the official openai and ollama clients), the other is unloaded and reloaded on
demand with identical greedy text; /models shows each status, /models/load and /models/unload
move it; a name that is not there is a 404 naming it, and a path (outside the directory or in
it) is never opened; repeated -m serves the models named; a preset gives a model its flags."""

import os
import signal
import time
from pathlib import Path

import ollama
import openai
import pytest

from conftest import API_KEY, Server

CACHE = Path(os.environ.get("TANDEM_MODELS", Path.home() / ".cache" / "tandem" / "models"))
SMOL = CACHE / "SmolLM2-135M-Instruct.Q4_1.gguf"
QWEN = CACHE / "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf"
HI = [{"role": "user", "content": "Say hello in one short sentence."}]


@pytest.fixture(scope="module")
def models_dir(tmp_path_factory):
    root = tmp_path_factory.mktemp("router")
    d = root / "models"
    d.mkdir()
    (d / "smol.gguf").symlink_to(SMOL)
    (d / "qwen.gguf").symlink_to(QWEN)
    (d / "mmproj-smol.gguf").symlink_to(SMOL)
    (root / "outside.gguf").symlink_to(SMOL)
    (d / "notes.txt").write_text("not a model")
    preset = root / "preset.ini"
    preset.write_text("[qwen]\nctx-size = 2048\n")
    return d, preset


@pytest.fixture(scope="module")
def router(models_dir):
    d, preset = models_dir
    s = Server("--models-dir", str(d), "--models-preset", str(preset), "--models-max", "1",
               "-c", "1024", "--api-key", API_KEY, model=None)
    yield s
    s.stop()


def status(router):
    return {m["id"]: m["status"]["value"] for m in router.get("/models").json()["data"]}


def chat(router, model):
    r = router.client().chat.completions.create(model=model, messages=HI, temperature=0, max_tokens=16)
    return r.model, r.choices[0].message.content


def test_the_directorys_models_are_listed_unloaded(router):
    assert status(router) == {"smol": "unloaded", "qwen": "unloaded"}
    props = router.get("/props").json()
    assert props["role"] == "router" and props["max_instances"] == 1
    ids = [m.id for m in router.client().models.list().data]
    assert sorted(ids) == ["qwen", "smol"]


def test_requests_by_name_reach_each_and_a_reload_gives_the_same_text(router):
    model, smol_first = chat(router, "smol")
    assert model == "smol" and status(router) == {"smol": "loaded", "qwen": "unloaded"}
    model, qwen_text = chat(router, "qwen")
    assert model == "qwen" and status(router) == {"smol": "unloaded", "qwen": "loaded"}
    assert qwen_text != smol_first
    model, smol_again = chat(router, "smol")
    assert smol_again == smol_first
    assert status(router) == {"smol": "loaded", "qwen": "unloaded"}
    streamed = router.client().chat.completions.create(model="smol", messages=HI, temperature=0, max_tokens=16,
                                                       stream=True)
    assert "".join(c.choices[0].delta.content or "" for c in streamed if c.choices) == smol_first


def test_the_preset_gives_its_model_its_flags(router):
    chat(router, "qwen")
    props = router.get("/props?model=qwen").json()
    assert props["default_generation_settings"]["n_ctx"] * props["total_slots"] == 2048
    entry = [m for m in router.get("/models").json()["data"] if m["id"] == "qwen"][0]
    assert entry["status"]["args"] == ["--ctx-size", "2048"]


def test_the_ollama_client_sees_every_model_and_reaches_each(router):
    ol = ollama.Client(host=router.url, headers={"Authorization": f"Bearer {API_KEY}"})
    names = sorted(m.model for m in ol.list().models)
    assert names == ["qwen:latest", "smol:latest"]
    r = ol.chat(model="smol:latest", messages=HI, options={"temperature": 0, "num_predict": 16})
    assert r.message.content == chat(router, "smol")[1]
    assert [m.model for m in ol.ps().models] == ["smol:latest"]


@pytest.mark.parametrize("name", ["nope", "../outside", str(Path("/etc/passwd")), "mmproj-smol", "notes"])
def test_a_name_not_in_the_catalog_is_a_404_naming_it(router, name):
    with pytest.raises(openai.NotFoundError) as e:
        router.client().chat.completions.create(model=name, messages=HI, max_tokens=4)
    assert name in e.value.message
    r = router.post("/models/load", {"model": name})
    assert r.status_code == 404


def test_load_and_unload_move_the_status(router):
    assert router.post("/models/unload", {"model": "smol"}).status_code in (200, 400)
    assert router.post("/models/load", {"model": "qwen"}).json()["success"] is True
    for _ in range(600):
        if status(router)["qwen"] == "loaded":
            break
        time.sleep(0.05)
    assert status(router)["qwen"] == "loaded"
    assert router.post("/models/unload", {"model": "qwen"}).json()["success"] is True
    assert status(router)["qwen"] == "unloaded"
    r = router.post("/models/unload", {"model": "qwen"})
    assert r.status_code == 400 and "not loaded" in r.json()["error"]["message"]


def children(pid):
    kids = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid:
            kids.append(int(stat.parent.name))
    return kids


def test_a_model_whose_server_died_is_loaded_again(router):
    before = chat(router, "smol")[1]
    kids = children(router.proc.pid)
    assert len(kids) == 1
    os.kill(kids[0], signal.SIGKILL)
    time.sleep(0.3)
    with pytest.raises(openai.APIStatusError) as e:
        chat(router, "smol")
    assert e.value.status_code == 503 and "stopped" in e.value.message
    assert chat(router, "smol")[1] == before


def test_a_request_given_up_while_its_model_loads_does_not_pin_it(router):
    router.post("/models/unload", {"model": "qwen"})
    router.post("/models/unload", {"model": "smol"})
    with pytest.raises(openai.APITimeoutError):
        router.client(timeout=0.05).chat.completions.create(model="qwen", messages=HI, max_tokens=4)
    # With room for one, smol's load must unload qwen once it has loaded: a hold the
    # cancelled request never gave back would keep it forever.
    assert chat(router, "smol")[0] == "smol"
    assert status(router)["qwen"] == "unloaded"


def test_the_key_is_required(router):
    with pytest.raises(openai.AuthenticationError):
        router.client(api_key="wrong").models.list()


def test_repeated_m_serves_the_models_named():
    s = Server("-m", str(SMOL), "-m", "qwen2.5-coder-0.5b", "-c", "1024", model=None)
    try:
        ids = sorted(m["id"] for m in s.get("/v1/models").json()["data"])
        assert ids == ["SmolLM2-135M-Instruct.Q4_1", "qwen2.5-coder-0.5b"]
        assert chat(s, "qwen2.5-coder-0.5b")[0] == "qwen2.5-coder-0.5b"
    finally:
        s.stop()
