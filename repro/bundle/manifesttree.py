"""A directory tree and its MANIFEST.sha256: write the manifest of a tree, verify a
tree against one. Both walk the tree without following links (`scan_tree`) and hash
the files in parallel (`repro.hashing.hash_files`).
"""

from __future__ import annotations

import os
import stat
import tempfile
from collections.abc import Collection, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from types import MappingProxyType

from repro.bundle.manifest import (
    MANIFEST_NAME,
    Manifest,
    ProgressSink,
    RejectedEntry,
    format_manifest,
    path_order,
    read_manifest,
)
from repro.bundle.manifestcheck import CheckReport, compare_digests, exempt_names
from repro.errors import InputError, ManifestError
from repro.hashing import hash_files


@dataclass(frozen=True)
class TreeListing:
    """What a walk of a tree found, by relative `/`-path, without following symlinks."""

    files: frozenset[str]
    sizes: Mapping[str, int]
    nonregular: Mapping[str, str]
    unreadable: Mapping[str, str]


def _kind(mode: int) -> str:
    if stat.S_ISLNK(mode):
        return "symlink"
    if stat.S_ISFIFO(mode):
        return "fifo"
    if stat.S_ISSOCK(mode):
        return "socket"
    if stat.S_ISBLK(mode) or stat.S_ISCHR(mode):
        return "device"
    if stat.S_ISDIR(mode):
        return "directory"
    return "other"


def scan_tree(root: Path) -> TreeListing:
    """Walk root; directories that cannot be listed are `unreadable` (they might hide
    unlisted files). Raises InputError when root itself cannot be listed."""
    sizes: dict[str, int] = {}
    nonregular: dict[str, str] = {}
    unreadable: dict[str, str] = {}
    stack: list[tuple[Path, str]] = [(root, "")]
    while stack:
        directory, prefix = stack.pop()
        try:
            with os.scandir(directory) as entries:
                children = list(entries)
        except OSError as exc:
            if not prefix:
                raise InputError(f"{root}: cannot list directory: {exc.strerror}") from exc
            unreadable[prefix.rstrip("/")] = f"cannot list directory: {exc.strerror}"
            continue
        for child in children:
            relative = prefix + child.name
            try:
                info = child.stat(follow_symlinks=False)
            except OSError as exc:
                unreadable[relative] = exc.strerror or str(exc)
                continue
            mode = info.st_mode
            if stat.S_ISDIR(mode):
                stack.append((Path(child.path), relative + "/"))
            elif stat.S_ISREG(mode):
                sizes[relative] = info.st_size
            else:
                nonregular[relative] = _kind(mode)
    return TreeListing(
        frozenset(sizes),
        MappingProxyType(sizes),
        MappingProxyType(nonregular),
        MappingProxyType(unreadable),
    )


@dataclass(frozen=True)
class _HashPlan:
    to_hash: tuple[tuple[str, Path, int], ...]
    failures: Mapping[str, str]
    escapes: tuple[RejectedEntry, ...]


def _plan_hashing(root: Path, manifest: Manifest, tree: TreeListing) -> _HashPlan:
    """Decide, for each listed path, whether to hash it, and what is wrong if not.
    Only regular files inside the tree (after resolving symlinks) are opened."""
    real_root = root.resolve()
    to_hash: list[tuple[str, Path, int]] = []
    failures: dict[str, str] = {}
    escapes: list[RejectedEntry] = []
    for entry in manifest.entries:
        size = tree.sizes.get(entry.path)
        if size is not None:
            # Found by the walk, which follows no symlink: a regular file inside the tree.
            to_hash.append((entry.path, root / entry.path, size))
            continue
        try:
            resolved = (root / entry.path).resolve()
        except (OSError, RuntimeError) as exc:  # RuntimeError: symlink loop before 3.13
            failures[entry.path] = f"cannot resolve: {exc}"
            continue
        if resolved != real_root and not resolved.is_relative_to(real_root):
            escapes.append(
                RejectedEntry(
                    entry.lineno,
                    entry.path,
                    f"resolves through a symlink to {resolved}, outside the tree",
                )
            )
            continue
        try:
            info = resolved.stat()
        except FileNotFoundError:
            continue  # missing: it is not in `actual` nor in `present`
        except OSError as exc:
            failures[entry.path] = exc.strerror or str(exc)
            continue
        if stat.S_ISREG(info.st_mode):
            to_hash.append((entry.path, resolved, info.st_size))
        elif stat.S_ISDIR(info.st_mode):
            failures[entry.path] = "is a directory"
        else:
            failures[entry.path] = f"not a regular file ({_kind(info.st_mode)})"
    return _HashPlan(tuple(to_hash), MappingProxyType(failures), tuple(escapes))


