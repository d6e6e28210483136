"""Tests of repro.wheel.scheme: a venv's Scheme and an interpreter's SchemePaths."""

from __future__ import annotations

import os
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

from repro.wheel.scheme import INSTALLER_NAME, SCHEME_KEYS, Scheme, SchemePaths


def _scheme(root: Path) -> Scheme:
    return Scheme(
        purelib=root / "lib" / "python3.11" / "site-packages",
        platlib=root / "lib64" / "python3.11" / "site-packages",
        scripts=root / "bin",
        data=root,
        include_site=root / "include" / "site" / "python3.11",
        python=root / "bin" / "python",
        reserved=(),
    )


@pytest.mark.parametrize(
    ("key", "expected"),
    [
        ("purelib", "lib/python3.11/site-packages"),
        ("platlib", "lib64/python3.11/site-packages"),
        ("scripts", "bin"),
        ("data", ""),
        ("headers", "include/site/python3.11/demo-dist"),
    ],
)
def test_base_of_each_scheme_key(tmp_path: Path, key: str, expected: str) -> None:
    assert key in SCHEME_KEYS
    base = _scheme(tmp_path).base(key, "demo-dist")
    assert base == (tmp_path / expected if expected else tmp_path)


def test_an_unknown_scheme_key_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(AttributeError, match="nosuchkey"):
        _scheme(tmp_path).base("nosuchkey", "demo-dist")


def test_installer_line_names_repro(tmp_path: Path) -> None:
    assert _scheme(tmp_path).installer_line() == b"repro\n"
    assert INSTALLER_NAME == "repro"


def test_entry_point_script_runs_with_the_schemes_interpreter(tmp_path: Path) -> None:
    (tmp_path / "demo_mod.py").write_text(
        "class App:\n    @staticmethod\n    def main():\n        print('ran', 'main')\n"
        "        return 3\n"
    )
    scheme = Scheme(
        purelib=tmp_path,
        platlib=tmp_path,
        scripts=tmp_path,
        data=tmp_path,
        include_site=tmp_path,
        python=Path(sys.executable),
        reserved=(),
    )
    content = scheme.script("demo_mod", "App.main")
    assert content.startswith(b"#!")
    assert os.fsencode(sys.executable) in content.split(b"\n", 1)[0]
    script = tmp_path / "demo-cli"
    script.write_bytes(content)
    script.chmod(0o755)
    env = {**os.environ, "PYTHONPATH": str(tmp_path)}
    proc = subprocess.run([str(script)], capture_output=True, text=True, env=env, check=False)
    assert (proc.returncode, proc.stdout) == (3, "ran main\n")


def test_from_sysconfig_reads_an_interpreters_paths() -> None:
    paths = sysconfig.get_paths()
    scheme = SchemePaths.from_sysconfig(paths)
    assert scheme == SchemePaths(
        purelib=Path(paths["purelib"]),
        platlib=Path(paths["platlib"]),
        scripts=Path(paths["scripts"]),
        data=Path(paths["data"]),
        include=Path(paths["include"]),
    )


def test_from_sysconfig_without_a_key_names_it() -> None:
    paths = dict(sysconfig.get_paths())
    del paths["scripts"]
    with pytest.raises(KeyError, match="scripts"):
        SchemePaths.from_sysconfig(paths)


def test_for_venv_site_packages_guesses_the_layout(tmp_path: Path) -> None:
    site = tmp_path / "venv" / "lib" / "python3.12" / "site-packages"
    assert SchemePaths.for_venv_site_packages(site) == SchemePaths(
        purelib=site,
        platlib=site,
        scripts=tmp_path / "venv" / "bin",
        data=tmp_path / "venv",
        include=tmp_path / "venv" / "include" / "python3.12",
    )


@pytest.mark.slow
def test_for_venv_site_packages_agrees_with_a_real_venv(tmp_path: Path) -> None:
    root = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(root)], check=True)
    proc = subprocess.run(
        [
            str(root / "bin" / "python"),
            "-c",
            "import sysconfig,json;print(json.dumps(sysconfig.get_paths()))",
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    import json

    real = SchemePaths.from_sysconfig(json.loads(proc.stdout))
    guessed = SchemePaths.for_venv_site_packages(real.purelib)
    assert (guessed.purelib, guessed.scripts, guessed.data) == (
        real.purelib,
        real.scripts,
        real.data,
    )
