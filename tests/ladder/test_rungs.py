"""The python, torch, triton and engine rungs in real venvs (CPU torch from the machine's disk)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from repro.ladder import LadderSpec, RungStatus, run_ladder
from tests.support.run import run_repro

pytestmark = pytest.mark.slow


def test_python_rung_reports_version_and_mismatch() -> None:
    version = ".".join(str(v) for v in sys.version_info[:3])
    same = run_ladder(
        LadderSpec(python=Path(sys.executable), expected_python=version, rungs=("python",))
    )
    assert same.result("python").status is RungStatus.PASS
    assert same.result("python").facts["version"] == version
    micro = run_ladder(
        LadderSpec(
            python=Path(sys.executable), expected_python=version[:-1] + "99", rungs=("python",)
        )
    )
    assert micro.result("python").status is RungStatus.PASS
    assert micro.result("python").warnings
    other = run_ladder(
        LadderSpec(python=Path(sys.executable), expected_python="2.7.18", rungs=("python",))
    )
    assert other.result("python").status is RungStatus.FAIL
    assert "packed with 2.7.18" in other.result("python").summary


def test_missing_interpreter_fails_the_python_rung(tmp_path: Path) -> None:
    report = run_ladder(LadderSpec(python=tmp_path / "bin" / "python"))
    assert report.result("python").status is RungStatus.FAIL
    assert "does not exist" in report.result("python").summary
    assert all(r.status is RungStatus.SKIP for r in report.results[1:])


def test_torch_rung_on_cpu_passes(torch_cpu_python: Path) -> None:
    result = run_repro(
        "smoke", "--python", str(torch_cpu_python), "--cpu", "--rungs", "python,torch", "--json"
    )
    assert result.returncode == 0, result.stderr.decode()
    rung = json.loads(result.stdout)["rungs"][1]
    assert rung["status"] == "pass"
    facts = rung["facts"]
    assert facts["torch_version"] == "2.13.0+cpu"
    (matmul,) = facts["matmul"]
    assert matmul["dtype"] == "float32"
    assert 0 <= matmul["rel_err"] <= 1e-4
    assert matmul["tflops"] > 0


def test_torch_rung_without_cpu_flag_fails_on_a_machine_without_gpu(
    torch_cpu_python: Path,
) -> None:
    result = run_repro("smoke", "--python", str(torch_cpu_python), "--json")
    assert result.returncode == 5
    report = json.loads(result.stdout)
    torch_rung = report["rungs"][1]
    assert torch_rung["status"] == "fail"
    assert torch_rung["summary"] == "CUDA is not available to torch"
    assert "CPU-only build" in torch_rung["hint"]
    assert "--cpu" in torch_rung["hint"]
    assert [r["status"] for r in report["rungs"][2:]] == ["skip"] * 5


def test_triton_rung_skips_without_triton(torch_cpu_python: Path) -> None:
    report = run_ladder(LadderSpec(python=torch_cpu_python, cpu=True, rungs=("triton",)))
    result = report.result("triton")
    assert result.status is RungStatus.SKIP
    assert result.summary == "triton is not installed in this environment"


def test_triton_rung_runs_a_kernel_in_the_interpreter_on_cpu(torch_triton_python: Path) -> None:
    report = run_ladder(LadderSpec(python=torch_triton_python, cpu=True, rungs=("triton",)))
    result = report.result("triton")
    assert result.status is RungStatus.PASS, result
    assert result.facts["launcher_build"] == "ok"
    assert result.facts["kernel"]["max_abs_err"] == 0.0


def test_triton_rung_names_a_missing_python_h(triton_no_headers_python: Path) -> None:
    report = run_ladder(LadderSpec(python=triton_no_headers_python, cpu=True, rungs=("triton",)))
    result = report.result("triton")
    assert result.status is RungStatus.FAIL
    assert result.summary.startswith("Python.h is missing")
    assert result.facts["python_h_present"] is False
    assert "Python.h: No such file or directory" in "\n".join(result.output_tail)
    assert result.hint is not None and "-dev" in result.hint


def test_torch_rung_skips_where_torch_is_not_installed() -> None:
    # The tool's own venv never holds torch: a real environment without it.
    import sys

    from repro.ladder import LadderSpec, RungStatus, run_ladder

    report = run_ladder(LadderSpec(python=Path(sys.executable), rungs=("torch", "nccl")))
    torch = report.result("torch")
    assert torch.status is RungStatus.SKIP
    assert "torch is not installed" in torch.summary
    assert report.result("nccl").status is RungStatus.SKIP
    assert not report.ok  # every selected rung skipped: nothing was checked, no pass
