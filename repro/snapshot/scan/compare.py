"""Patch discovery: compare every installed file with its distribution's RECORD.

A file whose sha256 differs from RECORD is `modified`; a file RECORD lists that is gone is
`deleted`; a file inside a directory the distribution owns that no RECORD lists is `added`.
Not patches: bytecode caches, files RECORD lists without a hash, scripts whose only change is
the `#!` line an installer rewrites, and paths matching the ignore globs.

One module, a little over 400 lines: the walk, the RECORD comparison and the digest
batching share the per-distribution state of one pass over site-packages.
"""

from __future__ import annotations

import errno
import fnmatch
import os
import stat
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

from packaging.utils import canonicalize_name

from repro.archive.tarformat import uncarried_name
from repro.bundle.environment import DistributionFacts, EnvironmentFacts
from repro.bundle.manifest import printable_path
from repro.bundle.patchset import PatchKind
from repro.hashing import (
    HashPipeline,
    HashResult,
    KnownFiles,
    ProgressCallback,
    file_digest,
    link_outside,
)
from repro.wheel.record import RecordEntry, join_record_path, read_record
from repro.wheel.scripts import only_shebang_differs

BYTECODE_SUFFIXES = (".pyc", ".pyo")


@dataclass(frozen=True)
class PatchedFile:
    dist: str
    version: str
    path: str  # relative to site-packages, '/'-separated; may start with '../'
    kind: PatchKind
    pristine_sha256: str | None
    patched_sha256: str | None
    size: int


@dataclass(frozen=True)
class UnreadableFile:
    dist: str
    path: str
    error: str


@dataclass(frozen=True)
class SkippedFile:
    """A file of a distribution the scan did not take: a link out of the venv, a FIFO."""

    dist: str
    path: str
    reason: str

    def describe(self) -> str:
        return f"{self.dist}: {self.path}: {self.reason}"


@dataclass(frozen=True)
class ScanReport:
    dists_scanned: tuple[str, ...]
    dists_skipped: Mapping[str, str]  # name -> why (no RECORD, egg-info, ...)
    files_checked: int
    bytes_checked: int
    patched: tuple[PatchedFile, ...]
    unreadable: tuple[UnreadableFile, ...]
    ambiguous_added: tuple[str, ...] = field(default=())  # added in a shared namespace dir
    site_dirs: Mapping[str, str] = field(default_factory=dict)  # dist name -> its site dir
    digests: Mapping[str, HashResult] = field(default_factory=dict, repr=False)
    """What the scan read, by normalised absolute path: the wheel rebuild reuses it."""
    deferred: frozenset[str] = frozenset()
    """Files read for their CRC-32 only (`defer_sha_from`): their size is RECORD's and
    their digest in `digests` is RECORD's, to be checked by whoever writes them."""
    skipped_files: tuple[SkippedFile, ...] = ()
    """Changed or added files not taken as patches: symbolic links that leave the venv,
    FIFOs, sockets and devices. Never read, never carried."""

    @property
    def clean(self) -> bool:
        return not self.patched

    def by_dist(self) -> dict[str, list[PatchedFile]]:
        grouped: dict[str, list[PatchedFile]] = {}
        for item in self.patched:
            grouped.setdefault(item.dist, []).append(item)
        return grouped


@dataclass(frozen=True, slots=True)
class _Owned:
    dist: DistributionFacts
    entry: RecordEntry


def is_ignored(path: str, patterns: Sequence[str]) -> bool:
    """Bytecode caches always; otherwise a glob on the whole path or on its file name."""
    parts = path.split("/")
    if "__pycache__" in parts or path.endswith(BYTECODE_SUFFIXES):
        return True
    name = parts[-1]
    return any(fnmatch.fnmatchcase(path, p) or fnmatch.fnmatchcase(name, p) for p in patterns)


