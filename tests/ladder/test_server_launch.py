"""The server rung launched from a unit's ExecStart=, through bundle.toml and the target's paths.

The server is tests/support/doubles/engine_server.py, a TEST DOUBLE of an OpenAI-compatible
engine (no real engine runs in these tests; the real one, vLLM CPU, is in
tests/ladder/test_engine.py). The unit is captured on a "source" workspace, the bundle's
launch is read back on a "target" at other paths, and the variables filled there.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from repro.bundle.info import BundleInfo, LaunchCommand, LaunchInfo, SourceInfo, dump_bundle_info
from repro.install.smoke import verdict
from repro.ladder import LadderSpec, LaunchSpec, RungStatus, Timeouts, run_ladder
from repro.ladder.options import SmokeOptions, spec_from_options
from repro.ladder.spec import spec_from_bundle_dir
from repro.snapshot.workspace import unitcapture
from tests.support.ladder import FAKE_SERVER, free_port, group_alive, read_pids

FAST = Timeouts(server_ready=20.0, probe=1.0, generation=3.0, grace=3.0)


def _workspace(root: Path) -> Path:
    """A workspace with its own venv (no pip: only its interpreter is run) and the
    test double's script in it."""
    root.mkdir(parents=True)
    subprocess.run(
        [sys.executable, "-m", "venv", "--without-pip", str(root / "venv")],
        check=True,
        timeout=120,
    )
    shutil.copy(FAKE_SERVER, root / "serve.py")
    return root


def _bundle(directory: Path, *commands: LaunchCommand) -> Path:
    info = BundleInfo(
        name="units",
        version="1",
        created="2026-01-31T12:00:00Z",
        tool_version="0",
        source=SourceInfo("3.11.7", "cpython", "linux-x86_64", "2.36"),
        launch=LaunchInfo(commands),
    )
    directory.mkdir(parents=True)
    (directory / "bundle.toml").write_bytes(dump_bundle_info(info))
    return directory


def _captured_launch(source: Path, port: int) -> LaunchCommand:
    unit = source / "fake-engine.service"
    unit.write_text(
        "[Unit]\nDescription=OpenAI-compatible test double\n\n[Service]\n"
        f"WorkingDirectory={source}\n"
        'Environment="FAKE_ENGINE_TEXT=Bonjour from the unit" HF_TOKEN=hf_notForTheLaunch\n'
        f"ExecStart=-{source}/venv/bin/python {source}/serve.py \\\n"
        f"    --port {port} --mode ready --pid-file pids.json\n"
        "Restart=on-failure\n\n[Install]\nWantedBy=multi-user.target\n"
    )
    mapping = unitcapture.PathMap.build(venv=source / "venv", home=source)
    captured = unitcapture.capture_unit(unit, mapping, verify=False)
    assert captured.launch is not None
    return captured.launch


def test_the_server_rung_runs_a_units_launch_at_the_targets_paths(tmp_path: Path) -> None:
    port = free_port()
    launch = _captured_launch(_workspace(tmp_path / "source"), port)
    assert launch.argv == (
        "${REPRO_VENV}/bin/python",
        "${REPRO_HOME}/serve.py",
        "--port",
        str(port),
        "--mode",
        "ready",
        "--pid-file",
        "pids.json",
    )
    assert launch.env == {"FAKE_ENGINE_TEXT": "Bonjour from the unit"}
    assert (launch.engine, launch.cwd) == ("openai", "${REPRO_HOME}")
    bundle = _bundle(tmp_path / "bundle", launch)
    shutil.rmtree(tmp_path / "source")  # the target must not lean on the source's paths
    target = _workspace(tmp_path / "target")
    variables = {"REPRO_VENV": str(target / "venv"), "REPRO_HOME": str(target)}

    spec = spec_from_bundle_dir(
        bundle, Path(sys.executable), rungs=("server",), timeouts=FAST, variables=variables
    )
    assert spec.launch is not None
    assert spec.launch.argv is not None and spec.launch.argv[:2] == (
        f"{target}/venv/bin/python",
        f"{target}/serve.py",
    )
    assert spec.launch.cwd == target
    report = run_ladder(spec)
    server = report.result("server")
    assert server.status is RungStatus.PASS, server
    assert server.facts["text"] == "Bonjour from the unit"  # the unit's Environment=
    assert server.facts["unit"] == "fake-engine.service"  # where the launch came from
    assert server.facts["launch"] == "fake-engine"
    pids = read_pids(target / "pids.json")  # written in the unit's WorkingDirectory=
    assert group_alive(pids["pgid"]) == []


def test_repro_smoke_fills_the_variables_from_its_options(tmp_path: Path) -> None:
    port = free_port()
    launch = _captured_launch(_workspace(tmp_path / "source"), port)
    target = _workspace(tmp_path / "target")
    bundle = _bundle(target / ".repro" / "bundle", launch)
    # --home defaults to TARGET for the bundle unpack keeps in TARGET/.repro/bundle
    options = SmokeOptions(venv=target / "venv", bundle=bundle, rungs=("server",))
    spec = spec_from_options(options)
    assert spec.launch is not None and spec.launch.argv is not None
    assert spec.launch.argv[:2] == (f"{target}/venv/bin/python", f"{target}/serve.py")
    elsewhere = _bundle(tmp_path / "elsewhere", launch)
    spec = spec_from_options(
        SmokeOptions(venv=target / "venv", bundle=elsewhere, home=tmp_path / "home")
    )
    assert spec.launch is not None and spec.launch.cwd == tmp_path / "home"


def _spec(launch: LaunchSpec, *, cpu: bool = False) -> LadderSpec:
    return LadderSpec(
        python=Path(sys.executable), cpu=cpu, rungs=("server",), launch=launch, timeouts=FAST
    )


def test_sglang_is_not_launched_with_cpu() -> None:
    launch = LaunchSpec("sglang-dflash", 30000, "sglang", argv=("/nonexistent/python",))
    server = run_ladder(_spec(launch, cpu=True)).result("server")
    assert server.status is RungStatus.SKIP
    assert server.summary == "sglang-dflash: SGLang needs a GPU; not launched with --cpu"


def test_a_variable_left_unfilled_fails_before_launching(tmp_path: Path) -> None:
    launch = LaunchSpec(
        "vllm", 8000, "vllm", argv=("vllm", "serve", "${REPRO_MODELS}/Qwen3-8B"), cwd=tmp_path
    )
    server = run_ladder(_spec(launch)).result("server")
    assert server.status is RungStatus.FAIL
    assert "names ${REPRO_MODELS}, which nothing here sets" in server.summary
    assert server.hint is not None and "--models DIR" in server.hint


def test_a_missing_working_directory_fails_before_launching(tmp_path: Path) -> None:
    launch = LaunchSpec("x", free_port(), "openai", argv=(sys.executable,), cwd=tmp_path / "no")
    server = run_ladder(_spec(launch)).result("server")
    assert server.status is RungStatus.FAIL
    assert f"working directory {tmp_path / 'no'} does not exist" in server.summary


@pytest.mark.parametrize("cpu", [False, True])
def test_the_verdict_names_what_did_not_run(cpu: bool) -> None:
    spec = LadderSpec(python=Path(sys.executable), cpu=cpu, rungs=("python", "nccl", "server"))
    report = run_ladder(spec)
    assert report.ok
    text = verdict(report.results)
    assert text.startswith("python passed; ")
    assert "server skipped: no launch command: the bundle has none" in text
    assert text.endswith("not run: torch, triton, kernels, engine")
    assert "every rung passed" not in text
