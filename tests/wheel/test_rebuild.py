"""repro.wheel.rebuild: a wheel setuptools built, installed by repro's own installer into
a venv layout, and rebuilt from the installed files: the same members byte for byte (the
`#!python` line given back, the generated wrappers and the installer's own files left
out), a RECORD pypa/installer validates, the same bytes every time; a patched or
unreadable file and a malformed entry_points.txt end in a VaultError naming them.

The rebuild of real pip installs, and of PyPI's wheels, is tests/snapshot/vault/test_build.py."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from dataclasses import dataclass
from pathlib import Path

import pytest

from repro.errors import PatchedFilesError, VaultError
from repro.wheel.install import install_wheel
from repro.wheel.rebuild import (
    CarryPatched,
    console_script_names,
    plan_rebuild,
    rebuild_wheel,
)
from repro.wheel.record import record_rows
from repro.wheel.scheme import SchemePaths
from tests.wheel.conftest import CONSOLE_SCRIPTS, GUI_SCRIPTS, TOOL_SCRIPT, RealWheel, venv_layout

INSTALLER_TIMEOUT = 300


@dataclass(frozen=True)
class Installed:
    """The rebuild's InstalledDistribution, as the pack's InstalledDist gives it."""

    name: str
    version: str
    dist_info: Path
    site_packages: Path


def _install(real_wheel: RealWheel, prefix: Path) -> tuple[Installed, SchemePaths]:
    scheme = venv_layout(prefix)
    install_wheel(real_wheel.path, scheme)
    site = scheme.purelib
    dist = Installed("wheeldemo", "1.0", site / real_wheel.dist_info, site)
    paths = SchemePaths(
        purelib=scheme.purelib,
        platlib=scheme.platlib,
        scripts=scheme.scripts,
        data=prefix,
        include=prefix / "include" / site.parent.name,
    )
    return dist, paths


def _members(wheel: Path) -> dict[str, bytes]:
    with zipfile.ZipFile(wheel) as archive:
        return {name: archive.read(name) for name in archive.namelist()}


def _rows(data: bytes) -> set[tuple[str, str, str]]:
    return {(path, digest, size) for _, path, digest, size in record_rows(data.decode(), "R")}


def test_an_installed_wheel_rebuilds_to_its_own_members(
    real_wheel: RealWheel, tmp_path: Path
) -> None:
    dist, paths = _install(real_wheel, tmp_path / "venv")
    assert console_script_names(dist.dist_info) == {*CONSOLE_SCRIPTS, *GUI_SCRIPTS}
    for name in (*CONSOLE_SCRIPTS, *GUI_SCRIPTS):
        assert (paths.scripts / name).is_file()  # written by the installer, not the wheel's
    rebuilt = rebuild_wheel(dist, tmp_path / "out", scheme=paths, source_date_epoch=0)
    assert rebuilt.filename == real_wheel.path.name
    assert rebuilt.unverified == ()
    original, new = _members(real_wheel.path), _members(rebuilt.path)
    record = f"{real_wheel.dist_info}/RECORD"
    assert _rows(new.pop(record)) == _rows(original.pop(record))
    assert new == original
    assert new[f"{real_wheel.data_dir}/scripts/wheeldemo-tool"] == TOOL_SCRIPT
    # the same install, rebuilt again, is the same bytes
    again = rebuild_wheel(dist, tmp_path / "again", scheme=paths, source_date_epoch=0)
    assert again.sha256 == rebuilt.sha256
    plan = plan_rebuild(dist, scheme=paths, source_date_epoch=0)
    assert (plan.filename, plan.size) == (rebuilt.filename, rebuilt.path.stat().st_size)


def test_the_rebuilt_wheel_passes_pypa_installers_validation(
    real_wheel: RealWheel, tmp_path: Path
) -> None:
    dist, paths = _install(real_wheel, tmp_path / "venv")
    rebuilt = rebuild_wheel(dist, tmp_path / "out", scheme=paths)
    argv = [sys.executable, "-m", "installer", "--validate-record", "all"]
    argv += ["--no-compile-bytecode", "--destdir", str(tmp_path / "dest"), str(rebuilt.path)]
    proc = subprocess.run(
        argv, capture_output=True, text=True, timeout=INSTALLER_TIMEOUT, check=False
    )
    assert proc.returncode == 0, proc.stderr


def test_a_patched_file_is_named_unless_carried(real_wheel: RealWheel, tmp_path: Path) -> None:
    dist, paths = _install(real_wheel, tmp_path / "venv")
    patched = dist.site_packages / "wheeldemo" / "cli.py"
    patched.write_text("def run() -> int:\n    return 1\n")
    with pytest.raises(PatchedFilesError) as raised:
        rebuild_wheel(dist, tmp_path / "out", scheme=paths)
    assert raised.value.files == ("wheeldemo/cli.py",)
    assert str(dist.dist_info / "RECORD") in raised.value.message
    carrier = CarryPatched()
    carried = rebuild_wheel(dist, tmp_path / "carried", scheme=paths, pristine=carrier)
    assert carrier.carried == ["wheeldemo/cli.py"]
    assert _members(carried.path)["wheeldemo/cli.py"] == patched.read_bytes()


@pytest.mark.parametrize("text", ["no section\n", "[console_scripts\nx = a:b\n"])
def test_an_installed_entry_points_txt_that_is_not_ini_is_a_vault_error(
    real_wheel: RealWheel, tmp_path: Path, text: str
) -> None:
    dist, paths = _install(real_wheel, tmp_path / "venv")
    (dist.dist_info / "entry_points.txt").write_text(text)
    with pytest.raises(VaultError, match=r"entry_points\.txt: not UTF-8 INI") as raised:
        plan_rebuild(dist, scheme=paths)
    assert str(dist.dist_info) in raised.value.message
