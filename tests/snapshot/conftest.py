"""Real environments for the snapshot tests, built once per session.

`patched_env` is a Python 3.11 venv holding real PyPI packages (six, idna, packaging, attrs),
a package installed from a wheel built here with `pip wheel`, an editable install, and then a
known set of hand patches: one file edited, one added, one deleted, plus changes that are NOT
patches (a rewritten script shebang, a new .pyc, a file matching an ignore glob).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.support.run import run
from tests.support.wheels import build_wheel, pyproject_toml

PYENV_ROOT = Path(os.environ.get("PYENV_ROOT", str(Path.home() / ".pyenv")))
PYTHON_311 = PYENV_ROOT / "versions" / "3.11.7" / "bin" / "python"
PYTHON_312 = PYENV_ROOT / "versions" / "3.12.1" / "bin" / "python"
PYPI_PACKAGES = ("six", "idna", "packaging", "attrs")


@dataclass(frozen=True)
class Venv:
    root: Path
    python: Path
    site_packages: Path


def make_venv(base_python: Path, root: Path) -> Venv:
    run([str(base_python), "-m", "venv", str(root)])
    python = root / "bin" / "python"
    site = run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"]
    ).strip()
    return Venv(root, python, Path(site))


def pip(venv: Venv, *args: str) -> str:
    return run([str(venv.python), "-m", "pip", "--disable-pip-version-check", *args])


def write_project(root: Path, name: str, package: str, version: str, script: bool) -> Path:
    (root / package).mkdir(parents=True)
    (root / package / "__init__.py").write_text(
        f'__version__ = "{version}"\n\n\ndef main() -> int:\n    print("{name}")\n    return 0\n'
    )
    (root / package / "data.txt").write_text("payload\n")
    scripts = f'\n[project.scripts]\n{name}-cli = "{package}:main"\n' if script else ""
    (root / "pyproject.toml").write_text(
        pyproject_toml(
            name,
            version,
            [package],
            more=f'\n[tool.setuptools.package-data]\n{package} = ["data.txt"]\n' + scripts,
        )
    )
    return root


@pytest.fixture(scope="session")
def demo_wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A wheel of a tiny local project with a console script, built with `pip wheel`."""
    base = tmp_path_factory.mktemp("demo-wheel")
    project = write_project(base / "src", "repro-demo-wheel", "demo_wheel", "1.0+local", True)
    out = base / "dist"
    out.mkdir()
    return build_wheel(project, out)


@pytest.fixture(scope="session")
def editable_project(tmp_path_factory: pytest.TempPathFactory) -> Path:
    base = tmp_path_factory.mktemp("demo-editable")
    return write_project(base / "src", "repro-demo-editable", "demo_editable", "0.3", False)


@dataclass(frozen=True)
class PatchedEnv:
    venv: Venv
    ignore: tuple[str, ...]
    # (dist, path, kind) of every real patch made
    expected: frozenset[tuple[str, str, str]]
    ignored_path: str


@pytest.fixture(scope="session")
def clean_env(
    tmp_path_factory: pytest.TempPathFactory, demo_wheel: Path, editable_project: Path
) -> Venv:
    venv = make_venv(PYTHON_311, tmp_path_factory.mktemp("env311") / "venv")
    pip(venv, "install", "-q", *PYPI_PACKAGES, str(demo_wheel))
    pip(venv, "install", "-q", "-e", str(editable_project))
    return venv


@pytest.fixture(scope="session")
def patched_env(
    tmp_path_factory: pytest.TempPathFactory, demo_wheel: Path, editable_project: Path
) -> Iterator[PatchedEnv]:
    """Built like clean_env, then patched (a separate venv, so clean_env stays clean)."""
    venv = make_venv(PYTHON_311, tmp_path_factory.mktemp("patched311") / "venv")
    pip(venv, "install", "-q", *PYPI_PACKAGES, str(demo_wheel))
    pip(venv, "install", "-q", "-e", str(editable_project))
    site = venv.site_packages
    # real patches
    core = site / "idna" / "core.py"
    core.write_bytes(core.read_bytes() + b"\n# patched by hand\n")
    (site / "packaging" / "_repro_added.py").write_text("ADDED = True\n")
    (site / "idna" / "codec.py").unlink()
    # not patches
    script = venv.root / "bin" / "repro-demo-wheel-cli"
    lines = script.read_bytes().split(b"\n", 1)
    script.write_bytes(b"#!/opt/elsewhere/venv/bin/python\n" + lines[1])
    cache = site / "packaging" / "__pycache__"
    cache.mkdir(exist_ok=True)
    (cache / "extra.cpython-311.pyc").write_bytes(b"\x00not really bytecode")
    (site / "attr" / "validators.py.orig").write_text("left over from patch(1)\n")
    yield PatchedEnv(
        venv=venv,
        ignore=("*.orig",),
        expected=frozenset(
            {
                ("idna", "idna/core.py", "modified"),
                ("packaging", "packaging/_repro_added.py", "added"),
                ("idna", "idna/codec.py", "deleted"),
            }
        ),
        ignored_path="attr/validators.py.orig",
    )


@pytest.fixture(scope="session")
def probe_env_312(tmp_path_factory: pytest.TempPathFactory) -> Venv:
    """A Python 3.12 venv (the tool runs on 3.11) with stand-ins for key modules.

    Test doubles, named as such: the real torch/vllm/triton cannot be installed here, so tiny
    local projects of those names exercise the probe's import isolation: `transformers`
    reports a runtime __version__ different from its metadata, `vllm` raises on import, and
    `triton` hangs on import.
    """
    base = tmp_path_factory.mktemp("probe312")
    venv = make_venv(PYTHON_312, base / "venv")
    doubles = {
        "transformers": ("4.0.0", '__version__ = "4.0.0.dev-custom"\n'),
        "vllm": ("0.1.0", 'raise RuntimeError("CUDA driver missing (double)")\n'),
        "triton": ("3.0.0", "import time\ntime.sleep(60)\n"),
    }
    projects = []
    for name, (version, body) in doubles.items():
        project = write_project(base / name, name, name, version, False)
        (project / name / "__init__.py").write_text(body)
        projects.append(str(project))
    pip(venv, "install", "-q", "six", *projects)
    return venv


@dataclass(frozen=True)
class LockTools:
    pip_sync: Path
    uv: Path


@pytest.fixture(scope="session")
def lock_tools(tmp_path_factory: pytest.TempPathFactory) -> LockTools:
    """pip-tools and uv from PyPI, in a venv of their own."""
    venv = make_venv(PYTHON_311, tmp_path_factory.mktemp("lock-tools") / "venv")
    pip(venv, "install", "-q", "pip-tools>=7.4,<7.7", "uv")  # as pyproject.toml bounds it
    return LockTools(venv.root / "bin" / "pip-sync", venv.root / "bin" / "uv")


@pytest.fixture(scope="session")
def vault_dir(
    tmp_path_factory: pytest.TempPathFactory, demo_wheel: Path, editable_project: Path
) -> Path:
    """Wheels of the two local projects, as the wheel vault would hold them."""
    vault = tmp_path_factory.mktemp("vault")
    (vault / demo_wheel.name).write_bytes(demo_wheel.read_bytes())
    run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-w", str(vault), str(editable_project)]
    )
    return vault
