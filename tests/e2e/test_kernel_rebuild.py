"""A kernel built here for sm_80 only, carried as source, rebuilt at unpack for a 9.0 GPU.

Real parts: a real venv (setuptools and wheel in it, as a user building with
--no-build-isolation has), the small CUDA library of tests/support/cudalib.py built by
the real nvcc (PATH's) for sm_80 and pip-installed from its source directory, the real
`repro pack` and `repro unpack` (offline, into another target). The one TEST DOUBLE is
`nvidia-smi` (this machine has no GPU): tests/support/doubles/nvidia_smi.py, answering
as the H200 it was captured on (9.0). The rebuild runs nvcc for real; the rebuilt .so's
fatbin holds sm_90.
"""

from __future__ import annotations

import json
import os
import subprocess
import tarfile
from dataclasses import dataclass
from pathlib import Path

import pytest

from repro import _toml
from repro.gpu.cubin import elf_archs
from tests.support.cudalib import write_cudalib
from tests.support.doubles.nvidia_smi import (
    H200_LISTING,
    H200_PROBE,
    H200_SUMMARY,
    nvidia_smi_double,
)
from tests.support.run import run, run_repro
from tests.support.venvs import find_python

pytestmark = pytest.mark.slow


@dataclass(frozen=True)
class Packed:
    workspace: Path
    source: Path
    bundle: Path
    gpu_env: dict[str, str]


def _site(python: Path) -> Path:
    return Path(
        run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"]).strip()
    )


@pytest.fixture(scope="module")
def packed(tmp_path_factory: pytest.TempPathFactory) -> Packed:
    root = tmp_path_factory.mktemp("kernels")
    ws = root / "ws"
    venv = ws / "venv"
    run([find_python("3.11"), "-m", "venv", venv])
    python = venv / "bin" / "python"
    run([python, "-m", "pip", "install", "-q", "setuptools", "wheel"], timeout=600)
    source = write_cudalib(root / "src" / "cudalib")
    run(
        [python, "-m", "pip", "install", "-q", "--no-build-isolation", "--no-index", source],
        env={**_environ(), "CUDAARCHS": "80"},
        timeout=600,
    )
    so = _site(python) / "cudalib" / "lib.so"
    assert elf_archs(so) == {"sm_80"}
    bundle = root / "cudalib-1.tar"
    result = run_repro(
        "pack", str(ws), "--wheels", "all", "-o", str(bundle), "--name", "cudalib", "--version", "1"
    )
    assert result.returncode == 0, result.stderr.decode()[-4000:]
    gpu_env = nvidia_smi_double(
        root / "double", listing=H200_LISTING, probe=H200_PROBE, summary=H200_SUMMARY
    )
    return Packed(ws, source, bundle, gpu_env)


def _environ() -> dict[str, str]:
    return dict(os.environ)


def _members(bundle: Path) -> list[str]:
    with tarfile.open(bundle) as archive:
        return [m.name.split("/", 1)[1] for m in archive.getmembers() if m.isfile()]


def _member(bundle: Path, rel: str) -> str:
    with tarfile.open(bundle) as archive:
        name = next(n for n in archive.getnames() if n.split("/", 1)[-1] == rel)
        extracted = archive.extractfile(name)
        assert extracted is not None
        return extracted.read().decode()


def test_pack_carries_the_source(packed: Packed) -> None:
    members = _members(packed.bundle)
    carried = sorted(m for m in members if m.startswith("kernels/"))
    # the tree less its build outputs (pip built it in place: build/, *.egg-info)
    assert carried == [
        "kernels/cudalib/csrc/kernel.cu",
        "kernels/cudalib/cudalib/__init__.py",
        "kernels/cudalib/pyproject.toml",
        "kernels/cudalib/setup.py",
    ]
    sources = _toml.loads(_member(packed.bundle, "env/kernels.toml"))["sources"]
    assert [(s["name"], s["kind"], s["files"]) for s in sources] == [("cudalib", "tree", 4)]
    assert "cudalib 0.1.0: 4 files" in _member(packed.bundle, "REPRODUCE.md")


def _unpack(
    packed: Packed, target: Path, *options: str, timeout: float = 900
) -> subprocess.CompletedProcess[bytes]:
    """`repro unpack` of the packed bundle, offline, no ladder, on the 9.0 test double."""
    return run_repro(
        "unpack",
        str(packed.bundle),
        "--target",
        str(target),
        "--offline",
        "--no-smoke",
        *options,
        env=packed.gpu_env,
        timeout=timeout,
    )


def test_unpack_rebuilds_for_the_gpu_here(packed: Packed, tmp_path: Path) -> None:
    target = tmp_path / "target"
    result = _unpack(packed, target, "--json")
    assert result.returncode == 0, result.stderr.decode()[-6000:]
    report = json.loads(result.stdout)
    step = next(s for s in report["steps"] if s["name"] == "kernels")
    assert step["status"] == "done"
    assert "rebuilt cudalib 0.1.0 for sm_90" in step["detail"]
    python = target / "venv" / "bin" / "python"
    if not python.exists():
        python = next(target.glob("*/bin/python"))
    so = _site(python) / "cudalib" / "lib.so"
    assert "sm_90" in elf_archs(so)
    log = target / ".repro" / "kernels" / "cudalib" / "build.log"
    assert log.is_file() and "CUDAARCHS=90" in log.read_text()
    state = _toml.loads((target / ".repro" / "state.toml").read_text())
    rebuilt = state["facts"]["kernels"]["rebuilt"]
    assert [(r["name"], r["version"], r["archs"]) for r in rebuilt] == [
        ("cudalib", "0.1.0", ["sm_90"])
    ]
    assert len(rebuilt[0]["sha256"]) == 64
    verify = run_repro("verify", str(target), env=packed.gpu_env)
    assert verify.returncode == 0, verify.stdout.decode() + verify.stderr.decode()
    assert "cudalib 0.1.0: rebuilt for this box" in verify.stderr.decode()


def test_never_stops_at_the_preflight(packed: Packed, tmp_path: Path) -> None:
    target = tmp_path / "target"
    result = _unpack(packed, target, "--rebuild-kernels", "never", timeout=600)
    err = result.stderr.decode()
    assert result.returncode != 0
    assert "preflight failed" in err and "cudalib" in err, err[-4000:]
    assert "--rebuild-kernels never" in err
    assert not (target / "venv").exists()
