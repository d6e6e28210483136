"""Tests of repro.snapshot.scan.run: `repro scan` as one call, scan_target(ScanRequest)."""

from __future__ import annotations

import json
from pathlib import Path
from types import TracebackType

import pytest

from repro.errors import UsageError
from repro.snapshot.scan.run import ScanRequest, scan_target
from tests.snapshot.conftest import PYPI_PACKAGES, PatchedEnv, Venv


class Entered:
    """A real context manager that counts how often it was entered and left."""

    def __init__(self) -> None:
        self.entered = 0
        self.exited = 0

    def __enter__(self) -> Entered:
        self.entered += 1
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        value: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.exited += 1


@pytest.mark.slow
def test_a_clean_venv_has_no_findings(clean_env: Venv) -> None:
    progress = Entered()
    result = scan_target(ScanRequest(venv=clean_env.root, diffs=True), hashing=progress)
    assert (progress.entered, progress.exited) == (1, 1)
    assert result.python == clean_env.root / "bin" / "python"
    report = result.report
    assert report.clean and report.patched == () and report.unreadable == ()
    assert {*PYPI_PACKAGES, "repro-demo-wheel"} <= set(report.dists_scanned)
    assert report.files_checked > 0 and report.bytes_checked > 0
    assert result.diffs == {}
    document = result.to_json()
    assert document["clean"] is True and document["patched"] == [] and document["diffs"] == {}
    json.dumps(document)  # the CLI prints it as JSON


@pytest.mark.slow
def test_a_patched_venv_names_every_patch_and_honours_ignore(patched_env: PatchedEnv) -> None:
    request = ScanRequest(python=patched_env.venv.python, ignore=patched_env.ignore)
    result = scan_target(request)
    assert result.diffs is None and "diffs" not in result.to_json()
    found = {(p.dist, p.path, p.kind) for p in result.report.patched}
    assert found == patched_env.expected
    assert not result.report.clean
    assert result.to_json()["clean"] is False
    unignored = scan_target(ScanRequest(python=patched_env.venv.python))
    paths = {p.path for p in unignored.report.patched}
    assert patched_env.ignored_path in paths


@pytest.mark.parametrize(
    ("packages", "expected"),
    [
        (["packaging"], {("packaging", "packaging/_repro_added.py", "added")}),
        (["IDNA"], {("idna", "idna/core.py", "modified"), ("idna", "idna/codec.py", "deleted")}),
        (["six", "attrs"], set()),
    ],
)
@pytest.mark.slow
def test_packages_narrow_the_scan(
    patched_env: PatchedEnv, packages: list[str], expected: set[tuple[str, str, str]]
) -> None:
    result = scan_target(
        ScanRequest(venv=patched_env.venv.root, packages=packages, ignore=patched_env.ignore)
    )
    assert {(p.dist, p.path, p.kind) for p in result.report.patched} == expected
    assert result.report.clean == (not expected)


@pytest.mark.slow
def test_a_package_not_installed_is_skipped_with_the_reason(clean_env: Venv) -> None:
    result = scan_target(ScanRequest(venv=clean_env.root, packages=["six", "repro-not-here"]))
    assert result.report.dists_scanned == ("six",)
    assert dict(result.report.dists_skipped) == {"repro-not-here": "not installed"}
    assert result.report.clean


def test_both_python_and_venv_are_refused(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="give --python or --venv, not both"):
        scan_target(ScanRequest(python=tmp_path / "python", venv=tmp_path))


def test_a_venv_directory_without_python_is_refused_naming_it(tmp_path: Path) -> None:
    with pytest.raises(UsageError) as caught:
        scan_target(ScanRequest(venv=tmp_path))
    assert caught.value.message == (
        f"--venv {tmp_path}: a directory without bin/python, not a virtual environment"
    )


@pytest.mark.parametrize("option", ["python", "venv"])
def test_a_missing_interpreter_is_refused_naming_it(tmp_path: Path, option: str) -> None:
    missing = tmp_path / "nowhere" / "python"
    request = ScanRequest(python=missing) if option == "python" else ScanRequest(venv=missing)
    with pytest.raises(UsageError) as caught:
        scan_target(request)
    assert caught.value.message == f"--{option} {missing}: no such interpreter"
