"""Talk to a serving engine over HTTP: is it up, and does it really generate?

SGLang: ``GET /health_generate`` then a streamed ``POST /generate``.
OpenAI-compatible (vLLM, ``transformers serve``): ``GET /health``, ``GET /v1/models``
for the model name (else the model the command line names), then a streamed
``POST /v1/completions`` of the standard fields (vLLM also gets ``ignore_eos``).
A 503 anywhere means the server is still starting.
"""

from __future__ import annotations

import enum
import json
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import requests

from repro.errors import GenerationError
from repro.ladder.types import LaunchSpec


class Probe(enum.Enum):
    READY = "ready"
    STARTING = "starting"  # no answer yet, 503, or not yet 200
    BROKEN = "broken"  # answered, and the answer says it cannot serve


@dataclass(frozen=True)
class ProbeResult:
    state: Probe
    detail: str


@dataclass(frozen=True)
class Generation:
    text: str
    tokens: int
    ttft_s: float | None
    total_s: float
    tokens_per_s: float | None


def base_url(launch: LaunchSpec) -> str:
    return f"http://{launch.host}:{launch.port}"


def _describe(response: requests.Response) -> str:
    body = response.text.strip().replace("\n", " ")
    return f"HTTP {response.status_code} {body[:300]}".strip()


def probe_health(launch: LaunchSpec, timeout: float) -> ProbeResult:
    path = "/health_generate" if launch.engine == "sglang" else "/health"
    try:
        response = requests.get(base_url(launch) + path, timeout=timeout)
    except requests.Timeout:
        return ProbeResult(Probe.STARTING, f"GET {path}: no answer within {timeout:.1f} s")
    except requests.ConnectionError:
        return ProbeResult(Probe.STARTING, f"GET {path}: connection refused")
    if response.status_code == 200:
        return ProbeResult(Probe.READY, f"GET {path}: HTTP 200")
    return ProbeResult(Probe.STARTING, f"GET {path}: {_describe(response)}")


def served_model(launch: LaunchSpec, timeout: float) -> ProbeResult:
    """The first model name of an OpenAI-compatible server (detail holds the name)."""
    try:
        response = requests.get(base_url(launch) + "/v1/models", timeout=timeout)
    except requests.RequestException as exc:
        return ProbeResult(Probe.STARTING, f"GET /v1/models: {type(exc).__name__}")
    if response.status_code == 503:
        return ProbeResult(Probe.STARTING, f"GET /v1/models: {_describe(response)}")
    if response.status_code != 200:
        return ProbeResult(Probe.BROKEN, f"GET /v1/models: {_describe(response)}")
    try:
        name = str(response.json()["data"][0]["id"])
    except (ValueError, KeyError, IndexError, TypeError):
        return ProbeResult(Probe.BROKEN, f"GET /v1/models: unexpected body {response.text[:300]}")
    return ProbeResult(Probe.READY, name)


def _events(response: requests.Response) -> Iterator[dict[str, Any]]:
    for raw in response.iter_lines():
        line = raw.decode("utf-8", errors="replace").strip()
        if not line.startswith("data:"):
            continue
        payload = line[len("data:") :].strip()
        if payload == "[DONE]":
            return
        try:
            event = json.loads(payload)
        except json.JSONDecodeError as exc:
            raise GenerationError(
                Probe.BROKEN, f"unreadable stream event: {payload[:200]}"
            ) from exc
        if isinstance(event, dict):
            if "error" in event:
                raise GenerationError(Probe.BROKEN, f"error in stream: {event['error']}")
            yield event


def _request(launch: LaunchSpec, model: str | None) -> tuple[str, dict[str, Any]]:
    if launch.engine == "sglang":
        body: dict[str, Any] = {
            "text": launch.prompt,
            "sampling_params": {
                "max_new_tokens": launch.max_tokens,
                "temperature": 0,
                "ignore_eos": True,
            },
            "stream": True,
        }
        return "/generate", body
    body = {
        "model": model,
        "prompt": launch.prompt,
        "max_tokens": launch.max_tokens,
        "temperature": 0,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    if launch.engine == "vllm":
        # vLLM's extension: a random-weight model still streams max_tokens. A strict
        # OpenAI server (`transformers serve`) refuses unknown fields with HTTP 422.
        body["ignore_eos"] = True
    return "/v1/completions", body


def generate(launch: LaunchSpec, model: str | None, timeout: float) -> Generation:
    """One streamed generation; raises GenerationError saying whether to keep waiting."""
    path, body = _request(launch, model)
    started = time.monotonic()
    try:
        response = requests.post(base_url(launch) + path, json=body, stream=True, timeout=timeout)
    except requests.Timeout as exc:
        raise GenerationError(
            Probe.BROKEN, f"POST {path}: no answer within {timeout:.1f} s"
        ) from exc
    except requests.ConnectionError as exc:
        raise GenerationError(Probe.STARTING, f"POST {path}: connection refused") from exc
    with response:
        if response.status_code == 503:
            raise GenerationError(Probe.STARTING, f"POST {path}: {_describe(response)}")
        if response.status_code != 200:
            raise GenerationError(Probe.BROKEN, f"POST {path}: {_describe(response)}")
        text = ""
        chunks = 0
        usage_tokens: int | None = None
        first: float | None = None
        try:
            for event in _events(response):
                if time.monotonic() - started > timeout:
                    raise GenerationError(Probe.BROKEN, f"POST {path}: slower than {timeout:g} s")
                piece, tokens = _piece(launch, event, text)
                if tokens is not None:
                    usage_tokens = tokens
                if piece:
                    first = time.monotonic() if first is None else first
                    chunks += 1
                    text = piece if launch.engine == "sglang" else text + piece
        except requests.RequestException as exc:
            raise GenerationError(
                Probe.BROKEN, f"POST {path}: stream broke off: {type(exc).__name__}: {exc}"
            ) from exc
    total = time.monotonic() - started
    tokens = usage_tokens if usage_tokens is not None else chunks
    if tokens == 0 or first is None:
        raise GenerationError(Probe.BROKEN, f"POST {path}: HTTP 200 but no tokens came back")
    # End to end (time to first token included): engines coalesce streamed chunks,
    # so a rate taken between chunks alone can be wildly off.
    rate = tokens / total if total > 0 else None
    return Generation(text, tokens, first - started, total, rate)


def _piece(launch: LaunchSpec, event: dict[str, Any], text: str) -> tuple[str, int | None]:
    """The text an event carries (SGLang: the whole text so far) and any token count."""
    if launch.engine == "sglang":
        piece = str(event.get("text", ""))
        if text and not piece.startswith(text):
            piece = text + piece  # incremental streaming output
        meta = event.get("meta_info") or {}
        count = meta.get("completion_tokens")
        return (piece if piece != text else ""), (int(count) if count is not None else None)
    usage = event.get("usage") or {}
    count = usage.get("completion_tokens")
    choices = event.get("choices") or []
    piece = str(choices[0].get("text", "")) if choices else ""
    return piece, (int(count) if count is not None else None)
