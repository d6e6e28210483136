"""Vault wheels that write what is not theirs, through the real CLI (`repro unpack
--no-exec`), with each installer: the vault installer, the streamed install (`unpack -`)
and pip-sync (its wheels checked before they are handed over).

Each bundle is valid as `repro check` sees it: its one vault wheel is the attacker's,
env/vault.toml lists that wheel's sha256 and the manifest is written again. The wheel's
`<name>.data/data/pyvenv.cfg` (the data scheme is the venv's prefix) points `home` at a
"standard library" the same wheel installs, whose `encodings` package writes a marker
file: the next `python -I -S` repro starts would run it (as it did: issue 29). Another
wheel's `.data/scripts/python` would replace the venv's interpreter. Two wheels
writing one path are refused naming both. Every run: exit 3, the wheel, the member and
the rule named, no traceback, and the marker never written.
"""

from __future__ import annotations

import hashlib
import sys
from pathlib import Path

import pytest

from repro.bundle.vault import ALL_WHEELS_REASON, VaultEntry, dump_vault
from repro.errors import EXIT_INSTALL
from tests.support.bundles import archive_tree, make_bundle_tree
from tests.support.run import run_repro
from tests.support.wheels import wheel_files, write_wheel

pytestmark = pytest.mark.slow

ARGS = ("--cpu", "--no-smoke", "--offline", "--no-exec")
STDLIB = f"python{sys.version_info[0]}.{sys.version_info[1]}"


def _encodings(marker: Path) -> bytes:
    """Python's first import from its standard library, run before `open` exists."""
    return (
        "import posix\n"
        f"posix.write(posix.open({str(marker)!r}, posix.O_WRONLY | posix.O_CREAT, 0o644), b'ran')\n"
    ).encode()


def _home_hijack(venv: Path, marker: Path) -> dict[str, bytes]:
    data = "evil-1.0.data/data"
    return {
        "evil/__init__.py": b"",
        f"{data}/pyvenv.cfg": f"home = {venv}/fakehome/bin\nversion = 3\n".encode(),
        f"{data}/fakehome/lib/{STDLIB}/os.py": b"",
        f"{data}/fakehome/lib/{STDLIB}/lib-dynload/.keep": b"",
        f"{data}/fakehome/lib/{STDLIB}/encodings/__init__.py": _encodings(marker),
    }


def _interpreter_swap(marker: Path) -> dict[str, bytes]:
    script = f'#!/bin/sh\ntouch {marker}\nexec {sys.executable} "$@"\n'.encode()
    return {"evil/__init__.py": b"", "evil-1.0.data/scripts/python": script}


def _bundle(
    root: Path, wheels: dict[str, dict[str, bytes]], entry_points: dict[str, str] | None = None
) -> Path:
    """A bundle whose lock pins each of `wheels` (name -> files, and its entry_points.txt
    in `entry_points`) at 1.0, the vault holding them, vault.toml listing their hashes,
    the manifest written again."""
    built = root / "built"
    built.mkdir(parents=True)
    files: dict[str, bytes] = {}
    entries = []
    for name, members in wheels.items():
        (built / name).mkdir()
        points = (entry_points or {}).get(name, "")
        wheel = write_wheel(
            built / name, wheel_files(name, files=members, entry_points=points), name
        )
        data = wheel.read_bytes()
        files[f"env/wheels/{wheel.name}"] = data
        digest = hashlib.sha256(data).hexdigest()
        # "--wheels all": the streamed install removes each wheel once unpacked, so its own
        # refusal (not the install after the verification) is what ends the run
        entries.append(VaultEntry(name, "1.0", wheel.name, digest, ALL_WHEELS_REASON, "original"))
    files["env/requirements.lock"] = "".join(f"{n}==1.0\n" for n in wheels).encode()
    files["env/vault.toml"] = dump_vault(entries)
    tree = make_bundle_tree(root / "src", files=files)
    return archive_tree(tree, root / "hostile.tar")


