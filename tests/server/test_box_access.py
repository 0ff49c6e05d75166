"""Who may use a `tandem box` (SmolLM2, blocks 0..15), tried from outside as an attacker would:
a hello without the key or with a wrong one is refused with nothing about the model in the
reply; a second head is refused while the first is connected; frames announcing more than
the box allows are refused before their bytes are read, the box's memory unchanged; a TLS link
(a CA and a certificate for 127.0.0.1 made here) serves the single process's text, and a head
that does not trust the box's certificate refuses to start."""

import datetime
import hashlib
import hmac
import ipaddress
import os
import socket
import struct

import pytest

from conftest import Server
from test_split import FLAGS, SPLIT, Box, run, single  # noqa: F401 (single: a fixture)

KEY = b"a key shared by the head and its box"
N_EMBD = 576
MAGIC, VERSION = b"TDSP", 6
CHALLENGE, HELLO, WELCOME, REFUSED, PING, PONG = 12, 1, 2, 3, 8, 9
HEADER = struct.Struct("<4sHBBQQQQI")


def pack(kind, body=b"", model_hash=0, seq=0):
    return HEADER.pack(MAGIC, VERSION, kind, 0, model_hash, 0, 0, seq, 0) + body


class Wire:
    """One connection to the box, speaking its frames by hand."""

    def __init__(self, box):
        host, port = box.addr.rsplit(":", 1)
        self.sock = socket.create_connection((host, int(port)), timeout=10)

    def send(self, frame):
        self.sock.sendall(struct.pack("<I", len(frame)) + frame)

    def recv(self):
        """(kind, model hash, epoch, body)."""
        n = struct.unpack("<I", self._exact(4))[0]
        b = self._exact(n)
        _, _, kind, _, model_hash, _, epoch, _, _ = HEADER.unpack_from(b)
        return kind, model_hash, epoch, b[HEADER.size:]

    def _exact(self, n):
        b = b""
        while len(b) < n:
            chunk = self.sock.recv(n - len(b))
            if not chunk:
                raise ConnectionError("the box closed the connection")
            b += chunk
        return b

    def hello(self, key, model_hash, head=1):
        """Answers the challenge with a fast lane's hello proved with `key` (None: no proof)."""
        kind, _, _, body = self.recv()
        assert kind == CHALLENGE
        challenge, nonce = body[:32], os.urandom(32)
        fields = pack(HELLO, struct.pack("<IIBQQ", SPLIT, N_EMBD, 0, 0, head) + nonce, model_hash)
        proof = hmac.new(key, b"tandem head hello" + challenge + nonce + fields, hashlib.sha256).digest() \
            if key else bytes(32)
        self.send(fields + proof)
        return self.recv()

    def close(self):
        self.sock.close()


def refusal(reply):
    kind, model_hash, epoch, body = reply
    assert kind == REFUSED, reply
    return model_hash, epoch, body.decode()


def rss_kib(pid):
    with open(f"/proc/{pid}/status") as f:
        return next(int(l.split()[1]) for l in f if l.startswith("VmRSS:"))


@pytest.fixture
def box():
    b = Box(flags=["--box-key", KEY.decode()])
    yield b
    b.stop()


def head(box, *flags):
    return Server(*FLAGS, "--split-at", str(SPLIT), "--box", box.addr, *flags)


def test_a_hello_without_or_with_a_wrong_key_is_refused_without_the_model(box):
    secret = f"{box.model_hash:016x}"
    for key in (None, b"not the key"):
        w = Wire(box)
        model_hash, epoch, reason = refusal(w.hello(key, box.model_hash))
        w.close()
        assert (model_hash, epoch) == (0, 0)
        assert "did not prove the box's key" in reason and secret not in reason, reason
    with pytest.raises(RuntimeError, match="asks for a key"):
        head(box)
    with pytest.raises(RuntimeError, match="did not prove the box's key"):
        head(box, "--box-key", "not the key")
    w = Wire(box)
    kind, model_hash, _, _ = w.hello(KEY, box.model_hash)
    w.close()
    assert (kind, model_hash) == (WELCOME, box.model_hash)


def test_a_second_head_is_refused_while_the_first_is_connected(box):
    s = head(box, "--box-key", KEY.decode())
    try:
        w = Wire(box)
        _, _, reason = refusal(w.hello(KEY, box.model_hash, head=12345))
        w.close()
        assert "another head holds this box" in reason, reason
        r = s.post("/v1/chat/completions", json={"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 4})
        assert r.status_code == 200, r.text
    finally:
        s.stop()


def announce(w, announced, sent=32 << 20):
    """Announces a frame of `announced` bytes: the box's reason for refusing it before any of its
    bytes came; then tries to send `sent` of them, which the box, having closed, does not take."""
    w.sock.sendall(struct.pack("<I", announced))
    reason = refusal(w.recv())[2]
    try:
        for _ in range(sent >> 20):
            w.sock.sendall(bytes(1 << 20))
    except OSError:
        pass
    w.close()
    return reason


def test_frames_past_what_the_box_allows_are_refused_unread(box):
    before = rss_kib(box.proc.pid)
    # Before a hello: eight connections announce 250 MiB frames.
    wires = [Wire(box) for _ in range(8)]
    for w in wires:
        assert w.recv()[0] == CHALLENGE
    for w in wires:
        assert "frame size too big" in announce(w, 250 << 20)
    # After a welcome: a frame longer than a forward of the whole context.
    w = Wire(box)
    assert w.hello(KEY, box.model_hash)[0] == WELCOME
    w.send(pack(PING, seq=1))
    assert w.recv()[0] == PONG
    assert "frame size too big" in announce(w, 250 << 20)
    grew = rss_kib(box.proc.pid) - before
    assert grew < 16 << 10, f"the box's RSS grew by {grew} KiB"


def make_certificates(tmp_path):
    """A CA, and a certificate for 127.0.0.1 it signed: the paths of the CA's, the box's and its key."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    now = datetime.datetime.now(datetime.timezone.utc)

    def cert(subject, key, issuer, issuer_key, ca):
        b = (x509.CertificateBuilder()
             .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, subject)]))
             .issuer_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, issuer)]))
             .public_key(key.public_key()).serial_number(x509.random_serial_number())
             .not_valid_before(now - datetime.timedelta(minutes=5))
             .not_valid_after(now + datetime.timedelta(days=1))
             .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True))
        if not ca:
            b = b.add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
                                critical=False)
        return b.sign(issuer_key, hashes.SHA256())

    ca_key, box_key = ec.generate_private_key(ec.SECP256R1()), ec.generate_private_key(ec.SECP256R1())
    ca = cert("tandem test CA", ca_key, "tandem test CA", ca_key, True)
    leaf = cert("tandem box", box_key, "tandem test CA", ca_key, False)
    paths = [tmp_path / n for n in ("ca.pem", "box.pem", "box-key.pem")]
    paths[0].write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    paths[1].write_bytes(leaf.public_bytes(serialization.Encoding.PEM))
    paths[2].write_bytes(box_key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                               serialization.NoEncryption()))
    return paths


def test_a_tls_link_serves_the_single_process_text(single, tmp_path):
    ca, cert, key = make_certificates(tmp_path)
    box = Box(flags=["--box-key", KEY.decode(), "--tls-cert", str(cert), "--tls-key", str(key)])
    try:
        texts, _ = run("--box-key", KEY.decode(), "--box-tls-ca", str(ca), box=box)
        assert texts == single
        with pytest.raises(RuntimeError, match="TLS|certificate"):
            head(box, "--box-key", KEY.decode(), "--box-tls-ca", str(cert))
    finally:
        box.stop()
