"""RECORD as csv reads and writes it, on the pack side.

Real wheels whose file names are hostile but legal (a double quote, a comma, spaces,
non-ASCII, and the breaks `str.splitlines()` knows and csv does not: form feed, vertical
tab, U+001D, U+0085, U+2028), installed by real pip into a real venv, packed by the
real CLI (`--wheels all --offline`, the original wheels gone, so each is rebuilt), and
the rebuilt wheels read back by their real readers: `python -m installer
--validate-record all` (pypa/installer) and pip into a fresh venv, file for file.

pypa/installer 1.1 and pip read a wheel's RECORD with `splitlines()` themselves, so a
name holding a line break of that kind cannot be validated by installer whatever wrote
the wheel (it refuses the original wheel, written by csv.writer, just the same): that
wheel is validated by `_validate_as_csv`, installer's rules over csv's rows.
"""

from __future__ import annotations

import base64
import csv
import hashlib
import io
import shutil
import subprocess
import sys
import tarfile
import zipfile
from dataclasses import dataclass
from pathlib import Path

import pytest

from repro import _toml
from repro.wheel.record import read_record
from tests.snapshot.conftest import Venv, make_venv, pip
from tests.support.run import run_repro
from tests.support.venvs import find_python

QUOTES = ('say"hi".txt', "a,b.txt", "sp ace.txt", " lead.txt", "é✓ ünï.txt", "'single'.txt")
BREAKS = ("l\u2028s.txt", "n\x85l.txt", "f\fe.txt", "v\vt.txt", "g\x1ds.txt", "p\u2029s.txt")
INSTALLER_TIMEOUT = 300


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def make_wheel(directory: Path, name: str, names: tuple[str, ...]) -> Path:
    """A real wheel of `name` 1.0 holding a file of each of `names`, its RECORD written by
    csv.writer as wheel builders write it."""
    files = {f"{name}/{n}": f"content of {n!r}\n".encode() for n in names}
    files[f"{name}/__init__.py"] = b""
    info = f"{name}-1.0.dist-info"
    files[f"{info}/METADATA"] = f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n".encode()
    files[f"{info}/WHEEL"] = (
        b"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
    )
    record = io.StringIO(newline="")
    writer = csv.writer(record, lineterminator="\n")
    for arcname, data in files.items():
        writer.writerow([arcname, f"sha256={_b64(data)}", len(data)])
    writer.writerow([f"{info}/RECORD", "", ""])
    wheel = directory / f"{name}-1.0-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        for arcname, data in files.items():
            archive.writestr(arcname, data)
        archive.writestr(f"{info}/RECORD", record.getvalue())
    return wheel


def installer_validate(wheel: Path, destdir: Path) -> subprocess.CompletedProcess[str]:
    """pypa/installer's own check of a wheel against its RECORD (every member listed,
    hash and size of each), installing into `destdir`."""
    argv = [sys.executable, "-m", "installer", "--validate-record", "all"]
    argv += ["--no-compile-bytecode", "--destdir", str(destdir), str(wheel)]
    return subprocess.run(
        argv, capture_output=True, text=True, timeout=INSTALLER_TIMEOUT, check=False
    )


def _validate_as_csv(wheel: Path) -> list[str]:
    """installer's validate_record rules (every member in RECORD, with a hash and size that
    match; RECORD itself without), over RECORD read by csv over its whole text."""
    issues: list[str] = []
    with zipfile.ZipFile(wheel) as archive:
        (record_name,) = [n for n in archive.namelist() if n.endswith(".dist-info/RECORD")]
        text = archive.read(record_name).decode("utf-8")
        rows = {row[0]: row for row in csv.reader(io.StringIO(text, newline="")) if row}
        for item in archive.infolist():
            row = rows.pop(item.filename, None)
            if row is None:
                issues.append(f"{item.filename!r} is not in RECORD")
            elif item.filename == record_name:
                if row[1:] != ["", ""]:
                    issues.append("RECORD lists a hash of itself")
            elif row[1:] != [f"sha256={_b64(archive.read(item))}", str(item.file_size)]:
                issues.append(f"{item.filename!r}: hash or size differs from RECORD")
    issues += [f"{name!r} is in RECORD, not in the wheel" for name in rows]
    return issues