def _unpack(bundle: Path, target: Path, how: str) -> tuple[int, str]:
    if how == "streamed":
        argv = ("unpack", "-", "--target", str(target), *ARGS, "--installer", "vault")
        proc = run_repro(*argv, input=bundle.read_bytes())
    else:
        argv = ("unpack", str(bundle), "--target", str(target), *ARGS, "--installer", how)
        proc = run_repro(*argv)
    return proc.returncode, proc.stderr.decode()


def _check_bundle(bundle: Path) -> None:
    proc = run_repro("check", str(bundle))
    assert proc.returncode == 0, proc.stderr.decode()  # valid as far as check can see


@pytest.mark.parametrize("how", ["vault", "streamed", "pip"])
def test_a_wheel_writing_the_venvs_pyvenv_cfg_is_refused_and_runs_nothing(
    tmp_path: Path, how: str
) -> None:
    target = tmp_path / "target"
    marker = tmp_path / "hostile-code-ran"
    bundle = _bundle(tmp_path / "b", {"evil": _home_hijack(target, marker)})
    _check_bundle(bundle)
    code, err = _unpack(bundle, target, how)
    assert code == EXIT_INSTALL, err
    assert "evil-1.0-py3-none-any.whl" in err, err
    assert "evil-1.0.data/data/pyvenv.cfg" in err and "pyvenv.cfg is the venv's own" in err, err
    assert "Traceback" not in err, err
    assert not marker.exists()
    config = target / "pyvenv.cfg"
    assert not config.exists() or "fakehome" not in config.read_text()


@pytest.mark.parametrize("how", ["vault", "streamed", "pip"])
def test_a_wheel_replacing_the_venvs_python_is_refused_and_runs_nothing(
    tmp_path: Path, how: str
) -> None:
    target = tmp_path / "target"
    marker = tmp_path / "hostile-code-ran"
    bundle = _bundle(tmp_path / "b", {"evil": _interpreter_swap(marker)})
    code, err = _unpack(bundle, target, how)
    assert code == EXIT_INSTALL, err
    assert "'evil-1.0.data/scripts/python'" in err, err
    assert "bin/python is the venv's own" in err, err
    assert "Traceback" not in err, err
    assert not marker.exists()
    # and repro's later calls on the target start no code of the bundle either
    run_repro("verify", str(target))
    assert not marker.exists()


@pytest.mark.parametrize("how", ["vault", "streamed", "pip"])
def test_two_vault_wheels_writing_one_path_are_refused_naming_both(
    tmp_path: Path, how: str
) -> None:
    shared = {"shared/__init__.py": b"X = 1\n"}
    bundle = _bundle(tmp_path / "b", {"alpha": shared, "beta": {"shared/__init__.py": b"Y\n"}})
    code, err = _unpack(bundle, tmp_path / "target", how)
    assert code == EXIT_INSTALL, err
    assert "shared/__init__.py is also written by" in err, err
    assert "alpha" in err and "beta" in err, err
    assert "Traceback" not in err, err


@pytest.mark.parametrize("how", ["vault", "streamed", "pip"])
def test_a_vault_wheel_whose_entry_points_are_not_ini_is_refused_naming_it(
    tmp_path: Path, how: str
) -> None:
    """entry_points.txt is read by one parser (repro.wheel.entrypoints): what configparser
    cannot read ends the unpack as an install error naming the wheel and the file."""
    points = {"broken": "[console_scripts\nbroken = broken:main\n"}
    bundle = _bundle(tmp_path / "b", {"broken": {"broken/__init__.py": b""}}, points)
    _check_bundle(bundle)
    code, err = _unpack(bundle, tmp_path / "target", how)
    assert code == EXIT_INSTALL, err
    assert "broken-1.0-py3-none-any.whl: entry_points.txt: not UTF-8 INI" in err, err
    assert "Traceback" not in err, err
