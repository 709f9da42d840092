"""The EC2 instance metadata client against a real local server that speaks IMDSv2, against an
address that never answers, and the order in which the instance type is decided."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from autotune.machine import host
from autotune.machine.instance_metadata import ENDPOINT_ENV, TIMEOUT_S, imds_instance_type

TOKEN = "AQAEAFake-session-token=="


class _IMDSv2(BaseHTTPRequestHandler):
    """IMDSv2 as EC2 serves it: a token for a PUT with a TTL header, then metadata only for a GET
    that carries that token (401 otherwise)."""

    answer = "inf2.xlarge"
    requests: list[str] = []

    def do_PUT(self) -> None:  # noqa: N802 (http.server's names)
        self.requests.append(f"PUT {self.path}")
        if self.path != "/latest/api/token" or not self.headers.get("X-aws-ec2-metadata-token-ttl-seconds"):
            self._send(400, "")
            return
        self._send(200, TOKEN)

    def do_GET(self) -> None:  # noqa: N802
        self.requests.append(f"GET {self.path}")
        if self.headers.get("X-aws-ec2-metadata-token") != TOKEN:
            self._send(401, "")
        elif self.path == "/latest/meta-data/instance-type":
            self._send(200, self.answer)
        else:
            self._send(404, "")

    def _send(self, code: int, body: str) -> None:
        data = body.encode()
        self.send_response(code)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args: object) -> None:
        pass


def _serve(answer: str) -> Iterator[tuple[str, list[str]]]:
    handler = type("Handler", (_IMDSv2,), {"answer": answer, "requests": []})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", handler.requests
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture
def imds(monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[str, list[str]]]:
    monkeypatch.delenv("AWS_EC2_METADATA_DISABLED", raising=False)
    for served in _serve("inf2.xlarge"):
        monkeypatch.setenv(ENDPOINT_ENV, served[0])
        yield served


def test_the_instance_type_comes_from_imdsv2_with_a_token_once_per_process(imds) -> None:
    _, requests = imds
    assert imds_instance_type() == "inf2.xlarge"
    assert requests == ["PUT /latest/api/token", "GET /latest/meta-data/instance-type"]
    assert imds_instance_type() == "inf2.xlarge"
    assert len(requests) == 2, "asked once per process"


def test_an_address_that_never_answers_costs_no_more_than_the_timeout(monkeypatch: pytest.MonkeyPatch) -> None:
    # A listening socket that never accepts: the connection is made, no answer ever comes.
    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(0)
    monkeypatch.setenv(ENDPOINT_ENV, f"http://127.0.0.1:{silent.getsockname()[1]}")
    monkeypatch.delenv("AWS_EC2_METADATA_DISABLED", raising=False)
    try:
        started = time.monotonic()
        assert imds_instance_type() is None
        waited = time.monotonic() - started
        assert TIMEOUT_S - 0.05 < waited < TIMEOUT_S + 0.2, "connected, then waited for an answer until the cap"
    finally:
        silent.close()


def test_a_closed_port_and_a_page_that_is_no_instance_type_are_no_answer(monkeypatch: pytest.MonkeyPatch) -> None:
    closed = socket.socket()
    closed.bind(("127.0.0.1", 0))
    port = closed.getsockname()[1]
    closed.close()
    monkeypatch.setenv(ENDPOINT_ENV, f"http://127.0.0.1:{port}")
    assert imds_instance_type() is None
    for endpoint, _ in _serve("<html>Welcome to the hotel wifi</html>"):
        monkeypatch.setenv(ENDPOINT_ENV, endpoint)
        assert imds_instance_type() is None


def test_it_can_be_turned_off_as_the_aws_sdks_are(imds, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    assert imds_instance_type() is None
    assert imds[1] == []


def test_declared_then_environment_then_metadata_service_then_dmi(imds, monkeypatch: pytest.MonkeyPatch,
                                                                  tmp_path: Path) -> None:
    product = tmp_path / "product_name"
    product.write_text("trn1.32xlarge\n")
    monkeypatch.setattr(host, "DMI_PRODUCT_NAME", product)
    monkeypatch.delenv("AUTOTUNE_INSTANCE_TYPE", raising=False)
    assert host.instance_type("trn1.2xlarge") == "trn1.2xlarge"
    assert host.instance_type() == "inf2.xlarge"
    monkeypatch.setenv("AUTOTUNE_INSTANCE_TYPE", "inf2.48xlarge")
    assert host.instance_type() == "inf2.48xlarge"
    monkeypatch.delenv("AUTOTUNE_INSTANCE_TYPE")
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    assert host.instance_type() == "trn1.32xlarge", "out of the metadata service's reach: the DMI product name"


def test_a_reply_that_is_not_http_is_no_answer(monkeypatch: pytest.MonkeyPatch) -> None:
    # A service on the port that answers another protocol: http.client raises BadStatusLine, an
    # HTTPException and no OSError.
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()

    def answer() -> None:
        conn, _ = server.accept()
        with conn:
            conn.recv(4096)
            conn.sendall(b"SSH-2.0-OpenSSH_9.6\r\n\r\n")

    threading.Thread(target=answer, daemon=True).start()
    monkeypatch.setenv(ENDPOINT_ENV, f"http://127.0.0.1:{server.getsockname()[1]}")
    monkeypatch.delenv("AWS_EC2_METADATA_DISABLED", raising=False)
    try:
        assert imds_instance_type() is None
    finally:
        server.close()


def test_a_firmware_placeholder_is_no_instance_type(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    product = tmp_path / "product_name"
    product.write_text("To Be Filled By O.E.M.\n")
    monkeypatch.setattr(host, "DMI_PRODUCT_NAME", product)
    monkeypatch.delenv("AUTOTUNE_INSTANCE_TYPE", raising=False)
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    assert host.instance_type() is None