def select_distributions(
    facts: EnvironmentFacts, packages: Sequence[str] | None
) -> tuple[list[DistributionFacts], dict[str, str]]:
    """The distributions to scan, and those that cannot be scanned with the reason."""
    skipped: dict[str, str] = {}
    wanted = {canonicalize_name(p) for p in packages} if packages else None
    if wanted is not None:
        known = {d.normalized_name for d in facts.distributions}
        for name in sorted(wanted - known):
            skipped[name] = "not installed"
    selected: list[DistributionFacts] = []
    for dist in facts.distributions:
        if wanted is not None and dist.normalized_name not in wanted:
            continue
        if dist.metadata_kind != "dist-info" or not dist.has_record:
            skipped[dist.name] = "no RECORD (egg-info or develop install): cannot be checked"
            continue
        selected.append(dist)
    return selected, skipped


def scan_environment(
    facts: EnvironmentFacts,
    *,
    packages: Sequence[str] | None = None,
    ignore: Sequence[str] = (),
    jobs: int | None = None,
    on_progress: ProgressCallback | None = None,
    crc_for: Collection[str] = (),
    known: KnownFiles | None = None,
    defer_sha_from: int | None = None,
) -> ScanReport:
    """Find every modified, added and deleted file of the selected distributions.

    Files of the distributions named in `crc_for` (normalised names) also get their
    CRC-32 in the same read: the pack rebuilds their wheels from these digests. Files
    `known` vouches for (the scan cache) are not read.

    With `defer_sha_from`, files of the `crc_for` distributions of that many bytes or more
    whose size is RECORD's are read for their CRC-32 only and taken as matching RECORD
    (listed in `deferred`): the pack checks their sha256 as it writes them into the vault
    wheels, in the same read, where the disk rather than the cores binds. A file whose
    size differs from RECORD's is hashed here as any other.
    """
    dists, skipped = select_distributions(facts, packages)
    # string paths here: a venv has ~100k RECORD rows and pathlib costs more than hashing
    owned: dict[str, _Owned] = {}
    listed: set[str] = set()
    direct_owners: dict[str, set[str]] = {}
    top_dirs: dict[str, DistributionFacts] = {}
    all_dists = [d for d in facts.distributions if d.metadata_kind == "dist-info" and d.has_record]
    selected_names = {d.normalized_name for d in dists}
    crc_names = {canonicalize_name(n) for n in crc_for}
    # Files are hashed while the RECORDs are still read and package directories walked:
    # the pool starts on the first distribution's files, largest first by RECORD size.
    with HashPipeline(jobs, known) as pipeline:
        for dist in all_dists:
            # every RECORD is read, so a file another distribution lists is never "added"
            entries = read_record(Path(dist.metadata_dir) / "RECORD")
            name = dist.normalized_name
            selected = name in selected_names
            crc = name in crc_names
            prefix = os.path.normpath(dist.site_dir) + os.sep
            for entry in entries:
                absolute = join_record_path(prefix, entry.path)
                listed.add(absolute)
                direct_owners.setdefault(absolute.rpartition(os.sep)[0], set()).add(name)
                if not selected:
                    continue
                if (
                    entry.sha256 is not None
                    and absolute not in owned
                    and not is_ignored(entry.path, ignore)
                ):
                    owned[absolute] = _Owned(dist, entry)
                    defer = (
                        crc
                        and defer_sha_from is not None
                        and entry.size is not None
                        and entry.size >= defer_sha_from
                    )
                    pipeline.submit(absolute, entry.size or 0, crc, sha=not defer)
                top = _top_directory(entry.path)
                if top is not None:
                    top_dirs.setdefault(prefix + top, dist)
        venv = _real_prefix(facts)
        candidates, ambiguous, skipped_added = _find_added(
            top_dirs, listed, direct_owners, selected_names, ignore, venv
        )
        for path in candidates:
            pipeline.submit(path, 0)
        # Each result is checked against its RECORD row as it comes back and the row let
        # go: at the scan's end (its peak of memory) a file is held once, as its result,
        # not also as the row and the ownership record (~0.4 KB a file).
        check = _Checker(owned, facts, venv)
        hashed = pipeline.finish(on_progress, check)
    patched, unreadable, deferred = check.patched, check.unreadable(), check.deferred
    skipped_files = sorted([*check.skipped, *skipped_added], key=lambda f: (f.dist, f.path))
    checked_files, checked_bytes = check.files, check.bytes
    added = [
        PatchedFile(dist.name, dist.version, relative, "added", None, r.digest, r.size)
        for path, (dist, relative) in candidates.items()
        for r in (hashed[path],)
    ]
    added_bytes = sum(p.size for p in added)
    patched.extend(added)
    return ScanReport(
        dists_scanned=tuple(d.name for d in dists),
        dists_skipped=skipped,
        files_checked=checked_files + len(added),
        bytes_checked=checked_bytes + added_bytes,
        patched=tuple(sorted(patched, key=lambda p: (canonicalize_name(p.dist), p.path))),
        unreadable=tuple(unreadable),
        ambiguous_added=tuple(sorted(ambiguous)),
        site_dirs={d.name: d.site_dir for d in dists},
        digests=_readable(hashed),
        deferred=frozenset(deferred),
        skipped_files=tuple(skipped_files),
    )