def _package_files(site: Path, package: str) -> dict[str, bytes]:
    root = site / package
    return {
        p.relative_to(root).as_posix(): p.read_bytes()
        for p in root.rglob("*")
        if p.is_file() and "__pycache__" not in p.parts
    }


@dataclass(frozen=True)
class HostilePack:
    source: Venv
    originals: dict[str, Path]  # the wheels pip installed, kept aside
    rebuilt: dict[str, Path]  # env/wheels/ of the bundle, by distribution name


@pytest.fixture(scope="module")
def hostile_pack(tmp_path_factory: pytest.TempPathFactory) -> HostilePack:
    root = tmp_path_factory.mktemp("record-csv")
    dist_dir = root / "dist"
    dist_dir.mkdir()
    wheels = [make_wheel(dist_dir, "csvquotes", QUOTES), make_wheel(dist_dir, "csvbreaks", BREAKS)]
    workspace = root / "ws"
    venv = make_venv(find_python("3.11"), workspace / "venv")
    pip(venv, "install", "-q", "--no-index", *map(str, wheels))
    # the original wheels gone from where pip took them: each is rebuilt from RECORD
    kept = root / "kept"
    shutil.move(dist_dir, kept)
    out = root / "out"
    proc = run_repro("pack", str(workspace), "--wheels", "all", "--offline", "-o", str(out))
    assert proc.returncode == 0, proc.stderr.decode()
    (bundle,) = out.glob("*.tar")
    extracted = root / "bundle"
    with tarfile.open(bundle) as archive:
        archive.extractall(extracted, filter="data")
    rebuilt = {w.name.split("-")[0]: w for w in extracted.glob("*/env/wheels/*.whl")}
    originals = {w.name.split("-")[0]: w for w in kept.glob("*.whl")}
    return HostilePack(venv, originals, rebuilt)


def test_every_rebuilt_wheel_passes_installer_validation(
    hostile_pack: HostilePack, tmp_path: Path
) -> None:
    assert {"csvquotes", "csvbreaks", "pip", "setuptools"} <= hostile_pack.rebuilt.keys()
    for name, wheel in sorted(hostile_pack.rebuilt.items()):
        if name == "csvbreaks":
            continue
        proc = installer_validate(wheel, tmp_path / name)
        assert proc.returncode == 0, (name, proc.stderr[-2000:])
    record = zipfile.ZipFile(hostile_pack.rebuilt["csvquotes"]).read(
        "csvquotes-1.0.dist-info/RECORD"
    )
    # the inner quotes doubled, as csv writes and reads them
    assert b'"csvquotes/say""hi"".txt",sha256=' in record
    assert b'"csvquotes/a,b.txt",sha256=' in record


def test_a_name_with_a_splitlines_break_is_csv_valid_where_installer_cannot_read_it(
    hostile_pack: HostilePack, tmp_path: Path
) -> None:
    rebuilt = hostile_pack.rebuilt["csvbreaks"]
    assert _validate_as_csv(rebuilt) == []
    # installer's own splitlines() refuses the original wheel, which csv.writer wrote,
    # exactly as it refuses the rebuilt one: its limit, not the wheel's
    for wheel in (hostile_pack.originals["csvbreaks"], rebuilt):
        assert _validate_as_csv(wheel) == []
        proc = installer_validate(wheel, tmp_path / wheel.parent.name)
        assert proc.returncode != 0 and "expected 3 elements" in proc.stderr


def test_pip_installs_the_rebuilt_wheels_with_the_source_files(
    hostile_pack: HostilePack, tmp_path: Path
) -> None:
    fresh = make_venv(find_python("3.11"), tmp_path / "fresh")
    wheels = [str(hostile_pack.rebuilt[n]) for n in ("csvquotes", "csvbreaks")]
    pip(fresh, "install", "-q", "--no-index", "--no-deps", *wheels)
    for package, names in (("csvquotes", QUOTES), ("csvbreaks", BREAKS)):
        source = _package_files(hostile_pack.source.site_packages, package)
        assert set(names) <= source.keys()
        assert _package_files(fresh.site_packages, package) == source


