"""llama-server's slot files (`--slot-save-path`): a slot's cached prompt saved after a request is
restored into another server, whose next request with that prompt reuses it (cached tokens) and gives
the same text; erase drops it; file names cannot leave the directory; another key's prompt is not
saved; a hybrid recurrent model's file carries its states after the prefix."""

import subprocess

from conftest import BINARY, Server

PROMPT = "Here is a long story about a lighthouse keeper who lived alone on a rocky island. " * 4
BODY = {"prompt": PROMPT, "n_predict": 8, "temperature": 0}


def test_a_saved_slot_is_restored_in_a_new_server(tmp_path):
    s = Server("-c", "2048", "-np", "2", "--slot-save-path", str(tmp_path))
    try:
        first = s.post("/completion", json=BODY).json()
        slot = first["id_slot"]
        saved = s.post(f"/slots/{slot}?action=save", json={"filename": "story.bin"}).json()
        n = saved["n_saved"]
        assert n % 16 == 0 and n >= first["tokens_evaluated"] // 16 * 16, saved
        assert (tmp_path / "story.bin").stat().st_size == saved["n_written"]
        r = s.post(f"/slots/{slot}?action=save", json={"filename": "../escape.bin"})
        assert r.status_code == 400 and r.json()["error"]["param"] == "filename", r.text
    finally:
        s.stop()
    s = Server("-c", "2048", "-np", "2", "--slot-save-path", str(tmp_path))
    try:
        restored = s.post("/slots/1?action=restore", json={"filename": "story.bin"}).json()
        assert restored["n_restored"] == n, restored
        again = s.post("/completion", json=BODY).json()
        assert again["tokens_cached"] == (first["tokens_evaluated"] - 1) // 16 * 16
        assert again["content"] == first["content"]
        erased = s.post("/slots/1?action=erase", json={}).json()
        assert erased["n_erased"] > 0, erased
        assert s.post("/completion", json=BODY).json()["tokens_cached"] == 0
        r = s.post("/slots/0?action=restore", json={"filename": "missing.bin"})
        assert r.status_code == 400 and r.json()["error"]["param"] == "filename", r.text
    finally:
        s.stop()


def test_another_keys_prompt_is_not_saved(tmp_path):
    s = Server("-c", "1024", "-np", "1", "--slot-save-path", str(tmp_path), "--api-key", "alice,bob")
    try:
        import httpx
        alice = {"Authorization": "Bearer alice"}
        r = httpx.post(s.url + "/completion", json=BODY, headers=alice, timeout=60).json()
        bob = httpx.post(s.url + f"/slots/{r['id_slot']}?action=save", json={"filename": "x.bin"},
                         headers={"Authorization": "Bearer bob"}, timeout=60)
        assert bob.status_code == 400 and "no cached prompt of this key" in bob.json()["error"]["message"], bob.text
        own = httpx.post(s.url + f"/slots/{r['id_slot']}?action=save", json={"filename": "x.bin"},
                         headers=alice, timeout=60)
        assert own.status_code == 200 and own.json()["n_saved"] > 0, own.text
    finally:
        s.stop()


def test_a_hybrid_model_s_slot_is_restored_with_its_states(tmp_path):
    """Qwen 3.5's Gated DeltaNet blocks keep a state, not a key per position: the file holds the
    prompt up to its last full block (where the prompt's reading stopped to snapshot the states),
    and the new server that restores it goes on from there with the first server's text."""
    model = tmp_path / "qwen35.gguf"
    subprocess.run(
        [
            BINARY, "synth", "-o", str(model), "--arch", "qwen35", "--experts", "0", "--n-embd", "128",
            "--n-layer", "4", "--n-head", "4", "--n-head-kv", "2", "--n-ff", "256", "--ssm-state-size", "32",
            "--ssm-group-count", "2", "--ssm-time-step-rank", "4", "--type", "q8_0", "--tokenizer", "smollm2-135m",
        ],
        check=True,
        capture_output=True,
    )
    flags = ("-c", "1024", "-np", "1", "--slot-save-path", str(tmp_path))
    s = Server(*flags, model=str(model))
    try:
        first = s.post("/completion", json=BODY).json()
        saved = s.post("/slots/0?action=save", json={"filename": "hybrid.bin"}).json()
        n = saved["n_saved"]
        assert n == (first["tokens_evaluated"] // 16) * 16, saved
    finally:
        s.stop()
    s = Server(*flags, model=str(model))
    try:
        restored = s.post("/slots/0?action=restore", json={"filename": "hybrid.bin"}).json()
        assert restored["n_restored"] == n, restored
        again = s.post("/completion", json=BODY).json()
        assert again["tokens_cached"] == n, again
        assert again["content"] == first["content"]
    finally:
        s.stop()
