"""repro.toml's `ladder.rungs`, through pack, `repro smoke --bundle` and `repro unpack`.

One list of names (RUNG_NAMES): pack refuses others, the bundle records the selection,
smoke and unpack run exactly it, and an empty selection is the whole ladder. The
workspace is a real Python 3.11 venv holding six from PyPI.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from repro.ladder import RUNG_NAMES, LadderReport, LadderSpec, RungStatus, run_ladder
from tests.snapshot.conftest import PYTHON_311, Venv, make_venv, pip
from tests.support.run import run, run_repro

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def venv(tmp_path_factory: pytest.TempPathFactory) -> Venv:
    venv = make_venv(PYTHON_311, tmp_path_factory.mktemp("ladder-ws") / "ws" / ".venv")
    pip(venv, "install", "-q", "six")
    return venv


def _pack(venv: Venv, out: Path, rungs: str) -> subprocess.CompletedProcess[bytes]:
    source = venv.root.parent
    (source / "repro.toml").write_text(f"[ladder]\nrungs = {rungs}\n")
    return run_repro(
        "pack", str(source), "-o", f"{out}/", "--version", "1", "--json",
        env={"VIRTUAL_ENV": None},
    )  # fmt: skip


def _packed(venv: Venv, out: Path, rungs: str) -> Path:
    proc = _pack(venv, out, rungs)
    assert proc.returncode == 0, proc.stderr.decode()
    return Path(json.loads(proc.stdout)["path"])


def _smoke_names(venv: Venv, archive: Path, into: Path) -> list[str]:
    """Extract with GNU tar; the rungs `repro smoke --bundle DIR --venv V --json` ran."""
    into.mkdir()
    run(["tar", "-xf", str(archive), "-C", str(into)])
    (bundle,) = into.iterdir()
    proc = run_repro(
        "smoke", "--bundle", str(bundle), "--venv", str(venv.root), "--cpu", "--json",
        "--log-dir", str(into),
    )  # fmt: skip
    report = json.loads(proc.stdout)
    assert proc.returncode == (0 if report["ok"] else 5), proc.stderr.decode()
    rungs = report["rungs"]
    assert rungs[0]["name"] == "python" and rungs[0]["status"] == "pass", rungs[0]
    return [r["name"] for r in rungs]


def test_unknown_rung_names_are_refused_at_pack(venv: Venv, tmp_path: Path) -> None:
    proc = _pack(venv, tmp_path, '["import", "cuda", "server", "generate"]')
    assert proc.returncode == 2
    err = proc.stderr.decode()
    assert f"{venv.root.parent / 'repro.toml'}: ladder.rungs: unknown rung(s)" in err, err
    assert "'import', 'cuda', 'generate'" in err
    assert "the rungs are python, torch, triton, kernels, nccl, engine, server" in err
    assert not list(tmp_path.glob("*.tar"))


def test_smoke_bundle_runs_exactly_the_selection(venv: Venv, tmp_path: Path) -> None:
    archive = _packed(venv, tmp_path, '["engine", "python"]')
    assert _smoke_names(venv, archive, tmp_path / "x") == ["python", "engine"]


def test_an_empty_selection_runs_the_whole_ladder(venv: Venv, tmp_path: Path) -> None:
    archive = _packed(venv, tmp_path, "[]")
    assert _smoke_names(venv, archive, tmp_path / "x") == list(RUNG_NAMES)


def test_unpack_runs_the_bundles_selection(venv: Venv, tmp_path: Path) -> None:
    archive = _packed(venv, tmp_path, '["python", "engine"]')
    target = tmp_path / "target"
    proc = run_repro("unpack", str(archive), "--target", str(target), "--cpu", "--json")
    # python passes; no engine is installed in this venv, so the engine rung skips
    assert proc.returncode == 0, proc.stderr.decode()
    report = json.loads(proc.stdout)
    rungs = report["smoke"]["ladder"]["rungs"]
    assert [(r["name"], r["status"]) for r in rungs] == [("python", "pass"), ("engine", "skip")]
    # --no-exec: no rung at all (each starts the rebuilt interpreter).
    target = tmp_path / "target-no-exec"
    proc = run_repro(
        "unpack", str(archive), "--target", str(target), "--cpu", "--json", "--no-exec"
    )
    assert proc.returncode == 0, proc.stderr.decode()
    report = json.loads(proc.stdout)
    assert report["smoke"] is None
    assert [s["status"] for s in report["steps"] if s["name"] == "smoke"] == ["skipped"]


def test_a_ladder_that_ran_nothing_is_not_ok(venv: Venv) -> None:
    assert LadderReport(venv.python, ()).ok is False
    report = run_ladder(LadderSpec(python=venv.python, cpu=True, rungs=()))
    assert [r.name for r in report.results] == list(RUNG_NAMES)
    assert report.result("python").status is RungStatus.PASS


def test_a_selection_whose_every_rung_is_skipped_is_not_a_pass(venv: Venv) -> None:
    """`--rungs nccl --cpu`: the one rung skips (no GPU), nothing was checked; the report
    is not ok and smoke exits 5, saying so, never "passed" with nothing run."""
    as_json = run_repro("smoke", "--python", str(venv.root), "--rungs", "nccl", "--cpu", "--json")
    assert as_json.returncode == 5, as_json.stderr.decode()
    report = json.loads(as_json.stdout)
    assert report["ok"] is False
    assert [(r["name"], r["status"]) for r in report["rungs"]] == [("nccl", "skip")]
    table = run_repro("smoke", "--python", str(venv.root), "--rungs", "nccl", "--cpu")
    assert table.returncode == 5
    assert "nccl" in table.stdout.decode() and "skip" in table.stdout.decode()
    assert "nothing was checked: every selected rung was skipped" in table.stderr.decode()
    # one rung that runs is enough
    python_only = run_repro("smoke", "--python", str(venv.root), "--rungs", "python,nccl", "--cpu")
    assert python_only.returncode == 0, python_only.stderr.decode()
