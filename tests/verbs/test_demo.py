"""`repro demo` end to end through the CLI: every step asserted, not only the exit code,
and the run's work directory removed unless --keep."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from repro.verbs.demo import workspace_dir
from tests.support.run import run_repro


@pytest.mark.slow
def test_demo_round_trip_kept(tmp_path: Path) -> None:
    workdir = tmp_path / "run"
    result = run_repro("demo", "--json", "--keep", "--workdir", str(workdir), timeout=1800)
    assert result.returncode == 0, result.stderr.decode()[-3000:]
    report = json.loads(result.stdout)
    steps = {step["name"]: step for step in report["steps"]}
    assert list(steps) == ["workspace", "pack", "check", "tamper", "unpack"]
    assert all(step["ok"] for step in steps.values())
    assert "2 patched files found against RECORD" in steps["pack"]["proved"]
    assert "reports it mismatched" in steps["tamper"]["proved"]
    assert "smoke rungs passed: python" in steps["unpack"]["proved"]
    # --keep: the work directory is there, says so, and holds the bundle and the target.
    assert report["kept"] is True
    assert report["workdir"] == str(workdir)
    assert f"work directory kept: {workdir}".encode() in result.stderr
    bundle = Path(report["bundle"])
    target = Path(report["target"])
    assert bundle.is_file() and bundle.name == "dflash-demo-1.tar"
    assert bundle.is_relative_to(workdir) and target.is_relative_to(workdir)
    assert (workdir / "tampered.tar").is_file()
    # The rebuild is relocatable: another path than the workspace, with the patch applied.
    site = next(target.glob("**/lib/python3*/site-packages"))
    assert "normalize_host" in (site / "idna" / "__init__.py").read_text()
    assert (site / "idna" / "serving_policy.py").is_file()
    unit = (target / "services" / "dflash-demo.service").read_text()
    assert f"ExecStart={target}" in unit
    env_file = next((target / "services").glob("dflash-demo.service.d/*"))
    assert "hf_demo_not_a_real_token" not in env_file.read_text()
    assert (target / ".repro" / "unpack-report.json").is_file()
    # The stdout of the demo is one JSON document; the steps went to stderr.
    assert b"ok   pack" in result.stderr


@pytest.mark.slow
def test_demo_leaves_no_work_directory_behind(tmp_path: Path) -> None:
    temp = tmp_path / "tmp"
    temp.mkdir()
    result = run_repro("demo", "--json", timeout=1800, env={"TMPDIR": str(temp)})
    assert result.returncode == 0, result.stderr.decode()[-3000:]
    report = json.loads(result.stdout)
    assert report["ok"] is True and report["kept"] is False
    workdir = Path(report["workdir"])
    assert workdir.parent == temp and workdir.name.startswith("repro-demo-")
    assert not workdir.exists()
    assert not Path(report["bundle"]).exists()
    assert not list(temp.glob("repro-demo-*"))
    assert f"work directory removed: {workdir}".encode() in result.stderr
    # The cached example workspace is a cache, not the work directory: it stays.
    proved = next(s["proved"] for s in report["steps"] if s["name"] == "workspace")
    cached = Path(proved.removeprefix("example workspace at ").split(":")[0])
    assert (cached / ".demo-ready").is_file()


def broken_cache(root: Path) -> Path:
    """A demo cache whose example workspace is marked ready but has no venv (a cache
    half removed by hand): the pack step fails on it."""
    workspace = workspace_dir(root / "repro" / "demo", with_torch=False)
    workspace.mkdir(parents=True)
    (workspace / ".demo-ready").write_text(json.dumps({"torch": False}))
    return root


@pytest.mark.parametrize("keep", [False, True], ids=["removed", "kept"])
def test_a_failed_demo_removes_its_work_directory_unless_kept(tmp_path: Path, keep: bool) -> None:
    cache = broken_cache(tmp_path / "cache")
    workdir = tmp_path / "run"
    args = ["demo", "--no-torch", "--json", "--workdir", str(workdir)]
    result = run_repro(
        *args,
        *(["--keep"] if keep else []),
        env={"XDG_CACHE_HOME": str(cache), "VIRTUAL_ENV": None},
    )
    err = result.stderr.decode()
    assert result.returncode == 1, err
    report = json.loads(result.stdout)
    failed = [step for step in report["steps"] if not step["ok"]]
    assert [step["name"] for step in failed] == ["pack"]
    assert "no environment found" in failed[0]["proved"]
    assert report["kept"] is keep
    assert workdir.exists() is keep
    if keep:
        assert f"work directory kept: {workdir}" in err
    else:
        assert f"work directory removed: {workdir} (run again with --keep" in err


def test_paths_with_brackets_are_printed_intact(tmp_path: Path) -> None:
    """`[b]` in a path is text: rich would read it as bold and print the path without it."""
    cache = broken_cache(tmp_path / "c[b]ache")
    workdir = tmp_path / "run[b]dir"
    result = run_repro(
        "demo", "--no-torch", "--keep", "--workdir", str(workdir),
        env={"XDG_CACHE_HOME": str(cache), "VIRTUAL_ENV": None, "COLUMNS": "500"},
    )  # fmt: skip
    err = result.stderr.decode()
    assert result.returncode == 1, err
    assert f"work directory kept: {workdir}\n" in err
    (failed,) = [line for line in err.splitlines() if line.startswith("FAIL pack")]
    assert f"{cache}/repro/demo" in failed  # what the step proved names the workspace


def test_a_work_directory_that_is_not_empty_is_refused(tmp_path: Path) -> None:
    (tmp_path / "mine.txt").write_text("not the demo's\n")
    result = run_repro("demo", "--workdir", str(tmp_path))
    assert result.returncode == 2
    assert b"not empty; the demo removes what its run writes there" in result.stderr
    assert (tmp_path / "mine.txt").read_text() == "not the demo's\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["mine.txt"]
