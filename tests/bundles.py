"""Small, valid bundles made by hand (no venv, no pack): the base that hostile and
signing tests change one thing in. Real files, a real manifest, a real archive."""

from __future__ import annotations

import platform
import sys
from collections.abc import Mapping
from pathlib import Path

from repro.archive.writer import write_directory
from repro.bundle.info import BundleInfo, SourceInfo, dump_bundle_info
from repro.bundle.manifest import MANIFEST_NAME
from repro.bundle.manifesttree import write_manifest
from repro.bundle.patchset import dump_patchset
from repro.bundle.signing import SIGNATURE_NAME, sign_manifest

NAME = "demo"
VERSION = "1.0"
TOP = f"{NAME}-{VERSION}"


def bundle_info() -> BundleInfo:
    return BundleInfo(
        name=NAME,
        version=VERSION,
        created="2026-01-01T00:00:00Z",
        tool_version="0.1.0",
        source=SourceInfo(
            python=platform.python_version(),
            implementation=sys.implementation.name,
            platform=sys.platform,
            glibc="2.36",
        ),
    )


def make_bundle_tree(
    root: Path,
    *,
    files: Mapping[str, bytes] = {},
    manifest: bool = True,
    sign_with: Path | None = None,
) -> Path:
    """A valid bundle directory under `root`; `files` adds or replaces members."""
    tree = root / TOP
    members: dict[str, bytes] = {
        "bundle.toml": dump_bundle_info(bundle_info()),
        "env/requirements.lock": b"six==1.16.0\n",
        "patches/patches.toml": dump_patchset([]),
        "files/notes.txt": b"hello\n",
    }
    members.update(files)
    for rel, data in members.items():
        path = tree / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    if manifest:
        write_manifest(tree)
    if sign_with is not None:
        signature = sign_manifest((tree / MANIFEST_NAME).read_bytes(), sign_with)
        (tree / SIGNATURE_NAME).write_bytes(signature)
    return tree


def archive_tree(tree: Path, out: Path) -> Path:
    with out.open("wb") as stream:
        write_directory(tree, stream, top=tree.name, mtime=0)
    return out
