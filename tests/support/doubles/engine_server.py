"""TEST DOUBLE: a tiny stand-in for a serving engine, to drive the server rung's failure modes.

It speaks just enough of SGLang's (/health_generate, /generate) and the OpenAI
API (/health, /v1/models, /v1/completions), streaming, and can misbehave on
purpose.  A real engine cannot be made to fail in these ways on demand; the
real-engine test (vLLM CPU) lives in tests/ladder/test_engine.py.

Modes:
  ready          answers everything
  exit           prints an error and exits at once with code 3
  never-bind     prints start-up lines and never opens the port
  slow-start     answers 503 for --ready-after seconds, then ready
  broken-generation   /health says 200, every generation answers 500
  hang-generation     /health says 200, a generation request never answers
  hang-health         a health request never answers
  strict         as `transformers serve` without a hub cache: /v1/models answers 500,
                 a completion with a field outside the OpenAI API answers 422, and
                 one for another model than --model answers 404
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

HEALTH_PATHS = ("/health", "/health_generate")
OPENAI_COMPLETION_FIELDS = frozenset(
    {"model", "prompt", "max_tokens", "temperature", "stream", "stream_options", "top_p", "n"}
)


class Handler(BaseHTTPRequestHandler):
    server_version = "fake-engine/1"

    @property
    def options(self) -> argparse.Namespace:
        return self.server.options  # type: ignore[attr-defined,no-any-return]

    @property
    def starting(self) -> bool:
        started: float = self.server.started  # type: ignore[attr-defined]
        ready_after: float = self.options.ready_after
        return time.monotonic() - started < ready_after

    def log_message(self, format: str, *args: Any) -> None:
        print(f"fake-engine: {self.command} {self.path} {format % args}", flush=True)

    def _json(self, status: int, document: Any) -> None:
        body = json.dumps(document).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:
        mode = self.options.mode
        if self.path in HEALTH_PATHS:
            if mode == "hang-health":
                time.sleep(3600)
            if self.starting:
                self._json(503, {"detail": "model is loading"})
                return
            self._json(200, {})
        elif self.path == "/v1/models":
            if mode == "strict":
                self._json(500, {"detail": "Internal Server Error"})
                return
            if self.starting:
                self._json(503, {"detail": "model is loading"})
                return
            self._json(200, {"object": "list", "data": [{"id": "fake-model"}]})
        else:
            self._json(404, {"detail": "not found"})

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length", "0"))
        request = json.loads(self.rfile.read(length) or b"{}")
        mode = self.options.mode
        if self.starting:
            self._json(503, {"detail": "model is loading"})
            return
        if mode == "hang-generation":
            time.sleep(3600)
        if mode == "strict":
            unknown = set(request) - OPENAI_COMPLETION_FIELDS
            if unknown:
                self._json(422, {"detail": f"Unexpected fields in the request: {unknown}"})
                return
            if request.get("model") != self.options.model:
                self._json(404, {"detail": f"model {request.get('model')!r} is not served"})
                return
        if mode == "broken-generation":
            print("fake-engine: RuntimeError: attention kernel does not support head_dim=16")
            sys.stdout.flush()
            self._json(500, {"error": "RuntimeError: attention kernel failed"})
            return
        if self.path not in ("/v1/completions", "/generate"):
            self._json(404, {"detail": "not found"})
            return
        self._stream(request)

    def _stream(self, request: dict[str, Any]) -> None:
        words = self.options.text.split(" ")
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.end_headers()
        so_far = ""
        for count, word in enumerate(words, start=1):
            piece = word if count == 1 else " " + word
            so_far += piece
            if self.path == "/generate":
                event: dict[str, Any] = {"text": so_far, "meta_info": {"completion_tokens": count}}
            else:
                event = {"choices": [{"index": 0, "text": piece}]}
            self.wfile.write(f"data: {json.dumps(event)}\n\n".encode())
            self.wfile.flush()
            time.sleep(0.01)
        if self.path == "/v1/completions":
            usage = {"choices": [], "usage": {"completion_tokens": len(words)}}
            self.wfile.write(f"data: {json.dumps(usage)}\n\n".encode())
        self.wfile.write(b"data: [DONE]\n\n")
        self.wfile.flush()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--mode", default="ready")
    parser.add_argument("--ready-after", type=float, default=0.0)
    # FAKE_ENGINE_TEXT: lets a test see that a launch's environment reached the server
    text = os.environ.get("FAKE_ENGINE_TEXT", "Paris is the capital of France")
    parser.add_argument("--text", default=text)
    parser.add_argument("--pid-file")
    parser.add_argument("--model", help="the served model (mode strict)")
    parser.add_argument("--child", action="store_true", help="start a child in the same group")
    parser.add_argument("--ignore-term", action="store_true", help="ignore SIGTERM")
    options = parser.parse_args()

    pids = {"server": os.getpid(), "pgid": os.getpgid(0)}
    if options.ignore_term:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    if options.child:
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(3600)"])
        pids["child"] = child.pid
    if options.pid_file:
        with open(options.pid_file, "w") as handle:
            json.dump(pids, handle)
    print(f"fake-engine: starting in mode {options.mode}", flush=True)
    if options.mode == "exit":
        print("fake-engine: ValueError: model path does not exist", flush=True)
        sys.exit(3)
    if options.mode == "never-bind":
        print("fake-engine: loading weights ...", flush=True)
        time.sleep(3600)
    server = ThreadingHTTPServer(("127.0.0.1", options.port), Handler)
    server.daemon_threads = True
    server.options = options  # type: ignore[attr-defined]
    server.started = time.monotonic()  # type: ignore[attr-defined]
    print(f"fake-engine: listening on {options.port}", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
