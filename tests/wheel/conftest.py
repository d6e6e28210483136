"""A real wheel for the tests of repro.wheel: a small project built by setuptools and the
`wheel` package (`pip wheel --no-build-isolation`, from the test venv's own tools), so its
RECORD, entry_points.txt and `#!python` script are what a build backend writes."""

from __future__ import annotations

import subprocess
import sys
import sysconfig
import textwrap
from dataclasses import dataclass
from pathlib import Path

import pytest

from repro.install.vaultinstall import RESERVED
from repro.wheel.scheme import Scheme

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
        textwrap.dedent(
            """\
            [build-system]
            requires = ["setuptools>=61"]
            build-backend = "setuptools.build_meta"

            [project]
            name = "wheeldemo"
            version = "1.0"

            [project.optional-dependencies]
            extra = []

            [tool.setuptools]
            packages = ["wheeldemo"]
            script-files = ["bin/wheeldemo-tool"]

            [tool.setuptools.package-data]
            wheeldemo = ["*.txt"]
            """
        )
        + f"\n[project.scripts]\n{console}\n[project.gui-scripts]\n{gui}"
    )
    return root


@pytest.fixture(scope="session")
def real_wheel(tmp_path_factory: pytest.TempPathFactory) -> RealWheel:
    base = tmp_path_factory.mktemp("real-wheel")
    project = write_project(base / "src")
    out = base / "dist"
    argv = [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation"]
    argv += ["--disable-pip-version-check", "-w", str(out), str(project)]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=BUILD_TIMEOUT, check=False)
    assert proc.returncode == 0, proc.stderr
    (wheel,) = out.glob("wheeldemo-1.0-*.whl")
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
