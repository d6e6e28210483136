"""Small real workspaces and their bundles for the setup_env.sh and tool-wheel tests.

A workspace is a directory holding `venv/`, made with a real interpreter (pyenv's 3.12,
Debian's 3.11) and two real small PyPI packages; it is packed by the real pack, on the
tool's own interpreter (3.11), into a bundle file.
"""

from __future__ import annotations

import tarfile
from pathlib import Path

from repro.snapshot.pack import PackOptions, PackResult, WheelsMode, pack
from tests.snapshot.conftest import make_venv, pip

PACKAGES = ("idna", "six")


def make_workspace(base: Path, python: Path) -> Path:
    """`base`/ws with a venv of `python` holding idna and six."""
    workspace = base / "ws"
    venv = make_venv(python, workspace / "venv")
    pip(venv, "install", "-q", *PACKAGES)
    return workspace


def pack_workspace(
    workspace: Path,
    out: Path,
    *,
    cache: Path,
    wheels: WheelsMode = "auto",
    download: bool = True,
    version: str = "1",
    sign: Path | None = None,
) -> PackResult:
    out.mkdir(parents=True, exist_ok=True)
    result = pack(
        PackOptions(
            source=workspace,
            output=out,
            wheels=wheels,
            download=download,
            cache_dir=cache,
            version=version,
            sign=sign,  # what `repro pack --sign KEY` passes
        )
    )
    assert result.path is not None and result.path.is_file()
    return result


def member_names(bundle: Path) -> list[str]:
    with tarfile.open(bundle) as archive:
        return sorted(m.name for m in archive.getmembers() if m.isfile())


def read_member(bundle: Path, name: str) -> bytes:
    with tarfile.open(bundle) as archive:
        handle = archive.extractfile(name)
        assert handle is not None, name
        return handle.read()
