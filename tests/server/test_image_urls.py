"""Image URLs (`--image-urls allow`): the server fetches http and https images itself, from a
local web server here (HTTPS with a certificate made for the test and trusted through
SSL_CERT_FILE), within its limits; without the flag an http URL is a 400 saying how to get
it read (test_vision.py's hostile images). The image is the golden one of test_vision.py, so the
answer must be llama-mtmd-cli's."""

import datetime
import http.server
import ipaddress
import os
import ssl
import threading

import anthropic
import openai
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from conftest import Server
from test_vision import GOLDEN, IMAGE, ask, synth


class Pages(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        if self.path == "/stripes.png":
            self.answer(200, IMAGE, "image/png")
        elif self.path == "/moved":
            self.send_response(302)
            self.send_header("Location", "/stripes.png")
            self.send_header("Content-Length", "0")
            self.end_headers()
        elif self.path == "/loop":
            self.send_response(302)
            self.send_header("Location", "/loop")
            self.send_header("Content-Length", "0")
            self.end_headers()
        elif self.path == "/page.html":
            self.answer(200, b"<html>not an image</html>", "text/html")
        else:
            self.answer(404, b"no such page", "text/plain")

    def answer(self, status, body, kind):
        self.send_response(status)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


def serve_pages(tls=None):
    """A web server of `Pages` on 127.0.0.1 (wrapped in `tls` where given): its base URL."""
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Pages)
    if tls is not None:
        httpd.socket = tls.wrap_socket(httpd.socket, server_side=True)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    scheme = "https" if tls else "http"
    return httpd, f"{scheme}://127.0.0.1:{httpd.server_address[1]}"


def certificate(d):
    """A certificate authority made for the test and a certificate it signed for 127.0.0.1,
    as PEM files in `d`: (the authority's certificate, the server's chain, its key)."""
    now = datetime.datetime.now(datetime.timezone.utc)

    def signed(subject, key, issuer, issuer_key, ca):
        b = (
            x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, subject)]))
            .issuer_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, issuer)]))
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
        )
        if not ca:
            san = x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))])
            b = b.add_extension(san, critical=False)
        return b.sign(issuer_key, hashes.SHA256())

    ca_key, key = ec.generate_private_key(ec.SECP256R1()), ec.generate_private_key(ec.SECP256R1())
    ca = signed("tandem test authority", ca_key, "tandem test authority", ca_key, True)
    leaf = signed("127.0.0.1", key, "tandem test authority", ca_key, False)
    pem = lambda c: c.public_bytes(serialization.Encoding.PEM)  # noqa: E731
    ca_pem, chain_pem, key_pem = d / "ca.pem", d / "chain.pem", d / "key.pem"
    ca_pem.write_bytes(pem(ca))
    chain_pem.write_bytes(pem(leaf) + pem(ca))
    key_pem.write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    return ca_pem, chain_pem, key_pem


def tls_context(chain, key):
    tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    tls.load_cert_chain(chain, key)
    return tls


@pytest.fixture(scope="module")
def fetching(tmp_path_factory):
    d = tmp_path_factory.mktemp("urls")
    ca, chain, key = certificate(d)
    plain, http_base = serve_pages()
    secure, https_base = serve_pages(tls_context(chain, key))
    tower = synth(d, "gemma3-270m", GOLDEN)
    s = Server("-c", "2048", "-np", "2", "--mmproj", str(tower), "--image-urls", "allow",
               model="gemma3-270m", env={**os.environ, "SSL_CERT_FILE": str(ca)})
    yield s, http_base, https_base
    s.stop()
    plain.shutdown()
    secure.shutdown()


def test_http_and_https_images_are_fetched_and_read_as_data_urls_are(fetching):
    s, http_base, https_base = fetching
    for url in [f"{http_base}/stripes.png", f"{https_base}/stripes.png", f"{http_base}/moved"]:
        assert ask(s.client(), url).choices[0].message.content == GOLDEN["answer"], url
    a = anthropic.Anthropic(base_url=s.url, api_key="x", max_retries=0)
    m = a.messages.create(model="gemma3", max_tokens=GOLDEN["max_tokens"], extra_body={"temperature": 0}, messages=[
        {"role": "user", "content": [
            {"type": "text", "text": GOLDEN["text_before_image"]},
            {"type": "image", "source": {"type": "url", "url": f"{https_base}/stripes.png"}},
        ]}])
    assert m.content[0].text == GOLDEN["answer"]


def test_a_url_that_gives_no_image_is_a_400_saying_why(fetching):
    s, http_base, _ = fetching
    for path, why in [("/missing.png", "answered 404"), ("/page.html", "format is not recognized"),
                      ("/loop", "more than 3 redirects")]:
        with pytest.raises(openai.BadRequestError) as e:
            ask(s.client(), http_base + path, max_tokens=1)
        assert "messages[0].content[1].image_url" in str(e.value) and why in str(e.value), (path, str(e.value))
    # No port listening there.
    with pytest.raises(openai.BadRequestError) as e:
        ask(s.client(), "http://127.0.0.1:9/x.png", max_tokens=1)
    assert "fetching http://127.0.0.1:9/x.png" in str(e.value)


def test_a_certificate_of_an_authority_not_trusted_is_a_400(fetching, tmp_path):
    """A web server whose certificate another authority signed (not in SSL_CERT_FILE)."""
    s, _, _ = fetching
    _, chain, key = certificate(tmp_path)
    secure, https_base = serve_pages(tls_context(chain, key))
    try:
        with pytest.raises(openai.BadRequestError) as e:
            ask(s.client(), f"{https_base}/stripes.png", max_tokens=1)
        assert "TLS: invalid peer certificate" in str(e.value)
    finally:
        secure.shutdown()
