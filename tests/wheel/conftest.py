"""Support for the tests of repro.wheel: a real wheel (a small project built by
setuptools and the `wheel` package with `pip wheel --no-build-isolation`, from the test
venv's own tools, so its RECORD, entry_points.txt and `#!python` script are what a build
backend writes), wheels made here with zipfile (`make_wheel`), a fresh venv per test
(`venv`) and a venv's layout without an interpreter of its own (`venv_layout`)."""

from __future__ import annotations

import base64
import hashlib
import subprocess
import sys
import sysconfig
import zipfile
from dataclasses import dataclass
from pathlib import Path

import pytest

from repro.install.venv.vault import RESERVED, describe_interpreter, venv_scheme
from repro.wheel.scheme import Scheme
from tests.support.wheels import build_wheel, pyproject_toml, write_wheel

BUILD_TIMEOUT = 300

# names a RECORD has to quote: a comma, a double quote
QUOTED_NAMES = ("a,b.txt", 'say"hi".txt')
CONSOLE_SCRIPTS = {"wheeldemo": "wheeldemo:main", "wheeldemo-sub": "wheeldemo.cli:run [extra]"}
GUI_SCRIPTS = {"wheeldemo-gui": "wheeldemo:main"}
TOOL_SCRIPT = b'#!python\nprint("tool")\n'


@dataclass(frozen=True)
class RealWheel:
    path: Path
    dist_info: str  # wheeldemo-1.0.dist-info
    data_dir: str  # wheeldemo-1.0.data


def write_project(root: Path) -> Path:
    """The project `wheeldemo` 1.0: console and GUI scripts (one with an extra), a
    `#!python` script file, package data whose names RECORD quotes."""
    package = root / "wheeldemo"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("def main() -> int:\n    return 0\n")
    (package / "cli.py").write_text("def run() -> int:\n    return 0\n")
    for name in QUOTED_NAMES:
        (package / name).write_text(f"content of {name}\n")
    (root / "bin").mkdir()
    (root / "bin" / "wheeldemo-tool").write_bytes(TOOL_SCRIPT)
    console = "".join(f'{k} = "{v}"\n' for k, v in CONSOLE_SCRIPTS.items())
    gui = "".join(f'{k} = "{v}"\n' for k, v in GUI_SCRIPTS.items())
    (root / "pyproject.toml").write_text(
        pyproject_toml(
            "wheeldemo",
            "1.0",
            ["wheeldemo"],
            setuptools='script-files = ["bin/wheeldemo-tool"]\n',
            more="\n[project.optional-dependencies]\nextra = []\n"
            '\n[tool.setuptools.package-data]\nwheeldemo = ["*.txt"]\n'
            f"\n[project.scripts]\n{console}\n[project.gui-scripts]\n{gui}",
        )
    )
    return root


@pytest.fixture(scope="session")
def real_wheel(tmp_path_factory: pytest.TempPathFactory) -> RealWheel:
    base = tmp_path_factory.mktemp("real-wheel")
    project = write_project(base / "src")
    out = base / "dist"
    out.mkdir()
    wheel = build_wheel(project, out, "--no-build-isolation", timeout=BUILD_TIMEOUT)
    assert wheel.name.startswith("wheeldemo-1.0-"), wheel
    return RealWheel(wheel, "wheeldemo-1.0.dist-info", "wheeldemo-1.0.data")


def venv_layout(prefix: Path) -> Scheme:
    """A venv's directory tree below `prefix` (the scheme of this interpreter, a
    `bin/python` link to it, a `pyvenv.cfg`) and repro's installer's scheme for it."""
    paths = sysconfig.get_paths("posix_prefix", vars={"base": str(prefix), "platbase": str(prefix)})
    for key in ("purelib", "platlib", "scripts"):
        Path(paths[key]).mkdir(parents=True, exist_ok=True)
    (prefix / "pyvenv.cfg").write_text("home = /usr/bin\n")
    (prefix / "bin" / "python").symlink_to(sys.executable)
    version = f"{sys.version_info[0]}.{sys.version_info[1]}"
    return Scheme(
        purelib=Path(paths["purelib"]),
        platlib=Path(paths["platlib"]),
        scripts=Path(paths["scripts"]),
        data=prefix,
        include_site=prefix / "include" / "site" / f"python{version}",
        python=prefix / "bin" / "python",
        reserved=RESERVED,
        version=sys.version_info[:2],
    )


def record_of(files: dict[str, bytes]) -> bytes:
    rows = []
    for name, data in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        rows.append(f"{name},sha256={digest},{len(data)}")
    return ("\n".join(rows) + "\n").encode()


def make_wheel(
    directory: Path,
    name: str = "demo",
    version: str = "1.0",
    *,
    files: dict[str, bytes] | None = None,
    purelib: bool = True,
    entry_points: str = "",
    compression: int = zipfile.ZIP_STORED,
    modes: dict[str, int] | None = None,
    tag: str = "py3-none-any",
) -> Path:
    dist_info = f"{name}-{version}.dist-info"
    members = dict(files if files is not None else {f"{name}/__init__.py": b"VALUE = 1\n"})
    members[f"{dist_info}/METADATA"] = (
        f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n".encode()
    )
    root = "true" if purelib else "false"
    wheel_meta = f"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: {root}\nTag: {tag}\n"
    members[f"{dist_info}/WHEEL"] = wheel_meta.encode()
    if entry_points:
        members[f"{dist_info}/entry_points.txt"] = entry_points.encode()
    record = record_of(members) + f"{dist_info}/RECORD,,\n".encode()
    members[f"{dist_info}/RECORD"] = record
    return write_wheel(
        directory, members, name, version, compression=compression, modes=modes, tag=tag
    )


@pytest.fixture()
def venv(tmp_path: Path) -> Path:
    target = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(target)], check=True)
    return target


def scheme_of(venv: Path) -> Scheme:
    python = venv / "bin" / "python"
    return venv_scheme(python, describe_interpreter(python))


def nothing_of_demo_in(venv: Path) -> bool:
    """True when no file of the demo wheel reached the venv."""
    scheme = scheme_of(venv)
    return (
        not any(path.name.startswith("demo") for path in (scheme.purelib.iterdir()))
        and not (scheme.scripts / "demo-cli").exists()
    )
