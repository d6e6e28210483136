"""Tests of repro.ladder.readiness: health, model and generation over real HTTP."""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from repro.errors import GenerationError
from repro.ladder.readiness import Probe, base_url, generate, probe_health, served_model
from repro.ladder.types import LaunchSpec


@dataclass
class Route:
    status: int = 200
    body: bytes = b""
    content_type: str = "application/json"


@dataclass
class Server:
    """A local HTTP server answering each path as its Route says, recording requests."""

    port: int
    routes: dict[str, Route] = field(default_factory=dict)
    requests: list[tuple[str, str, Any]] = field(default_factory=list)

    def launch(self, engine: str) -> LaunchSpec:
        return LaunchSpec("serve", self.port, engine, argv=("x",), max_tokens=4)


def _stream(*events: object, done: bool = True) -> bytes:
    lines = [f"data: {json.dumps(e) if not isinstance(e, str) else e}\n\n" for e in events]
    return ("".join(lines) + ("data: [DONE]\n\n" if done else "")).encode()


@pytest.fixture
def server() -> Iterator[Server]:
    state = Server(0)

    class Handler(BaseHTTPRequestHandler):
        def _answer(self, body: Any) -> None:
            state.requests.append((self.command, self.path, body))
            route = state.routes.get(self.path, Route(404, b"not found", "text/plain"))
            self.send_response(route.status)
            self.send_header("Content-Type", route.content_type)
            self.send_header("Content-Length", str(len(route.body)))
            self.end_headers()
            self.wfile.write(route.body)

        def do_GET(self) -> None:
            self._answer(None)

        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length", 0))
            self._answer(json.loads(self.rfile.read(length)))

        def log_message(self, format: str, *args: Any) -> None:
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    state.port = httpd.server_address[1]
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield state
    httpd.shutdown()
    httpd.server_close()


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_base_url() -> None:
    assert base_url(LaunchSpec("s", 8000, "vllm", host="10.0.0.2")) == "http://10.0.0.2:8000"


@pytest.mark.parametrize(
    ("engine", "path", "status", "state", "detail"),
    [
        ("sglang", "/health_generate", 200, Probe.READY, "GET /health_generate: HTTP 200"),
        ("vllm", "/health", 200, Probe.READY, "GET /health: HTTP 200"),
        ("openai", "/health", 503, Probe.STARTING, "GET /health: HTTP 503 loading\nweights"),
        ("sglang", "/health_generate", 500, Probe.STARTING, "GET /health_generate: HTTP 500"),
    ],
)
def test_probe_health(
    server: Server, engine: str, path: str, status: int, state: Probe, detail: str
) -> None:
    server.routes[path] = Route(status, b"loading\nweights" if status == 503 else b"")
    result = probe_health(server.launch(engine), timeout=5)
    assert result.state is state
    assert result.detail == detail.replace("\n", " ")
    assert server.requests == [("GET", path, None)]


def test_probe_health_with_nothing_listening() -> None:
    launch = LaunchSpec("s", _free_port(), "sglang")
    result = probe_health(launch, timeout=2)
    assert (result.state, result.detail) == (
        Probe.STARTING,
        "GET /health_generate: connection refused",
    )


@pytest.mark.parametrize(
    ("route", "state", "detail"),
    [
        (Route(200, b'{"data": [{"id": "tiny-llama"}, {"id": "b"}]}'), Probe.READY, "tiny-llama"),
        (Route(503, b"starting"), Probe.STARTING, "GET /v1/models: HTTP 503 starting"),
        (Route(401, b"no key"), Probe.BROKEN, "GET /v1/models: HTTP 401 no key"),
        (Route(200, b'{"data": []}'), Probe.BROKEN, 'GET /v1/models: unexpected body {"data": []}'),
        (Route(200, b"<html>"), Probe.BROKEN, "GET /v1/models: unexpected body <html>"),
    ],
)
def test_served_model(server: Server, route: Route, state: Probe, detail: str) -> None:
    server.routes["/v1/models"] = route
    result = served_model(server.launch("vllm"), timeout=5)
    assert (result.state, result.detail) == (state, detail)


def test_sglang_generation_reads_the_whole_text_so_far(server: Server) -> None:
    server.routes["/generate"] = Route(
        200,
        _stream(
            {"text": " Paris", "meta_info": {"completion_tokens": 1}},
            {"text": " Paris.", "meta_info": {"completion_tokens": 2}},
            {"text": " Paris.", "meta_info": {"completion_tokens": 2}},  # nothing new
        ),
        "text/event-stream",
    )
    result = generate(server.launch("sglang"), None, timeout=10)
    assert (result.text, result.tokens) == (" Paris.", 2)
    assert result.ttft_s is not None and 0 <= result.ttft_s <= result.total_s
    method, path, body = server.requests[0]
    assert (method, path) == ("POST", "/generate")
    assert body["sampling_params"] == {"max_new_tokens": 4, "temperature": 0, "ignore_eos": True}
    assert body["stream"] is True and body["text"] == "The capital of France is"


@pytest.mark.parametrize(("engine", "ignore_eos"), [("vllm", True), ("openai", None)])
def test_openai_generation_appends_pieces_and_takes_usage(
    server: Server, engine: str, ignore_eos: bool | None
) -> None:
    server.routes["/v1/completions"] = Route(
        200,
        _stream(
            {"choices": [{"text": " Par"}]},
            {"choices": [{"text": "is"}]},
            {"choices": [], "usage": {"completion_tokens": 3}},
        ),
    )
    result = generate(server.launch(engine), "tiny", timeout=10)
    assert (result.text, result.tokens) == (" Paris", 3)
    body = server.requests[0][2]
    assert (body["model"], body["max_tokens"], body.get("ignore_eos")) == ("tiny", 4, ignore_eos)


def test_without_usage_the_chunks_are_counted(server: Server) -> None:
    server.routes["/v1/completions"] = Route(
        200, _stream({"choices": [{"text": "a"}]}, {"choices": [{"text": "b"}]}, done=False)
    )
    assert generate(server.launch("vllm"), "m", timeout=10).tokens == 2


@pytest.mark.parametrize(
    ("route", "state", "detail"),
    [
        (Route(503, b"warming"), Probe.STARTING, "POST /v1/completions: HTTP 503 warming"),
        (Route(422, b"bad field"), Probe.BROKEN, "POST /v1/completions: HTTP 422 bad field"),
        (
            Route(200, _stream()),
            Probe.BROKEN,
            "POST /v1/completions: HTTP 200 but no tokens came back",
        ),
        (Route(200, _stream({"error": "OOM"})), Probe.BROKEN, "error in stream: OOM"),
        (Route(200, _stream("{broken")), Probe.BROKEN, "unreadable stream event: {broken"),
    ],
)
def test_generation_errors_say_whether_to_wait(
    server: Server, route: Route, state: Probe, detail: str
) -> None:
    server.routes["/v1/completions"] = route
    with pytest.raises(GenerationError) as caught:
        generate(server.launch("vllm"), "m", timeout=10)
    assert (caught.value.state, caught.value.detail) == (state, detail)


def test_generation_with_nothing_listening_is_still_starting() -> None:
    with pytest.raises(GenerationError) as caught:
        generate(LaunchSpec("s", _free_port(), "sglang"), None, timeout=2)
    assert caught.value.state is Probe.STARTING
    assert caught.value.detail == "POST /generate: connection refused"
