"""Safe defaults: bound to 127.0.0.1 unless told otherwise, the API key guards every route
but /health (and /metrics only with --metrics-public), CORS for any origin only behind a key
(else this machine's origins, unless --cors-origins says otherwise), a Host that is not the loopback server's own is refused; and a request that cannot
fit in the free KV waits or gets a 4xx, never a 5xx."""

import concurrent.futures
import os
import tempfile
from urllib.parse import urlparse

import httpx

from conftest import API_KEY, Server

GUARDED = [
    ("GET", "/models"),
    ("GET", "/v1/models"),
    ("GET", "/props"),
    ("GET", "/slots"),
    ("GET", "/metrics"),
    ("POST", "/tokenize"),
    ("POST", "/detokenize"),
    ("POST", "/apply-template"),
    ("POST", "/v1/chat/completions"),
    ("POST", "/chat/completions"),
    ("POST", "/v1/completions"),
    ("POST", "/completions"),
    ("POST", "/completion"),
    ("GET", "/no-such-route"),
]


def call(server, method, path, key=None, headers=None):
    h = dict(headers or {})
    if key:
        h["Authorization"] = f"Bearer {key}"
    return httpx.request(method, server.url + path, headers=h, json={} if method == "POST" else None, timeout=60)


def test_binds_localhost_and_the_key_guards_every_route_but_health(server):
    assert urlparse(server.url).hostname == "127.0.0.1"
    for path in ["/health", "/v1/health"]:
        assert call(server, "GET", path).status_code == 200
    for method, path in GUARDED:
        for key in [None, "wrong-key"]:
            r = call(server, method, path, key)
            assert r.status_code == 401, (method, path, key, r.text)
            assert r.json()["error"]["type"] == "authentication_error"
        assert call(server, method, path, API_KEY).status_code != 401, (method, path)


def test_metrics_public_opens_metrics_only():
    s = Server("-c", "512", "-np", "1", "--api-key", API_KEY, "--metrics", "--metrics-public")
    try:
        r = call(s, "GET", "/metrics")
        assert r.status_code == 200 and "llamacpp:prompt_tokens_total" in r.text
        for method, path in GUARDED:
            if path != "/metrics":
                assert call(s, method, path).status_code == 401, path
    finally:
        s.stop()


PREFLIGHT = {"Access-Control-Request-Method": "POST", "Access-Control-Request-Headers": "authorization"}


def test_cors_answers_any_origin_only_behind_a_key(server):
    # With an API key (llama-server's default, `*`): any origin may call, the key still guards.
    origin = {"Origin": "http://evil.example"}
    r = call(server, "OPTIONS", "/v1/chat/completions", headers={**origin, **PREFLIGHT})
    assert r.status_code == 200 and r.headers["access-control-allow-origin"] == "http://evil.example"
    assert "POST" in r.headers["access-control-allow-methods"]
    r = call(server, "GET", "/v1/models", headers=origin)
    assert r.status_code == 401, "CORS does not open the key"

    # Without a key, only this machine's origins: a page on any other site gets nothing.
    s = Server("-c", "512", "-np", "1")
    try:
        r = call(s, "OPTIONS", "/v1/chat/completions", headers={**origin, **PREFLIGHT})
        assert r.status_code == 200 and "access-control-allow-origin" not in r.headers
        r = call(s, "GET", "/v1/models", headers=origin)
        assert r.status_code == 200 and "access-control-allow-origin" not in r.headers
        local = {"Origin": "http://localhost:5173"}
        r = call(s, "GET", "/v1/models", headers=local)
        assert r.headers["access-control-allow-origin"] == "http://localhost:5173"
    finally:
        s.stop()

    s = Server("-c", "512", "-np", "1", "--api-key", API_KEY, "--cors-origins", "http://app.example")
    try:
        ok = {"Origin": "http://app.example"}
        r = call(s, "OPTIONS", "/v1/chat/completions", headers={**ok, **PREFLIGHT})
        assert r.status_code == 200, r.text
        assert r.headers["access-control-allow-origin"] == "http://app.example"
        r = call(s, "GET", "/v1/models", API_KEY, headers=ok)
        assert r.status_code == 200 and r.headers["access-control-allow-origin"] == "http://app.example"
        r = call(s, "OPTIONS", "/v1/chat/completions", headers={**origin, **PREFLIGHT})
        assert "access-control-allow-origin" not in r.headers
    finally:
        s.stop()


