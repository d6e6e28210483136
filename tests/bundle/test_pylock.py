"""env/pylock.toml of real packs, read by its real readers: `packaging.pylock` and `uv`.

The workspace is a Python 3.11 venv with six, idna and attrs from PyPI and a local
project's wheel that only the vault can serve. Each pack mode's pylock.toml must pass
`Pylock.from_dict(...).validate()` and `uv pip sync` must install exactly the pinned
versions from it into a fresh venv: from the indexes for `--wheels auto` and
`--check-index`, offline from the vault for `--wheels all`.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
from packaging.pylock import Package, Pylock

from repro import _toml
from tests.snapshot.conftest import PYTHON_311, make_venv, pip, write_project
from tests.support.run import run, run_repro

pytestmark = pytest.mark.slow

UV = Path(sys.executable).parent / "uv"
LOCAL = "repro-pylock-local"


@dataclass(frozen=True)
class Source:
    root: Path  # the workspace: .venv inside
    pins: frozenset[str]  # name==version of every installed distribution


@pytest.fixture(scope="module")
def source(tmp_path_factory: pytest.TempPathFactory) -> Source:
    base = tmp_path_factory.mktemp("pylock-ws")
    project = write_project(base / "src", LOCAL, "repro_pylock_local", "1.0", False)
    run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(base), str(project)])
    (wheel,) = base.glob("*.whl")
    venv = make_venv(PYTHON_311, base / "ws" / ".venv")
    pip(venv, "install", "-q", "six", "idna", "attrs", str(wheel))
    wheel.unlink()  # only the installed files are left: the vault must rebuild it
    return Source(base / "ws", frozenset(_freeze(venv.python)))


_VERSIONS = (
    "import importlib.metadata as m, re\n"
    "for d in m.distributions():\n"
    "    print(re.sub(r'[-_.]+', '-', d.metadata['Name']).lower() + '==' + d.version)"
)


def _freeze(python: Path) -> set[str]:
    """name==version of every distribution installed for `python` (however installed)."""
    return {line for line in run([str(python), "-I", "-c", _VERSIONS]).splitlines() if line}


def _pack(source: Source, out: Path, *args: str) -> tuple[Path, dict[str, object]]:
    """Pack, extract with GNU tar; the extracted bundle's env/ and pack's JSON report."""
    proc = run_repro(
        "pack", str(source.root), "-o", f"{out}/", "--version", "1", "--json", *args,
        env={"VIRTUAL_ENV": None},
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr.decode()
    report = json.loads(proc.stdout)
    tree = out / "x"
    tree.mkdir()
    run(["tar", "-xf", str(report["path"]), "-C", str(tree)])
    (top,) = tree.iterdir()
    return top / "env", report


def _read(env: Path) -> tuple[Pylock, dict[str, object]]:
    document = _toml.loads((env / "pylock.toml").read_text())
    lock = Pylock.from_dict(document)
    lock.validate()
    return lock, document


def _uv(*args: str, cache: Path) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, UV_PREVIEW_FEATURES="pylock", UV_CACHE_DIR=str(cache))
    return subprocess.run(
        [str(UV), *args], capture_output=True, text=True, env=env, timeout=600, check=False
    )


def _installed_from(tmp_path: Path, *command: str, target_name: str = "target") -> set[str]:
    """What `uv pip COMMAND...` (sync LOCK, install -r LOCK) puts into a fresh venv."""
    target = tmp_path / target_name
    run([str(UV), "venv", "-q", "-p", str(PYTHON_311), str(target)])
    python = target / "bin" / "python"
    proc = _uv("pip", *command, "--python", str(python), cache=tmp_path / "uv-cache")
    assert proc.returncode == 0, proc.stderr
    return _freeze(python)


def test_auto_lists_index_files_and_the_vault_wheel(source: Source, tmp_path: Path) -> None:
    env, _ = _pack(source, tmp_path)
    lock, document = _read(env)
    by_name: dict[str, Package] = {p.name: p for p in lock.packages}
    assert {f"{n}=={p.version}" for n, p in by_name.items()} == source.pins
    assert "unlisted" not in document["tool"]["repro"]  # type: ignore[index]
    for name in ("six", "idna", "attrs"):
        package = by_name[name]
        assert package.index == "https://pypi.org/simple"
        assert package.wheels and all(w.url and w.hashes["sha256"] for w in package.wheels)
        # sdists go to [packages.sdist], never among the wheels
        assert package.sdist is not None and package.sdist.filename.endswith(".tar.gz")
        assert all(w.filename.endswith(".whl") for w in package.wheels)
    (local,) = by_name[LOCAL].wheels or ()
    assert local.path == f"wheels/{local.filename}" and (env / local.path).is_file()
    assert by_name[LOCAL].index is None and by_name[LOCAL].sdist is None
    assert _installed_from(tmp_path, "sync", str(env / "pylock.toml")) == source.pins


def test_auto_installs_with_uv_pip_install_r(source: Source, tmp_path: Path) -> None:
    env, _ = _pack(source, tmp_path)
    assert _installed_from(tmp_path, "install", "-r", str(env / "pylock.toml")) == source.pins


def test_check_index_puts_sdists_under_sdist(source: Source, tmp_path: Path) -> None:
    env, _ = _pack(source, tmp_path, "--check-index")
    lock, _ = _read(env)
    six = next(p for p in lock.packages if p.name == "six")
    assert six.sdist is not None and six.sdist.filename == f"six-{six.version}.tar.gz"
    assert [w.filename for w in six.wheels or ()] == [f"six-{six.version}-py2.py3-none-any.whl"]
    assert _installed_from(tmp_path, "sync", str(env / "pylock.toml")) == source.pins


def test_wheels_all_installs_offline_from_the_vault(source: Source, tmp_path: Path) -> None:
    env, _ = _pack(source, tmp_path, "--wheels", "all")
    lock, _ = _read(env)
    for package in lock.packages:
        assert package.index is None and package.sdist is None, package.name
        for wheel in package.wheels or ():
            assert wheel.url is None and wheel.path == f"wheels/{wheel.filename}"
            assert (env / wheel.path).is_file()
    installed = _installed_from(tmp_path, "sync", "--offline", str(env / "pylock.toml"))
    assert installed == source.pins
    lock_file = str(env / "pylock.toml")
    by_install = _installed_from(tmp_path, "install", "--offline", "-r", lock_file, target_name="2")
    assert by_install == source.pins


def test_an_offline_auto_pack_lists_what_it_knows(source: Source, tmp_path: Path) -> None:
    """Offline, no index file is known for the PyPI pins: pylock.toml lists the vault's
    wheel only, names the others and still passes both readers; pack says so."""
    env, report = _pack(source, tmp_path, "--offline")
    lock, document = _read(env)
    assert [p.name for p in lock.packages] == [LOCAL]
    unlisted = document["tool"]["repro"]["unlisted"]  # type: ignore[index]
    assert {"six", "idna", "attrs"} <= set(unlisted)
    warnings = report["warnings"]
    assert isinstance(warnings, list)
    assert any("env/pylock.toml lists 1 of" in w and "six" in w for w in warnings), warnings
    installed = _installed_from(tmp_path, "sync", "--offline", str(env / "pylock.toml"))
    assert {line.split("==")[0] for line in installed} == {LOCAL}


def test_the_bundle_stays_deterministic(source: Source, tmp_path: Path) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    _, first = _pack(source, tmp_path / "a")
    _, second = _pack(source, tmp_path / "b")
    first_bytes = Path(str(first["path"])).read_bytes()
    assert first_bytes == Path(str(second["path"])).read_bytes()
