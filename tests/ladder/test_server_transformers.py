"""The server rung against a second real engine: `transformers serve` (CPU, from PyPI).

`transformers serve MODEL` is an OpenAI-compatible server that differs from vLLM where
it matters to the rung: `GET /v1/models` lists the hub cache (HTTP 500 where there is
none) instead of the served model, and a completion with a field outside the OpenAI
API (vLLM's `ignore_eos`) is refused with HTTP 422. The launch comes from a unit, as a
deployment has it, through `repro smoke --service`; the model is the tiny random-weight
Llama with a trained tokenizer of the vLLM tests. The venv (transformers[serving] 5.17.0
with the machine's torch 2.13.0+cpu) is built once and cached (tests/support/venvs.py).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.ladder.test_engine import make_model
from tests.support.ladder import free_port, group_alive
from tests.support.run import run_repro
from tests.support.venvs import VenvRecipe, cached_venv, find_python, venv_python

pytestmark = [pytest.mark.engine, pytest.mark.slow]

RECIPE = ("transformers[serving]==5.17.0", "torch==2.13.0", "requests")
UNIT = """[Unit]
Description=transformers serve

[Service]
ExecStart={venv}/bin/transformers serve {model} --host 127.0.0.1 --port {port} --device cpu
"""


@pytest.fixture(scope="module")
def tf_python() -> Path:
    return venv_python(cached_venv(VenvRecipe("transformers-serve", find_python("3.11"), RECIPE)))


def _smoke(python: Path, model: Path, tmp_path: Path) -> dict[str, Any]:
    unit = tmp_path / "tf.service"
    venv = python.parent.parent
    unit.write_text(UNIT.format(venv=venv, model=model, port=free_port()))
    argv = ["smoke", "--python", str(python), "--cpu", "--rungs", "python,torch,server"]
    argv += ["--service", str(unit), "--log-dir", str(tmp_path / "logs"), "--timeout", "300"]
    proc = run_repro(*argv, "--json", env={"HF_HUB_CACHE": str(tmp_path / "no-hub-cache")})
    report = json.loads(proc.stdout)
    assert proc.returncode == (0 if report["ok"] else 5), proc.stderr.decode()
    (server,) = [r for r in report["rungs"] if r["name"] == "server"]
    assert isinstance(server, dict)
    assert group_alive(server["facts"]["pid"]) == []
    return server


def test_transformers_serve_from_its_unit_gives_a_real_generation(
    tf_python: Path, tmp_path: Path
) -> None:
    model = make_model(tf_python, tmp_path / "models" / "tiny", head_dim=64)
    server = _smoke(tf_python, model, tmp_path)
    assert server["status"] == "pass", (server["summary"], server["output_tail"])
    facts = server["facts"]
    assert facts["argv"][1:3] == ["serve", str(model)]
    assert facts["engine"] == "openai"
    assert facts["model"] == str(model)
    assert facts["model_from"].startswith("the command line (GET /v1/models: HTTP 500")
    assert facts["tokens"] > 0 and facts["tokens_per_s"] > 0
    print(f"transformers serve on the CPU, from its unit: {server['summary']}")


def test_transformers_serve_with_a_bad_model_path_fails_with_the_log_tail(
    tf_python: Path, tmp_path: Path
) -> None:
    missing = tmp_path / "models" / "not-there"
    server = _smoke(tf_python, missing, tmp_path)
    assert server["status"] == "fail"
    tail = "\n".join(server["output_tail"])
    assert str(missing) in tail, tail
    print(f"transformers serve, bad model path: {server['summary']}")
