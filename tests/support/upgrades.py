"""Bundles of one workspace for the upgrade tests, all `--wheels all`, so an offline unpack
(and an upgrade) installs from the vault alone; built once per test module.

- `build_upgrade_pair`: demo 1, then demo 2 packed from the same workspace after a patch
  changed (idna's added file), a package upgraded (six 1.16.0 -> 1.17.0, whose 1.16
  patch goes with it), one added (iniconfig), one removed (tomli) and a bench file
  changed.
- `build_one_wheel_pair`: demo 1, then demo 2 after one package (iniconfig 2.0.0 ->
  2.1.0, from the index) and nothing else changed, in full and as a delta against demo
  1; the workspace has a unit, which stays the same."""

from __future__ import annotations

import hashlib
import os
import stat
import subprocess
from dataclasses import dataclass
from pathlib import Path

from tests.install.test_unpack import build_local_wheel, build_workspace, pack, site_packages
from tests.support.run import run_repro
from tests.support.venvs import find_python

UNPACK_ARGS = ("--cpu", "--no-smoke", "--offline")
# the run's own bookkeeping and history: the latest report, the lock files (the last
# pid), the releases; bytecode caches are never compared
NOT_COMPARED = {
    ".repro/unpack-report.json",
    ".repro/unpack.lock",
    ".repro/patch.lock",
}


UNIT = """[Unit]
Description=demo server

[Service]
ExecStart={venv}/bin/python -m http.server 8000 --bind 127.0.0.1

[Install]
WantedBy=multi-user.target
"""
UNIT_NAME = "demo-serve.service"
# the one package demo 2 of build_one_wheel_pair changes
ONE_WHEEL = ("iniconfig", "2.0.0", "2.1.0")


@dataclass(frozen=True)
class UpgradePair:
    v1: Path
    v2: Path


@dataclass(frozen=True)
class OneWheelPair:
    v1: Path
    v2: Path  # demo 2 in full
    delta: Path  # demo 2 as a delta against demo 1


def build_upgrade_pair(root: Path) -> UpgradePair:
    wheel = build_local_wheel(root / "localwheel")
    workspace = build_workspace(
        root / "ws",
        find_python("3.11"),
        ["six==1.16.0", "idna==3.7", "tomli==2.0.1", str(wheel)],
    )
    (workspace / "bench").mkdir()
    (workspace / "bench" / "run.sh").write_text("#!/bin/sh\necho bench\n")
    (workspace / "bench" / "run.sh").chmod(0o755)
    (workspace / "bench" / "results.json").write_text('{"tokens_per_s": 100}\n')
    (workspace / "repro.toml").write_text('[files]\ninclude = ["bench/*"]\n')
    out = root / "bundles"
    v1 = pack(workspace, out, "1", "--wheels", "all")
    python = workspace / ".venv" / "bin" / "python"
    pip = [str(python), "-m", "pip", "install", "-q"]
    subprocess.run([*pip, "six==1.17.0", "iniconfig==2.0.0"], check=True)
    subprocess.run([str(python), "-m", "pip", "uninstall", "-q", "-y", "tomli"], check=True)
    site = site_packages(workspace / ".venv")
    (site / "idna" / "repro_added.py").write_text("ADDED = 2\n")
    (workspace / "bench" / "results.json").write_text('{"tokens_per_s": 140}\n')
    v2 = pack(workspace, out, "2", "--wheels", "all")
    return UpgradePair(v1, v2)


def build_one_wheel_pair(root: Path) -> OneWheelPair:
    name, old, new = ONE_WHEEL
    wheel = build_local_wheel(root / "localwheel")
    workspace = build_workspace(
        root / "ws",
        find_python("3.11"),
        ["six==1.16.0", "idna==3.7", f"{name}=={old}", str(wheel)],
    )
    (workspace / "services").mkdir()
    venv = workspace / ".venv"
    (workspace / "services" / UNIT_NAME).write_text(UNIT.format(venv=venv))
    out = root / "bundles"
    v1 = pack(workspace, out, "1", "--wheels", "all")
    pip = [str(venv / "bin" / "python"), "-m", "pip", "install", "-q"]
    subprocess.run([*pip, f"{name}=={new}"], check=True)
    v2 = pack(workspace, out, "2", "--wheels", "all")
    delta = pack(workspace, out / "delta", "2", "--wheels", "all", "--base", str(v1))
    return OneWheelPair(v1, v2, delta)


def unpack(bundle: Path, target: Path, *args: str) -> subprocess.CompletedProcess[bytes]:
    return run_repro("unpack", str(bundle), "--target", str(target), *UNPACK_ARGS, *args)


def ok(result: subprocess.CompletedProcess[bytes]) -> str:
    assert result.returncode == 0, result.stderr.decode()
    return result.stdout.decode()


def tree(target: Path, *, history: bool = True) -> dict[str, str]:
    """Every entry under `target`: a file's mode and sha256, a link's destination, a
    directory's mode. `history=False` leaves out what differs by the target's history
    (state.toml, the releases)."""
    out: dict[str, str] = {}
    for directory, dirs, files in os.walk(target):
        dirs[:] = [d for d in dirs if d != "__pycache__"]
        if Path(directory) == target / ".repro" and not history:
            dirs[:] = [d for d in dirs if d != "releases"]
        for name in [*dirs, *files]:
            path = Path(directory) / name
            rel = path.relative_to(target).as_posix()
            if rel in NOT_COMPARED or (not history and rel == ".repro/state.toml"):
                continue
            if rel.startswith(".repro/releases") and history:
                continue  # compared by the tests that look at them
            info = path.lstat()
            if stat.S_ISLNK(info.st_mode):
                out[rel] = f"link -> {os.readlink(path)}"
            elif stat.S_ISDIR(info.st_mode):
                out[rel] = "dir"
            else:
                digest = hashlib.sha256(path.read_bytes()).hexdigest()
                out[rel] = f"file {stat.S_IMODE(info.st_mode):o} {digest}"
    return out


def differences(found: dict[str, str], expected: dict[str, str]) -> list[str]:
    """Each path whose entry differs between two trees (as `tree` or the kill-anywhere
    tests' own walker give them), with both sides."""
    keys = sorted(set(found) | set(expected))
    return [
        f"{k}: expected {expected.get(k, 'absent')}, found {found.get(k, 'absent')}"
        for k in keys
        if found.get(k) != expected.get(k)
    ]
