"""Every Elasticsearch client connects as `contracts.elasticsearch` says: here, to a loopback
HTTPS server whose certificate the settings' CA signed, with the settings' basic credentials.
(The embedded node, Elasticsearch 7.10 without its security modules, asks for neither.)"""

from __future__ import annotations

import base64
import json
import ssl
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path

import httpx
import pytest

from keystone.contracts import elasticsearch
from keystone.contracts.elasticsearch import Connection
from keystone.contracts.errors import SinkError
from keystone.contracts.settings import Settings
from keystone.router.sinks.elasticsearch.readback import search_documents
from keystone.stack.kafka_security import make_certificates


@pytest.fixture
def https(tmp_path: Path) -> Iterator[tuple[str, Path, list[str | None]]]:
    """A loopback HTTPS server (the URL, the CA that signed its certificate, and the
    Authorization header of each request it was sent)."""
    settings = Settings(state_dir=tmp_path, bind_host="127.0.0.1")
    make_certificates(settings)  # a CA, and a certificate it signed for 127.0.0.1
    seen: list[str | None] = []

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            seen.append(self.headers.get("Authorization"))
            self.send_response(200)
            self.end_headers()
            self.wfile.write(b"{}")

        def log_message(self, *_: object) -> None:
            pass

    server = HTTPServer(("127.0.0.1", 0), Handler)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(settings.kafka_tls_dir / "broker-keystore.pem")
    server.socket = context.wrap_socket(server.socket, server_side=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"https://127.0.0.1:{server.server_port}", settings.kafka_tls_dir / "ca.pem", seen
    finally:
        server.shutdown()
        server.server_close()


def test_a_client_trusts_the_settings_ca_and_sends_their_credentials(
    https: tuple[str, Path, list[str | None]], tmp_path: Path
) -> None:
    url, ca, seen = https
    secret = tmp_path / "es-password"
    secret.write_text("s3cret\n")
    settings = Settings(
        state_dir=tmp_path,
        elasticsearch_url=url,
        elasticsearch_username="keystone",
        elasticsearch_password_file=str(secret),
        elasticsearch_ca_file=str(ca),
    )
    es = Connection.of(settings)
    with es.client() as client:
        assert client.get("/").status_code == 200
    assert es.shared().get("/").status_code == 200
    assert es.shared() is es.shared()  # one per process and connection
    expected = "Basic " + base64.b64encode(b"keystone:s3cret").decode()
    assert seen == [expected, expected]
    assert "s3cret" not in repr(es)


def test_without_the_ca_the_servers_certificate_is_refused(
    https: tuple[str, Path, list[str | None]],
) -> None:
    url, _, seen = https
    with Connection(url).client() as client, pytest.raises(httpx.ConnectError, match="CERTIFICATE"):
        client.get("/")
    assert seen == []


def test_without_a_user_no_credentials_are_sent(
    https: tuple[str, Path, list[str | None]],
) -> None:
    url, ca, seen = https
    with Connection(url, ca_file=str(ca)).client() as client:
        assert client.get("/").status_code == 200
    assert seen == [None]


def test_no_client_outside_the_connection_reads_elasticsearchs_url() -> None:
    """A client made from `elasticsearch_url` itself would connect without the settings'
    credentials and CA. Allowed: the settings that define it, the embedded node's health check
    (which asks for neither), and the demo's closing lines, which print it for a person."""
    root = Path(elasticsearch.__file__).parents[1]  # the keystone package
    allowed = {"contracts/elasticsearch.py", "contracts/settings.py", "stack/services.py"}
    allowed.add("loadtest/demo.py")
    found = {
        path.relative_to(root).as_posix()
        for path in root.rglob("*.py")
        if "elasticsearch_url" in path.read_text()
    }
    assert found == allowed


def test_basic_credentials_over_plain_http_are_refused() -> None:
    with pytest.raises(ValueError, match="give an https URL"):
        Settings(elasticsearch_url="http://search:9200", elasticsearch_username="keystone")


def test_an_answer_some_shards_failed_is_refused_not_read_as_documents_missing() -> None:
    """A search whose shards partly failed answers 200 with fewer hits: read as the sink's
    contents, an audit would count the rest lost. Asked again for a while (a new index's
    shard starting), then it raises, saying so."""

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            self.rfile.read(int(self.headers.get("Content-Length") or 0))
            shards = {"total": 1, "successful": 0, "failed": 1, "failures": ["breaker"]}
            body = {"_shards": shards, "hits": {"hits": []}}
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.end_headers()
            self.wfile.write(json.dumps(body).encode())

        def log_message(self, *_: object) -> None:
            pass

    server = HTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        connection = Connection(f"http://127.0.0.1:{server.server_port}")
        with pytest.raises(SinkError, match="shards failed: \\['breaker'\\]"):
            search_documents(connection, "plays-search-*", unready_for=2)
    finally:
        server.shutdown()
        server.server_close()
