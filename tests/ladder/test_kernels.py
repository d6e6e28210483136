"""The kernels rung: each kernel source's check command, run for real in a real venv."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import pytest

from repro.bundle import layout
from repro.bundle.kernels import KernelAudit, KernelSource, dump_kernels
from repro.ladder import LadderSpec, RungStatus, Timeouts, run_ladder
from repro.ladder.spec import spec_from_bundle_dir
from tests.ladder.test_spec import HEADER, write_bundle
from tests.support.ladder import alive, read_pids
from tests.support.run import run_repro
from tests.support.venvs import VenvRecipe, cached_venv, find_python, venv_python

# the check a kernel package names: calls its op and compares (here: where it runs)
CHECK_OP = """\
import os, sys
venv = os.environ["EXPECTED_VENV"]
assert sys.prefix == venv, (sys.prefix, venv)
assert os.environ["PATH"].split(os.pathsep)[0] == os.path.join(venv, "bin")
assert os.environ.get("VIRTUAL_ENV") == venv
print("add_one ok in", os.getcwd())
"""

# starts a child in its group, writes both pids, then hangs
HANGS = """\
import json, subprocess, sys, time
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
open("pids.json", "w").write(json.dumps({"check": __import__("os").getpid(), "child": child.pid}))
time.sleep(120)
"""


@pytest.fixture(scope="module")
def target_python() -> Path:
    """A real venv, empty: the checks run with its interpreter."""
    version = f"{sys.version_info.major}.{sys.version_info.minor}"
    return venv_python(cached_venv(VenvRecipe("kernels-rung", find_python(version), ())))


def source(name: str, check: tuple[str, ...]) -> KernelSource:
    return KernelSource(name, "0.1.0", "tree", f"/src/{name}", 3, 1200, check=check)


def bundle_with(root: Path, *sources: KernelSource) -> Path:
    bundle = write_bundle(root, HEADER, None)
    toml = layout.at(bundle, layout.KERNELS_TOML)
    toml.parent.mkdir(parents=True, exist_ok=True)
    toml.write_bytes(dump_kernels(KernelAudit(sources=sources)))
    return bundle


def spec_for(bundle: Path, python: Path, home: Path, **timeouts: float) -> LadderSpec:
    return spec_from_bundle_dir(
        bundle,
        python,
        rungs=("kernels",),
        timeouts=Timeouts(**timeouts) if timeouts else None,
        variables={"REPRO_HOME": str(home)},
    )


def test_a_check_that_exits_0_passes_in_the_workspace_with_the_venv_first_on_path(
    tmp_path: Path, target_python: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    home = tmp_path / "srv"
    home.mkdir()
    (home / "check_op.py").write_text(CHECK_OP)
    monkeypatch.setenv("EXPECTED_VENV", str(target_python.parent.parent))
    bundle = bundle_with(
        tmp_path / "b",
        source("reprokernel", ("{python}", "check_op.py")),
        source("other", ()),
    )
    spec = spec_for(bundle, target_python, home)
    assert spec.home == home
    assert [c.dist for c in spec.kernels] == ["other", "reprokernel"]

    result = run_ladder(spec).result("kernels")

    assert result.status is RungStatus.PASS, (result.summary, result.output_tail)
    assert result.summary == "1 kernel check(s) passed: reprokernel"
    assert result.warnings == ("other: no check command ([kernels.other] check)",)
    (check,) = result.facts["checks"]
    assert check["argv"] == [str(target_python), "check_op.py"]
    assert (check["returncode"], check["passed"], check["timed_out"]) == (0, True, False)
    assert result.facts["cwd"] == str(home)


def test_a_check_that_exits_1_fails_naming_the_distribution_and_its_output(
    tmp_path: Path, target_python: Path
) -> None:
    wrong = "import sys; print('add_one(x) differs from x + 1 by 1.0'); sys.exit(1)"
    bundle = bundle_with(tmp_path / "b", source("reprokernel", ("{python}", "-c", wrong)))

    report = run_ladder(spec_for(bundle, target_python, tmp_path))
    result = report.result("kernels")

    assert not report.ok
    assert result.status is RungStatus.FAIL
    assert result.summary == (
        "reprokernel: its check exited 1: add_one(x) differs from x + 1 by 1.0"
    )
    assert result.output_tail == ("[reprokernel] add_one(x) differs from x + 1 by 1.0",)
    assert result.hint is not None and "build.log" in result.hint
    assert result.facts["checks"][0]["returncode"] == 1


def test_every_check_runs_and_each_failure_is_named(tmp_path: Path, target_python: Path) -> None:
    bundle = bundle_with(
        tmp_path / "b",
        source("a-kernel", ("{python}", "-c", "raise SystemExit(3)")),
        source("b-kernel", ("{python}", "-c", "pass")),
        source("c-kernel", ("no-such-program-here", "--check")),
    )

    result = run_ladder(spec_for(bundle, target_python, tmp_path)).result("kernels")

    assert result.status is RungStatus.FAIL
    assert [c["passed"] for c in result.facts["checks"]] == [False, True, False]
    assert result.summary.startswith("a-kernel: its check exited 3: (no output); c-kernel: ")
    assert "cannot run no-such-program-here" in result.summary


def test_a_check_past_its_timeout_is_killed_with_its_whole_group(
    tmp_path: Path, target_python: Path
) -> None:
    (tmp_path / "hang.py").write_text(HANGS)
    bundle = bundle_with(tmp_path / "b", source("reprokernel", ("{python}", "hang.py")))
    started = time.monotonic()

    result = run_ladder(spec_for(bundle, target_python, tmp_path, kernel_check=2)).result("kernels")

    assert time.monotonic() - started < 30
    assert result.status is RungStatus.FAIL
    assert result.summary == "reprokernel: its check timed out after 2 s"
    assert result.facts["checks"][0]["timed_out"] is True
    pids = read_pids(tmp_path / "pids.json")
    deadline = time.monotonic() + 5
    while any(alive(pid) for pid in pids.values()) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not any(alive(pid) for pid in pids.values())


def test_nothing_to_check_skips_with_the_reason(tmp_path: Path, target_python: Path) -> None:
    without = write_bundle(tmp_path / "none", HEADER, None)
    unchecked = bundle_with(tmp_path / "unchecked", source("reprokernel", ()))
    checked = bundle_with(tmp_path / "checked", source("reprokernel", ("{python}", "-c", "")))

    def rung(bundle: Path, cpu: bool = False) -> tuple[RungStatus, str]:
        spec = spec_from_bundle_dir(bundle, target_python, cpu=cpu, rungs=("kernels",))
        result = run_ladder(spec).result("kernels")
        return result.status, result.summary

    assert rung(without) == (
        RungStatus.SKIP,
        "no kernel source in the bundle (env/kernels.toml)",
    )
    assert rung(unchecked) == (
        RungStatus.SKIP,
        "no check command for reprokernel ([kernels.<dist>] check)",
    )
    assert rung(checked, cpu=True) == (RungStatus.SKIP, "--cpu: the kernel checks need a GPU")


def test_a_workspace_directory_that_is_gone_fails(tmp_path: Path, target_python: Path) -> None:
    bundle = bundle_with(tmp_path / "b", source("reprokernel", ("{python}", "-c", "")))
    result = run_ladder(spec_for(bundle, target_python, tmp_path / "gone")).result("kernels")
    assert result.status is RungStatus.FAIL
    assert result.summary == f"{tmp_path / 'gone'}: the checks' directory does not exist"


def test_repro_smoke_runs_the_rung_from_a_bundle_in_the_home_given(
    tmp_path: Path, target_python: Path
) -> None:
    home = tmp_path / "srv"
    home.mkdir()
    (home / "check_op.py").write_text("import pathlib; pathlib.Path('ran').write_text('yes')\n")
    bundle = bundle_with(tmp_path / "b", source("reprokernel", ("{python}", "check_op.py")))

    result = run_repro(
        "smoke", "--bundle", str(bundle), "--python", str(target_python), "--home", str(home),
        "--rungs", "kernels", "--json",
    )  # fmt: skip

    assert result.returncode == 0, result.stderr.decode()
    (rung,) = json.loads(result.stdout)["rungs"]
    assert (rung["name"], rung["status"]) == ("kernels", "pass")
    assert (home / "ran").read_text() == "yes"
