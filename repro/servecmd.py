"""What a server command line runs: the engine, its port, and the models it names.

Known engines: SGLang (``python -m sglang.launch_server ...``, ``sglang serve ...``),
vLLM (``vllm serve MODEL ...``, ``python -m vllm.entrypoints.openai.api_server ...``),
transformers (``transformers serve [MODEL] ...``, OpenAI-compatible, port 8000 by
default); any other command with ``--port N`` is taken as an OpenAI-compatible server.
"""

from __future__ import annotations

import os
import posixpath
import re
from collections.abc import Sequence
from dataclasses import dataclass

from repro.bundle.info import Engine, Role
from repro.errors import PortNotANumber

DEFAULT_PORTS: dict[Engine, int] = {"sglang": 30000, "vllm": 8000, "openai": 8000}
MODEL_FLAGS: dict[str, Role] = {
    "--model-path": "target",
    "--model": "target",
    "--tokenizer": "target",
    "--tokenizer-path": "target",
    "--speculative-draft-model-path": "drafter",
    "--draft-model": "drafter",
}
# a Hugging Face repository id as a launch command names one: `org/name`
HUB_ID = re.compile(r"[A-Za-z0-9][\w.-]*/[A-Za-z0-9][\w.-]*")
SGLANG_MODULES = ("sglang.launch_server",)
VLLM_MODULES = ("vllm.entrypoints.openai.api_server",)


@dataclass(frozen=True)
class ModelArgument:
    """A model named on the command line: the flag (or "serve" for vLLM's positional
    model), its value, and whether it is the served model or a drafter."""

    flag: str
    value: str
    role: Role


@dataclass(frozen=True)
class ServeCommand:
    engine: Engine
    port: int
    models: tuple[ModelArgument, ...]


def _module(argv: Sequence[str]) -> str | None:
    """The module of ``python [options] -m MODULE``."""
    for index, arg in enumerate(argv[1:], start=1):
        if arg == "-m" and index + 1 < len(argv):
            return argv[index + 1]
        if not arg.startswith("-"):
            return None
    return None


def _subcommand(argv: Sequence[str], program: str) -> bool:
    return len(argv) > 1 and posixpath.basename(argv[0]) == program and argv[1] == "serve"


def _option(argv: Sequence[str], flag: str) -> str | None:
    """The value of the last ``flag V`` or ``flag=V``."""
    found = None
    for index, arg in enumerate(argv):
        if arg == flag and index + 1 < len(argv):
            found = argv[index + 1]
        elif arg.startswith(flag + "="):
            found = arg[len(flag) + 1 :]
    return found


def engine_of(argv: Sequence[str]) -> Engine | None:
    """The engine a command runs; None when it is no server this knows."""
    if not argv:
        return None
    module = _module(argv)
    if module in SGLANG_MODULES or _subcommand(argv, "sglang"):
        return "sglang"
    if module in VLLM_MODULES or _subcommand(argv, "vllm"):
        return "vllm"
    if _subcommand(argv, "transformers"):
        return "openai"
    return "openai" if _option(argv, "--port") is not None else None


def port_of(argv: Sequence[str], engine: Engine) -> int:
    """``--port N``, else the engine's default; raises PortNotANumber."""
    value = _option(argv, "--port")
    if value is None:
        return DEFAULT_PORTS[engine]
    if not value.isdigit() or not 0 < int(value) < 65536:
        raise PortNotANumber(value)
    return int(value)


def model_arguments(argv: Sequence[str]) -> tuple[ModelArgument, ...]:
    """Every model flag's value, and the positional model of ``vllm serve MODEL`` and
    ``transformers serve MODEL``."""
    found: list[ModelArgument] = []
    positional = _subcommand(argv, "vllm") or _subcommand(argv, "transformers")
    if positional and len(argv) > 2 and not argv[2].startswith("-"):
        found.append(ModelArgument("serve", argv[2], "target"))
    for index, arg in enumerate(argv):
        flag, sep, value = arg.partition("=")
        if flag not in MODEL_FLAGS:
            continue
        if not sep:
            if index + 1 >= len(argv):
                continue
            value = argv[index + 1]
        found.append(ModelArgument(flag, value, MODEL_FLAGS[flag]))
    return tuple(found)


def serve_command(argv: Sequence[str]) -> ServeCommand | None:
    """Engine, port and models of a server command; None for a command that is not one."""
    engine = engine_of(argv)
    if engine is None:
        return None
    return ServeCommand(engine, port_of(argv, engine), model_arguments(argv))


def is_hub_id(value: str) -> bool:
    """`org/name` that is no path here (not absolute, not `./...`, nothing there)."""
    return (
        HUB_ID.fullmatch(value) is not None
        and not value.startswith(".")
        and not os.path.lexists(value)
    )