def test_requests_beyond_free_kv_wait_and_beyond_a_slot_are_4xx():
    # One pool of 1024 positions shared by 4 slots: four ~600-token prompts cannot all be
    # held at once, so some wait or are preempted; all must complete.
    s = Server("-c", "1024", "-np", "4", "--kv-unified", "--api-key", API_KEY)
    try:
        words = " ".join(f"w{i}" for i in range(170))
        client = s.client()
        model = client.models.list().data[0].id

        def ask(i):
            return client.completions.create(model=model, prompt=f"{i} {words}", max_tokens=16, temperature=0)

        with concurrent.futures.ThreadPoolExecutor(4) as pool:
            answers = list(pool.map(ask, range(4)))
        for a in answers:
            assert 4 * a.usage.prompt_tokens > 1024 + 64 and a.choices[0].finish_reason == "length"
        r = s.post("/v1/completions", {"model": model, "prompt": words * 4, "max_tokens": 16})
        assert r.status_code == 400 and "positions" in r.json()["error"]["message"], r.text
        slots = s.get("/slots").json()
        assert all(not slot["is_processing"] for slot in slots)
    finally:
        s.stop()


def test_a_foreign_host_is_refused_on_loopback_and_the_bearer_scheme_ignores_case(server):
    auth = {"Authorization": f"Bearer {API_KEY}"}
    for host in ["evil.example", "evil.example:8080", "10.0.0.1"]:
        r = httpx.get(server.url + "/v1/models", headers={**auth, "Host": host}, timeout=30)
        assert r.status_code == 403, (host, r.text)
        assert r.json()["error"]["type"] == "permission_error"
    port = urlparse(server.url).port
    for host in [f"localhost:{port}", f"127.0.0.1:{port}", "localhost"]:
        r = httpx.get(server.url + "/v1/models", headers={**auth, "Host": host}, timeout=30)
        assert r.status_code == 200, (host, r.text)
    for scheme in ["bearer", "BEARER", "Bearer"]:
        r = httpx.get(server.url + "/v1/models", headers={"Authorization": f"{scheme} {API_KEY}"}, timeout=30)
        assert r.status_code == 200, scheme


def test_keys_from_a_file():
    with tempfile.NamedTemporaryFile("w", suffix=".keys", delete=False) as f:
        f.write("# keys of this test\n\nfirst-key\nsecond-key\n")
    try:
        s = Server("-c", "512", "-np", "1", "--api-key-file", f.name)
        try:
            for key, status in [("first-key", 200), ("second-key", 200), ("# keys of this test", 401)]:
                r = httpx.get(s.url + "/v1/models", headers={"Authorization": f"Bearer {key}"}, timeout=30)
                assert r.status_code == status, key
        finally:
            s.stop()
    finally:
        os.unlink(f.name)


