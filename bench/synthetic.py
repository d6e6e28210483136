"""A synthetic environment N times larger than a real one, made of copies of it.

`scaled_workspace` copies a benchmark workspace and, for k in 1..N-1, installs every
distribution of its venv again under another name: `torch` as `torch-copy1`, its files
`torch/...` as `torch_copy1/...`, its RECORD rewritten to the new paths (the digests
still hold: the bytes are the same) and its METADATA's Name changed (RECORD's row for it
recomputed). What `repro pack` and `repro scan` see is a venv of N times the bytes,
files and distributions, each file a real copy (its own inode and pages, not a link), so
reading it costs what reading a venv N times larger costs. Nothing is imported from it:
the copies would shadow nothing (their top-level names are new), and `.pth` files and
files outside site-packages (scripts in bin/) are left out of the copies.
"""

from __future__ import annotations

import csv
import hashlib
import io
import json
import shutil
from pathlib import Path

from bench.envs import Workspace, site_packages
from repro.errors import ReproError
from repro.wheel.record import record_hash

FORMAT = 2  # bump when a copy is laid out differently (cached workspaces are rebuilt)


def _renamed_top(top: str, k: int) -> str:
    """`torch` -> `torch_copy1`, `six.py` -> `six_copy1.py`, `_C.cpython-311-...so` ->
    `_C_copy1.cpython-311-...so`: the first dot-separated part gets the suffix."""
    head, dot, rest = top.partition(".")
    return f"{head}_copy{k}{dot}{rest}"


def copy_distribution(site: Path, dist_info: Path, k: int) -> int:
    """Install `dist_info`'s distribution again as copy `k`; return the bytes copied."""
    name, _, version = dist_info.name.removesuffix(".dist-info").partition("-")
    new_info = f"{name}_copy{k}-{version}.dist-info"
    rows: list[list[str]] = []
    copied = 0
    with (dist_info / "RECORD").open(newline="") as stream:
        records = list(csv.reader(stream))
    for row in records:
        if not row:
            continue
        path = row[0]
        parts = path.split("/")
        if parts[0] == dist_info.name:
            continue  # the dist-info's own files are written below
        if parts[0] in ("..", "") or parts[0].endswith(".pth") or len(row) < 3:
            continue
        source = site / path
        if not source.is_file() or source.is_symlink():
            continue
        if parts[0] == "__pycache__" and len(parts) == 2:  # a top-level module's .pyc
            target_path = f"__pycache__/{_renamed_top(parts[1], k)}"
        else:
            target_path = "/".join([_renamed_top(parts[0], k), *parts[1:]])
        target = site / target_path
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(source, target)
        copied += source.stat().st_size
        rows.append([target_path, row[1], row[2]])
    info_target = site / new_info
    info_target.mkdir()
    for item in sorted(dist_info.iterdir()):
        if item.name == "RECORD" or not item.is_file():
            continue
        data = item.read_bytes()
        if item.name == "METADATA":
            data = _renamed_metadata(data, k, dist_info)
        (info_target / item.name).write_bytes(data)
        rows.append(
            [f"{new_info}/{item.name}", record_hash(hashlib.sha256(data).digest()), str(len(data))]
        )
    rows.append([f"{new_info}/RECORD", "", ""])
    out = io.StringIO()
    csv.writer(out, lineterminator="\n").writerows(rows)
    (info_target / "RECORD").write_text(out.getvalue())
    return copied


def _renamed_metadata(data: bytes, k: int, dist_info: Path) -> bytes:
    lines = data.split(b"\n")
    for index, line in enumerate(lines):
        if line.startswith(b"Name:"):
            lines[index] = line.rstrip() + f"-copy{k}".encode()
            return b"\n".join(lines)
        if not line.strip():
            break  # the headers end at the first blank line
    raise ReproError(f"{dist_info / 'METADATA'}: no Name header")


def scaled_workspace(workspace: Workspace, destination: Path, copies: int) -> Workspace:
    """A copy of `workspace` whose venv holds every distribution `copies` times (cached)."""
    marker = destination / ".bench-ready"
    scaled = Workspace(f"{workspace.size} x{copies}", destination, workspace.packages)
    expected = json.dumps({"copies": copies, "format": FORMAT, "of": str(workspace.root)})
    if marker.exists() and marker.read_text() == expected:
        return scaled
    shutil.rmtree(destination, ignore_errors=True)
    # real copies (copy2), links kept as links: a venv's bin/python is one
    shutil.copytree(
        workspace.root,
        destination,
        symlinks=True,
        ignore=shutil.ignore_patterns(".bench-ready"),
    )
    site = site_packages(scaled.python)
    originals = sorted(site.glob("*.dist-info"))
    if not originals:
        raise ReproError(f"{site}: no installed distributions to copy")
    for k in range(1, copies):
        for dist_info in originals:
            copy_distribution(site, dist_info, k)
    marker.write_text(expected)
    return scaled