def test_pack_reads_pips_installed_record_as_csv_does(hostile_pack: HostilePack) -> None:
    """The RECORD pip wrote for each hostile distribution, read by the pack side, row for
    row as csv reads it (pip's own splitlines() made extra rows of the broken names: they
    are csv rows all the same, and the pack reports them as what they say)."""
    for package in ("csvquotes", "csvbreaks"):
        path = hostile_pack.source.site_packages / f"{package}-1.0.dist-info" / "RECORD"
        text = path.read_text(encoding="utf-8")
        expected = [row[0] for row in csv.reader(io.StringIO(text, newline="")) if row]
        assert [entry.path for entry in read_record(path)] == expected
        listed = {entry.path for entry in read_record(path)}
        assert {f"{package}/{name}" for name in QUOTES + BREAKS} & listed


def test_the_planned_wheel_holds_the_record_its_size_was_computed_with(
    hostile_pack: HostilePack,
) -> None:
    """The stored zip is planned before a byte is written: its size (the tar header's)
    follows from a RECORD whose bytes csv.writer made, and the written wheel is that."""
    from repro.snapshot.facts.installed import list_installed
    from repro.wheel.rebuild import CarryPatched, plan_rebuild

    dists = {d.name: d for d in list_installed(hostile_pack.source.site_packages)}
    plan = plan_rebuild(dists["csvquotes"], pristine=CarryPatched())
    written = b"".join(plan.zip.iter_bytes())
    assert len(written) == plan.size
    with zipfile.ZipFile(io.BytesIO(written)) as archive:
        text = archive.read("csvquotes-1.0.dist-info/RECORD").decode()
        listed = [row[0] for row in csv.reader(io.StringIO(text, newline=""))]
        assert listed == archive.namelist()
    assert {f"csvquotes/{name}" for name in QUOTES} <= set(listed)


@pytest.mark.slow
def test_every_wheel_of_a_real_many_distribution_venv_passes_installer_validation(
    tmp_path: Path,
) -> None:
    """The transformers-serve venv of the engine tests (54 real distributions, torch among
    them), packed `--wheels all --offline`: every wheel of its vault, rebuilt or not,
    passes `python -m installer --validate-record all`."""
    from tests.ladder.test_server_transformers import RECIPE
    from tests.support.venvs import VenvRecipe, cached_venv, venv_python

    python = venv_python(cached_venv(VenvRecipe("transformers-serve", find_python("3.11"), RECIPE)))
    workspace = tmp_path / "ws"
    workspace.mkdir()
    out = tmp_path / "out"
    argv = ["pack", str(workspace), "--python", str(python), "--wheels", "all", "--offline"]
    proc = run_repro(*argv, "-o", str(out), timeout=1200)
    assert proc.returncode == 0, proc.stderr.decode()[-4000:]
    (bundle,) = out.glob("*.tar")
    failed: dict[str, str] = {}
    names: list[str] = []
    with tarfile.open(bundle) as archive:
        for member in archive:
            if "/env/wheels/" not in member.name or not member.name.endswith(".whl"):
                continue
            archive.extract(member, tmp_path / "wheels", filter="data")
            wheel = tmp_path / "wheels" / member.name
            names.append(wheel.name)
            checked = installer_validate(wheel, tmp_path / "installed")
            if checked.returncode != 0:
                failed[wheel.name] = checked.stderr[-600:]
            wheel.unlink()
            shutil.rmtree(tmp_path / "installed", ignore_errors=True)
    installed = list(python.parent.parent.glob("lib/python3.11/site-packages/*.dist-info"))
    assert len(names) == len(installed) >= 50
    assert failed == {}
    vault = _toml.loads(_member(bundle, "/env/vault.toml").decode())
    origins = [w["source"] for w in vault["wheels"]]
    assert origins.count("rebuilt") >= 40, origins


def _member(bundle: Path, suffix: str) -> bytes:
    with tarfile.open(bundle) as archive:
        for member in archive:
            if member.name.endswith(suffix):
                handle = archive.extractfile(member)
                assert handle is not None
                return handle.read()
    raise AssertionError(f"no {suffix} in {bundle}")
