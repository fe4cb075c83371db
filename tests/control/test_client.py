"""The control client's failover between control processes, against real sockets: a refused
connection moves on to the next process (which is then asked first); a request that reached a
process is never sent to another."""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import ClassVar

import pytest

from keystone.contracts.errors import Unavailable
from keystone.control.client import ControlClient


class Answers(BaseHTTPRequestHandler):
    asked: ClassVar[list[str]] = []

    def do_GET(self) -> None:
        Answers.asked.append(self.path)
        if self.path == "/slow":
            self.connection.close()  # reached, then dropped: never sent elsewhere
            return
        body = json.dumps([]).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *_: object) -> None:
        pass


@pytest.fixture
def live() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), Answers)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    Answers.asked = []
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()


def refused() -> str:
    """A loopback port nothing listens on."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{s.getsockname()[1]}"


def test_a_refused_connection_moves_on_to_the_next_control_process(live: str) -> None:
    dead = refused()
    with ControlClient([dead, live], "token") as client:
        assert client.streams() == []
        assert client.url == live  # asked first from now on
        assert client.urls == [live, dead]


def test_a_request_that_reached_a_process_is_not_sent_to_another(live: str) -> None:
    other = refused()
    with ControlClient([live, other], "token") as client, pytest.raises(Unavailable) as caught:
        client.call("GET", "/slow")
    assert Answers.asked == ["/slow"]
    assert live in caught.value.message and "ask again" in caught.value.message


def test_no_process_answering_names_every_one_tried() -> None:
    first, second = refused(), refused()
    with ControlClient([first, second], "token") as client, pytest.raises(Unavailable) as caught:
        client.streams()
    assert first in caught.value.message and second in caught.value.message
