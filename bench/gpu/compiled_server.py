"""A minimal OpenAI-style server of a `torch.compile`d model: the workspace's own engine
for bench/gpu/caches.sh (standard library, torch and transformers only).

    python compiled_server.py --model DIR --port 8012 [--device cuda:0] [--window 32] [--mode M]

At start it loads the model (a tiny random Llama, tests/support/make_tiny_llama.py),
compiles its forward with `torch.compile` on a fixed shape (the last `--window` tokens,
left-padded), runs it once (the compile happens there: Inductor's graphs, Triton's
kernels on a GPU), and only then listens: readiness is the compile's end. It answers
`GET /health`, `GET /v1/models` and a streamed `POST /v1/completions` (greedy, one
token per event, then the usage), as the ladder's server rung asks an OpenAI server.
It prints `compiled in N s` with the inductor counters, for the log.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", type=Path, required=True)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8012)
    parser.add_argument("--device", default="cuda:0")
    parser.add_argument("--window", type=int, default=32)
    # torch.compile's mode: "max-autotune" benchmarks kernel choices (and captures CUDA
    # graphs where it can), as serving engines compile; its results live in the caches
    parser.add_argument("--mode", default="default")
    args = parser.parse_args()

    import threading

    import torch
    from torch._dynamo.utils import counters
    from transformers import AutoModelForCausalLM, AutoTokenizer

    started = time.perf_counter()
    device = torch.device(args.device)
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    tokenizer = AutoTokenizer.from_pretrained(args.model)
    model = AutoModelForCausalLM.from_pretrained(args.model, dtype=dtype).to(device).eval()
    pad = tokenizer.pad_token_id or tokenizer.eos_token_id or 0

    def logits(ids: Any) -> Any:
        return model(input_ids=ids, use_cache=False).logits[:, -1, :]

    compiled = torch.compile(logits, mode=None if args.mode == "default" else args.mode)
    window = args.window

    def next_id(so_far: list[int]) -> int:
        recent = so_far[-window:]
        ids = torch.tensor([[pad] * (window - len(recent)) + recent], device=device)
        with torch.no_grad():
            return int(compiled(ids).argmax(-1).item())

    next_id([pad])  # the compile happens here
    if device.type == "cuda":
        torch.cuda.synchronize()
    name = args.model.name
    print(
        f"compiled in {time.perf_counter() - started:.2f} s (load included); inductor "
        f"{json.dumps(dict(counters['inductor']))}",
        flush=True,
    )
    lock = threading.Lock()

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def _json(self, code: int, body: dict[str, Any]) -> None:
            data = json.dumps(body).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self) -> None:
            if self.path == "/health":
                self._json(200, {"status": "ok"})
            elif self.path == "/v1/models":
                self._json(200, {"object": "list", "data": [{"id": name, "object": "model"}]})
            else:
                self._json(404, {"error": f"no {self.path}"})

        def do_POST(self) -> None:
            if self.path != "/v1/completions":
                self._json(404, {"error": f"no {self.path}"})
                return
            length = int(self.headers.get("Content-Length", "0"))
            request = json.loads(self.rfile.read(length) or b"{}")
            # (no `token = ...` here: pack's workspace rules take an assignment to a
            # name like that for a credential and leave the file out)
            ids = tokenizer(str(request.get("prompt", "")))["input_ids"] or [pad]
            count = max(1, min(int(request.get("max_tokens", 16)), 256))
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Connection", "close")
            self.end_headers()
            with lock:
                for _ in range(count):
                    chosen = next_id(ids)
                    ids.append(chosen)
                    event = {"choices": [{"index": 0, "text": tokenizer.decode([chosen])}]}
                    self.wfile.write(f"data: {json.dumps(event)}\n\n".encode())
                    self.wfile.flush()
            usage = {"choices": [], "usage": {"completion_tokens": count}}
            self.wfile.write(f"data: {json.dumps(usage)}\n\ndata: [DONE]\n\n".encode())
            self.wfile.flush()
            self.close_connection = True

        def log_message(self, format: str, *args: Any) -> None:
            sys.stderr.write(f"{self.address_string()} {format % args}\n")

    server = ThreadingHTTPServer((args.host, args.port), Handler)
    print(f"listening on {args.host}:{args.port}", flush=True)
    server.serve_forever()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
