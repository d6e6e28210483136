"""The benchmark's environments: a venv of one's own adopted (`--venv`), and the synthetic
N-fold venv of the scaling group, each checked with the real `repro scan` and pip."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from bench.envs import PATCH_LINE, Workspace, adopt_workspace
from bench.synthetic import scaled_workspace
from repro.errors import ReproError
from tests.snapshot.conftest import PYTHON_311, make_venv, pip
from tests.support.run import run, run_repro

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def workspace(tmp_path_factory: pytest.TempPathFactory) -> Workspace:
    root = tmp_path_factory.mktemp("bench-ws")
    venv = make_venv(PYTHON_311, root / "venv")
    pip(venv, "install", "-q", "idna==3.10", "six==1.16.0")
    return Workspace("test", root, ("idna==3.10", "six==1.16.0"))


def _scan(venv: Path) -> dict[str, Any]:
    done = run_repro("scan", "--venv", str(venv), "--json")
    assert done.returncode in (0, 1), done.stderr.decode()
    result: dict[str, Any] = json.loads(done.stdout)
    return result


def _names(python: Path) -> list[str]:
    listed = run([str(python), "-m", "pip", "list", "--format=json", "--disable-pip-version-check"])
    return sorted(item["name"] for item in json.loads(listed))


def test_scaled_workspace_installs_every_distribution_again(
    workspace: Workspace, tmp_path: Path
) -> None:
    scaled = scaled_workspace(workspace, tmp_path / "x3", 3)
    original = _names(workspace.python)
    assert _names(scaled.python) == sorted(
        [*original, *(f"{name}-copy{k}" for name in original for k in (1, 2))]
    )
    assert _names(workspace.python) == original  # the source is only read
    # every copied file is a file of its own (a hard link would share the page cache)
    site = Path(
        run([str(scaled.python), "-c", "import idna, os; print(idna.__file__)"]).strip()
    ).parent
    first, copy = site / "core.py", site.parent / "idna_copy2" / "core.py"
    assert first.read_bytes() == copy.read_bytes()
    assert os.stat(first).st_ino != os.stat(copy).st_ino and os.stat(copy).st_nlink == 1
    # RECORD of each copy lists its new paths with the digests of the bytes: a clean scan
    one, three = _scan(workspace.venv), _scan(scaled.venv)
    assert three["clean"] is True and three["patched"] == [] and three["unreadable"] == []
    assert three["dists_scanned"] == sorted(
        [*one["dists_scanned"], *(f"{n}-copy{k}" for n in one["dists_scanned"] for k in (1, 2))]
    )
    assert 2.5 * one["files_checked"] < three["files_checked"]
    # cached: a second call finds it built and changes nothing
    marker = scaled.root / ".bench-ready"
    stamp = marker.stat().st_mtime_ns
    assert scaled_workspace(workspace, tmp_path / "x3", 3) == scaled
    assert marker.stat().st_mtime_ns == stamp


def test_adopted_venv_is_copied_then_patched(workspace: Workspace, tmp_path: Path) -> None:
    source = workspace.venv
    site = Path(run([str(workspace.python), "-c", "import idna, os; print(idna.__file__)"]).strip())
    before = site.read_bytes()
    adopted = adopt_workspace(source, tmp_path / "cache")
    assert site.read_bytes() == before  # the venv given is only read
    copied = adopted.venv / site.relative_to(source)
    assert copied.read_text().endswith(PATCH_LINE)
    assert (copied.parent / "serving_policy.py").is_file()
    assert (adopted.root / "services" / "bench-serve.service").is_file()
    found = _scan(adopted.venv)
    patched = {(item["kind"], item["path"]) for item in found["patched"]}
    assert patched == {("modified", "idna/__init__.py"), ("added", "idna/serving_policy.py")}
    assert adopt_workspace(source, tmp_path / "cache") == adopted


def test_adopting_what_is_no_venv_names_it(tmp_path: Path) -> None:
    with pytest.raises(ReproError, match=rf"{tmp_path}: not a virtual environment"):
        adopt_workspace(tmp_path, tmp_path / "cache")


def test_harness_measures_a_venv_of_ones_own(workspace: Workspace, tmp_path: Path) -> None:
    """`python -m bench --venv PATH` end to end: check and scan of a copy of the venv, the
    table printed last and written beside the results file; the venv given is unchanged."""
    before = _scan(workspace.venv)
    results = tmp_path / "results"
    done = subprocess.run(
        [sys.executable, "-m", "bench", "--venv", str(workspace.venv), "--only", "check",
         "--only", "scan", "--runs", "1", "--warmup", "0", "--cache", str(tmp_path / "cache"),
         "--results", str(results), "--machine-name", "testbox"],
        cwd=ROOT, capture_output=True, text=True, timeout=1800, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    (json_path,) = results.glob("*-testbox.json")
    document = json.loads(json_path.read_text())
    measured = document["sizes"]["venv"]
    assert measured["facts"]["packages"] == [f"the venv at {workspace.venv.resolve()}"]
    assert set(measured["groups"]) == {"check", "scan"}
    names = [item["name"] for item in measured["groups"]["scan"]["contenders"]]
    assert "repro scan" in names and "repro pack --wheels none --rehash" in names
    assert measured["rss_meter"]["meter"]
    assert done.stdout.strip() == json_path.with_suffix(".md").read_text().strip()
    assert _scan(workspace.venv) == before


def test_harness_refuses_venv_and_size_together(workspace: Workspace) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "bench", "--venv", str(workspace.venv), "--size", "full"],
        cwd=ROOT, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 2 and "--venv and --size: give one" in done.stderr