def _special(mode: int) -> bool:
    """A FIFO, socket or device: never read (a directory where a file was is unreadable)."""
    return bool(mode) and not stat.S_ISREG(mode) and not stat.S_ISDIR(mode)


def _real_prefix(facts: EnvironmentFacts) -> str:
    return os.path.realpath(facts.python.prefix)


def _interpreters(facts: EnvironmentFacts) -> list[str]:
    """The paths an installer may have written into a script's `#!` line for this
    environment: its interpreter, as named and resolved, and its python, python3, pythonX.Y."""
    scripts = Path(facts.python.scripts)
    major_minor = ".".join(facts.python.version.split(".")[:2])
    names = ["python", "python3", f"python{major_minor}"]
    found = [facts.python.executable, *(str(scripts / n) for n in names)]
    found.append(os.path.realpath(facts.python.executable))
    return list(dict.fromkeys(found))


class _Checker:
    """Judges each result against the RECORD row of its file, as results come back."""

    def __init__(self, owned: dict[str, _Owned], facts: EnvironmentFacts, venv: str) -> None:
        self._owned = owned
        self._venv = venv
        self.skipped: list[SkippedFile] = []
        self._scripts_dir = os.path.normpath(facts.python.scripts)
        self._interpreters = _interpreters(facts)
        self._missing = os.strerror(errno.ENOENT)
        self._unreadable: list[tuple[str, UnreadableFile]] = []
        self.patched: list[PatchedFile] = []
        self.deferred: set[str] = set()
        self.files = 0
        self.bytes = 0

    def unreadable(self) -> list[UnreadableFile]:
        return [item for _, item in sorted(self._unreadable, key=lambda pair: pair[0])]

    def __call__(self, result: HashResult) -> HashResult:
        path = result.path
        item = self._owned.pop(path, None)
        if item is None:  # a file no RECORD lists: judged once every result is in
            return result
        entry = item.entry
        if result.sha_deferred and result.error is None:
            if result.size == entry.size:
                result = replace(result, digest=entry.sha256)
                self.deferred.add(path)
            else:  # changed: hashed here, so it is reported with its digest
                result = file_digest(Path(path))
        if result.digest is None and result.error == self._missing:
            self.patched.append(
                PatchedFile(
                    item.dist.name,
                    item.dist.version,
                    entry.path,
                    "deleted",
                    entry.sha256,
                    None,
                    entry.size or 0,
                )
            )
            return result
        self.files += 1
        if result.digest is None and _special(result.mode):
            self.skipped.append(SkippedFile(item.dist.name, entry.path, result.error or ""))
            return result
        if result.digest is None:
            self._unreadable.append(
                (path, UnreadableFile(item.dist.name, entry.path, result.error or ""))
            )
            return result
        self.bytes += result.size
        if result.digest == entry.sha256:
            return result
        if os.path.dirname(path) == self._scripts_dir and only_shebang_differs(
            Path(path), entry.sha256, self._interpreters, Path(item.dist.metadata_dir)
        ):
            return result
        refused = link_outside(path, self._venv)  # a changed file: is it a link out?
        if refused is not None:
            self.skipped.append(SkippedFile(item.dist.name, entry.path, refused))
            return result
        self.patched.append(
            PatchedFile(
                item.dist.name,
                item.dist.version,
                entry.path,
                "modified",
                entry.sha256,
                result.digest,
                result.size,
            )
        )
        return result