def verify_directory(
    root: Path,
    manifest_path: Path,
    *,
    jobs: int | None,
    on_progress: ProgressSink | None = None,
    known: Mapping[str, str] | None = None,
    consumed: Collection[str] = (),
) -> CheckReport:
    """Check a tree against a manifest: hash the listed files in parallel and find
    unlisted ones. Raises InputError when the manifest or root cannot be read.

    `known`: digests of files this process itself wrote into `root` (an extraction into
    its private staging directory, hashed as written), by manifest path; they are taken
    instead of read back. Every other listed file is hashed. `consumed`: files of
    `known` this process removed on purpose since it wrote them (a vault wheel unpacked
    as the bundle streamed in): present, with the digest taken as they were written."""
    manifest = read_manifest(manifest_path)
    tree = scan_tree(root)
    plan = _plan_hashing(root, manifest, tree)
    actual: dict[str, str] = {}
    if known:
        actual.update((path, known[path]) for path, _, _ in plan.to_hash if path in known)
        plan = replace(plan, to_hash=tuple(item for item in plan.to_hash if item[0] not in known))
        actual.update((path, known[path]) for path in consumed if path in known)
    if plan.escapes:
        escaped = {r.path for r in plan.escapes}
        manifest = replace(
            manifest,
            entries=tuple(e for e in manifest.entries if e.path not in escaped),
            rejected=manifest.rejected + plan.escapes,
        )
    if on_progress is not None:
        on_progress.start(sum(size for _, _, size in plan.to_hash), len(plan.to_hash))
    results = hash_files(
        [resolved for _, resolved, _ in plan.to_hash],
        jobs=jobs,
        on_progress=on_progress.advance if on_progress is not None else None,
    )
    failures = dict(plan.failures)
    for (path, _, _), result in zip(plan.to_hash, results, strict=True):
        if result.digest is None:
            failures[path] = result.error or "cannot read"
        else:
            actual[path] = result.digest
    failures.update(tree.unreadable)
    return compare_digests(
        manifest,
        actual,
        present=tree.files | {path for path in consumed if known and path in known},
        unreadable=failures,
        nonregular=tree.nonregular,
        exempt=exempt_names(manifest_path.name),
    )


def write_manifest(root: Path, *, jobs: int | None = None) -> Path:
    """Hash every regular file under root and write root/MANIFEST.sha256."""
    exempt = exempt_names(MANIFEST_NAME)
    tree = scan_tree(root)
    for path, kind in sorted(tree.nonregular.items()):
        if path not in exempt:
            raise ManifestError(
                f"{root / path}: is a {kind}, not a regular file; a manifest lists files only",
                hint="replace it with the file it points to, or remove it",
            )
    if tree.unreadable:
        path, reason = min(tree.unreadable.items())
        raise InputError(f"{root / path}: cannot read: {reason}")
    files = sorted((p for p in tree.files if p not in exempt), key=path_order)
    results = hash_files([root / p for p in files], jobs=jobs)
    pairs: list[tuple[str, str]] = []
    for path, result in zip(files, results, strict=True):
        if result.digest is None:
            raise InputError(f"{result.path}: cannot read: {result.error}")
        pairs.append((path, result.digest))
    data = format_manifest(pairs)
    target = root / MANIFEST_NAME
    fd, tmp_name = tempfile.mkstemp(prefix=".MANIFEST.", dir=root)
    try:
        with os.fdopen(fd, "wb") as stream:
            stream.write(data)
        os.chmod(tmp_name, 0o644)
        os.replace(tmp_name, target)
    except OSError as exc:
        Path(tmp_name).unlink(missing_ok=True)
        raise InputError(f"{target}: cannot write manifest: {exc.strerror or exc}") from exc
    return target