def test_big_prompts_are_prepared_off_the_runtime(server):
    """Two 30 MB prompts are parsed and tokenized on the blocking pool (large bodies one core
    short of all the cores at once; small ones in a lane of their own): meanwhile /health
    answers within 100 ms and a normal chat completes; the big prompts then get a 400 (they
    do not fit the context)."""
    import time

    big = "lorem ipsum dolor sit amet " * (30 << 20 >> 5)

    def send_big():
        return server.post("/v1/completions", json={"prompt": big, "max_tokens": 4}, timeout=600)

    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        bigs = [pool.submit(send_big) for _ in range(2)]
        time.sleep(1.0)
        assert not any(f.done() for f in bigs), "the big prompts should still be in preparation"
        for _ in range(10):
            t0 = time.monotonic()
            assert httpx.get(server.url + "/health", timeout=5).status_code == 200
            assert time.monotonic() - t0 < 0.1
            time.sleep(0.05)
        r = server.post("/v1/chat/completions",
                        json={"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 4})
        assert r.status_code == 200, r.text
        assert not all(f.done() for f in bigs), "the chat should not have waited for the big prompts"
        for f in bigs:
            r = f.result()
            assert r.status_code == 400, r.text


def test_prefix_cache_is_apart_per_key_and_salt():
    """A prompt cached for one API key is not reused (cached_tokens 0) for another key or
    another cache_salt; the same key and salt reuse it."""
    s = Server("-c", "4096", "-np", "2", "--api-key", "key-one,key-two")
    try:
        prompt = "Tell me about the history of the printing press in Europe, in detail. " * 4

        def cached(key, salt=None):
            body = {"messages": [{"role": "user", "content": prompt}], "max_tokens": 2}
            if salt is not None:
                body["cache_salt"] = salt
            r = httpx.post(s.url + "/v1/chat/completions", json=body,
                           headers={"Authorization": f"Bearer {key}"}, timeout=120)
            assert r.status_code == 200, r.text
            return r.json()["usage"]["prompt_tokens_details"]["cached_tokens"]

        assert cached("key-one") == 0
        assert cached("key-one") > 0
        assert cached("key-two") == 0
        assert cached("key-two") > 0
        assert cached("key-one", salt="alice") == 0
        assert cached("key-one", salt="bob") == 0
        assert cached("key-one", salt="alice") > 0
    finally:
        s.stop()


def test_slow_clients_are_cut_off_and_connections_are_capped():
    """300 connections trickling a request's head a byte at a time are closed by the header
    deadline while a normal request is served; a body shorter than its Content-Length gets
    408 after the body deadline; JSON followed by more bytes is a 400; past the connection cap
    a new connection is closed at once."""
    import socket
    import time

    s = Server("-c", "2048", "-np", "2", "--timeout-header", "2", "--timeout-body", "2",
               "--max-connections", "400")
    host, port = urlparse(s.url).hostname, urlparse(s.url).port
    socks = []
    try:
        for _ in range(300):
            c = socket.create_connection((host, port))
            c.sendall(b"GET /health HTTP/1.1\r\n")
            socks.append(c)
        t0 = time.monotonic()
        served = False
        alive = list(socks)
        while alive and time.monotonic() - t0 < 10:
            if not served and time.monotonic() - t0 > 0.5:
                r = httpx.post(s.url + "/v1/completions", json={"prompt": "Hi", "max_tokens": 2}, timeout=30)
                assert r.status_code == 200, r.text
                served = True
            still = []
            for c in alive:
                try:
                    c.sendall(b"X")
                    still.append(c)
                except OSError:
                    pass
            alive = still
            time.sleep(0.5)
        assert served and not alive, f"{len(alive)} trickling connections still open after 10 s"
        assert time.monotonic() - t0 > 1.5, "closed before the header deadline"

        c = socket.create_connection((host, port))
        c.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: " + host.encode() + b"\r\n"
                  b"Content-Type: application/json\r\nContent-Length: 100\r\n\r\n{\"prompt\":")
        t0 = time.monotonic()
        c.settimeout(10)
        status = c.recv(4096).split(b"\r\n")[0]
        assert b" 408 " in status and time.monotonic() - t0 > 1.5, status
        c.close()

        r = httpx.post(s.url + "/v1/completions", content=b'{"prompt": "Hi", "max_tokens": 2} trailing',
                       headers={"Content-Type": "application/json"}, timeout=30)
        assert r.status_code == 400 and "trailing" in r.json()["error"]["message"], r.text
    finally:
        for c in socks:
            c.close()
        s.stop()

    capped = Server("-c", "2048", "-np", "2", "--max-connections", "5")
    host, port = urlparse(capped.url).hostname, urlparse(capped.url).port
    held = []
    try:
        # A connection counts once the server has served on it: the readiness check's own
        # connection may still hold a place for a moment after it closed, and a connection
        # refused meanwhile is simply opened again.
        for _ in range(50):
            if len(held) == 5:
                break
            c = socket.create_connection((host, port))
            c.settimeout(5)
            c.sendall(b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
            try:
                answered = c.recv(100).startswith(b"HTTP/1.1 200")
            except ConnectionResetError:
                answered = False
            if answered:
                held.append(c)
            else:
                c.close()
                time.sleep(0.1)
        assert len(held) == 5, f"only {len(held)} connections served under a cap of 5"
        extra = socket.create_connection((host, port))
        extra.settimeout(5)
        extra.sendall(b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        try:
            assert extra.recv(100) == b"", "a connection past the cap must be closed"
        except ConnectionResetError:
            pass
        for c in held:
            c.close()
        deadline = time.monotonic() + 10
        while True:
            try:
                assert httpx.get(capped.url + "/health", timeout=5).status_code == 200
                break
            except httpx.TransportError:
                assert time.monotonic() < deadline, "the cap was not freed when its connections closed"
                time.sleep(0.1)
    finally:
        for c in held:
            c.close()
        capped.stop()
