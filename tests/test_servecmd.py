"""Tests of repro.servecmd: the engine, port and models of a server command line."""

from __future__ import annotations

import pytest

from repro.errors import PortNotANumber
from repro.servecmd import DEFAULT_PORTS, ModelArgument, ServeCommand, port_of, serve_command

# tests/units/test_command.py covers the common launchers; these are the edges.


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (
            ("/v/bin/transformers", "serve", "Qwen/Qwen3-0.6B"),
            ServeCommand("openai", 8000, (ModelArgument("serve", "Qwen/Qwen3-0.6B", "target"),)),
        ),
        (("transformers", "serve", "--port", "9000"), ServeCommand("openai", 9000, ())),
        (
            (
                "python",
                "-m",
                "sglang.launch_server",
                "--port",
                "1",
                "--port=30002",
                "--model",
                "/m",
            ),
            ServeCommand("sglang", 30002, (ModelArgument("--model", "/m", "target"),)),
        ),
        (("python", "-X", "dev", "-m", "vllm.entrypoints.openai.api_server"), None),
        (("python", "-m"), None),
        (("/opt/sglang", "launch"), None),
        (
            ("vllm", "serve", "--draft-model=/d"),
            ServeCommand("vllm", 8000, (ModelArgument("--draft-model", "/d", "drafter"),)),
        ),
    ],
)
def test_serve_command_edges(argv: tuple[str, ...], expected: ServeCommand | None) -> None:
    assert serve_command(argv) == expected


@pytest.mark.parametrize(("value", "port"), [("1", 1), ("65535", 65535), ("08080", 8080)])
def test_port_bounds(value: str, port: int) -> None:
    assert port_of(("srv", f"--port={value}"), "openai") == port


@pytest.mark.parametrize("value", ["65536", "-1", "", " 80", "0x50"])
def test_ports_that_are_refused_carry_the_value(value: str) -> None:
    with pytest.raises(PortNotANumber) as caught:
        port_of(("srv", "--port", value), "sglang")
    assert caught.value.args == (value,)


def test_a_port_refused_by_serve_command_too() -> None:
    with pytest.raises(PortNotANumber):
        serve_command(("vllm", "serve", "/m", "--port", "http"))


def test_default_ports() -> None:
    assert DEFAULT_PORTS == {"sglang": 30000, "vllm": 8000, "openai": 8000}
    assert port_of(("vllm", "serve", "/m", "--port"), "vllm") == 8000  # a flag with no value