def _readable(hashed: dict[str, HashResult]) -> dict[str, HashResult]:
    """`hashed` without the files that could not be read, in place: a copy of a table of
    every installed file would be alive beside it at the scan's peak of memory."""
    for path in [p for p, r in hashed.items() if r.digest is None]:
        del hashed[path]
    return hashed


def _top_directory(path: str) -> str | None:
    """The top-level directory inside site-packages that holds `path`, if it is a package
    directory (not the dist-info, a .data dir, a bytecode cache or outside site-packages)."""
    if path.startswith("../") or "/" not in path:
        return None
    top = path.split("/", 1)[0]
    if top.endswith((".dist-info", ".data", ".egg-info")) or top == "__pycache__":
        return None
    return top


def _find_added(
    top_dirs: Mapping[str, DistributionFacts],
    listed: set[str],
    direct_owners: Mapping[str, set[str]],
    selected: set[str],
    ignore: Sequence[str],
    venv: str,
) -> tuple[dict[str, tuple[DistributionFacts, str]], list[str], list[SkippedFile]]:
    """Files under the package directories that no RECORD lists, each given to the one
    distribution that owns the nearest directory holding listed files; files in a directory
    several distributions share (a namespace root) are reported as ambiguous, not added.
    Returns the candidates (absolute path -> owner and path relative to site-packages),
    the ambiguous paths, and the files refused by `link_outside` (never read)."""
    candidates: dict[str, tuple[DistributionFacts, str]] = {}  # nested top dirs overlap
    ambiguous: list[str] = []
    refused: list[SkippedFile] = []
    by_name = {d.normalized_name: d for d in top_dirs.values()}
    for top, dist in sorted(top_dirs.items()):
        site = dist.site_dir
        for root, dirnames, filenames in os.walk(top):
            dirnames[:] = sorted(d for d in dirnames if d != "__pycache__")
            for filename in sorted(filenames):
                path = root + os.sep + filename
                if path in listed or path in candidates:
                    continue
                relative = os.path.relpath(path, site).replace(os.sep, "/")
                if is_ignored(relative, ignore):
                    continue
                owners = _nearest_owners(root, site, direct_owners)
                if len(owners) != 1:
                    ambiguous.append(printable_path(relative))
                    continue
                owner = next(iter(owners))
                if owner in selected and owner in by_name:
                    why = uncarried_name(relative) or link_outside(path, venv)
                    if why is not None:
                        shown = printable_path(relative)
                        refused.append(SkippedFile(by_name[owner].name, shown, why))
                        continue
                    candidates[path] = (by_name[owner], relative)
    return candidates, sorted(set(ambiguous)), refused


def _nearest_owners(directory: str, site: str, direct_owners: Mapping[str, set[str]]) -> set[str]:
    current = os.path.normpath(directory)
    prefix = site.rstrip(os.sep) + os.sep
    while current.startswith(prefix):
        owners = direct_owners.get(current)
        if owners:
            return owners
        current = os.path.dirname(current)
    return set()
