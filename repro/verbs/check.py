"""`repro check`: verify a bundle directory, a MANIFEST.sha256 or an archive.

`check_target` decides what kind of target it was given and hands it to the one
function that checks that kind; the CLI renders the resulting CheckReport. A delta
bundle (its bundle.toml has `[base]`, repro.bundle.delta) passes with the members it
takes from its base absent: the report names the base and those members
(`from_base`), and with `CheckOptions.base` they are read from that base and checked
against the delta's manifest too.
"""

from __future__ import annotations

import enum
import os
import stat
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import BinaryIO

from repro.archive.common import detect_compression
from repro.archive.deltabase import mismatched_members, read_base
from repro.archive.reader import iter_members_at
from repro.bundle import layout
from repro.bundle.info import load_bundle_info
from repro.bundle.manifest import (
    MANIFEST_NAME,
    SIGNATURE_SUFFIX,
    ProgressSink,
    parse_manifest,
    path_order,
    read_manifest,
)
from repro.bundle.manifestcheck import CheckReport, Mismatch, compare_digests, excuse_from_base
from repro.bundle.manifesttree import verify_directory
from repro.bundle.signing import SIGNATURE_NAME, SignaturePolicy, verify_signature
from repro.bundle.stream import is_url, open_archive
from repro.errors import ArchiveError, BundleFormatError, InputError, SignatureError
from repro.hashing import hash_spans, sha256_bytes, sha256_stream

ARCHIVE_SUFFIXES = (".tar", ".tar.gz", ".tgz", ".tar.zst", ".tzst")
_SNIFF_BYTES = 64 << 10
MAX_MANIFEST_BYTES = 256 << 20
MAX_SIGNATURE_BYTES = 64 << 10
MAX_BUNDLE_TOML_BYTES = 16 << 20


class TargetKind(enum.Enum):
    DIRECTORY = "directory"
    MANIFEST = "manifest"
    ARCHIVE = "archive"


@dataclass(frozen=True)
class CheckOptions:
    jobs: int | None = None
    progress: ProgressSink | None = None
    signature: SignaturePolicy = field(default_factory=SignaturePolicy)
    base: str | None = None  # a delta's base (archive, URL, directory): check the whole


def check_target(target: str, options: CheckOptions) -> CheckReport:
    """Check TARGET (a bundle directory, a manifest file, an archive or `-`)."""
    options.signature.checked()
    kind = classify_target(target)
    if kind is TargetKind.ARCHIVE:
        return check_archive(target, options)
    if kind is TargetKind.DIRECTORY:
        manifest_path = Path(target) / MANIFEST_NAME
        if not manifest_path.exists():
            raise InputError(
                f"{target}: no {MANIFEST_NAME} in this directory",
                hint="pass a bundle directory (made by `repro pack`) or a manifest file",
            )
    else:
        manifest_path = Path(target)
    _verify_signature_file(manifest_path, options.signature)
    report = verify_directory(
        manifest_path.parent, manifest_path, jobs=options.jobs, on_progress=options.progress
    )
    if report.missing and manifest_path.name == MANIFEST_NAME:
        toml = _small_file(layout.at(manifest_path.parent, layout.BUNDLE_TOML))
        if toml is not None:
            listed = {e.path: e.digest for e in read_manifest(manifest_path).entries}
            return as_delta(report, toml, listed, target, options)
    return report


def check_archive(target: str, options: CheckOptions) -> CheckReport:
    """Verify an archive by streaming its members: nothing is written to disk.

    Every file member is hashed as it streams past; the manifest, which a bundle
    carries last, is parsed when it arrives and compared at the end.
    """
    if target == "-" or is_url(target):
        with open_archive(target) as (remote, name):
            return _check_stream(remote, name, options)
    try:
        stream = open(target, "rb")  # noqa: SIM115 - closed below
    except OSError as exc:
        raise InputError(f"{target}: cannot read: {exc.strerror or exc}") from exc
    with stream:
        if options.progress is not None:
            options.progress.start(os.fstat(stream.fileno()).st_size, 0)
        return _check_stream(stream, target, options)


def _check_stream(stream: BinaryIO, source: str, options: CheckOptions) -> CheckReport:
    digests: dict[str, str] = {}
    manifest_bytes: bytes | None = None
    signature: bytes | None = None
    toml: bytes | None = None
    # An uncompressed tar on disk: one pass over the headers (data skipped by seeking),
    # then the members hashed in parallel with pread. A stream: hashed as it passes.
    spans: list[tuple[str, int, int]] = []
    for member, data, position in iter_members_at(stream, source=source):
        if data is None:
            continue
        if member.name == MANIFEST_NAME:
            manifest_bytes = data.read(MAX_MANIFEST_BYTES + 1)
            if len(manifest_bytes) > MAX_MANIFEST_BYTES:
                raise InputError(f"{source}: {MANIFEST_NAME} is over {MAX_MANIFEST_BYTES} bytes")
            continue
        if member.name == SIGNATURE_NAME:
            signature = data.read(MAX_SIGNATURE_BYTES + 1)
            if len(signature) > MAX_SIGNATURE_BYTES:
                raise SignatureError(f"{source}: {SIGNATURE_NAME} is too large to be a signature")
            continue
        if member.name == layout.BUNDLE_TOML and member.size <= MAX_BUNDLE_TOML_BYTES:
            toml = data.read()
            digests[member.name] = sha256_bytes(toml)
            continue
        if position is not None:
            spans.append((member.name, position, member.size))
            continue
        digest, size = sha256_stream(data)
        digests[member.name] = digest
        if options.progress is not None:
            options.progress.advance(size)
    if spans:
        advance = options.progress.advance if options.progress is not None else None
        try:
            found = hash_spans(
                stream.fileno(),
                [(offset, size) for _, offset, size in spans],
                jobs=options.jobs,
                on_progress=advance,
            )
        except OSError as exc:
            raise ArchiveError(f"{source}: cannot read ({exc.strerror or exc})") from exc
        digests.update((name, digest) for (name, _, _), digest in zip(spans, found, strict=True))
    if manifest_bytes is None:
        raise InputError(
            f"{source}: the archive holds no {MANIFEST_NAME}",
            hint="only bundles made by `repro pack` can be checked",
        )
    verify_signature(manifest_bytes, signature, options.signature, source=source)
    manifest = parse_manifest(manifest_bytes, source=f"{source}:{MANIFEST_NAME}")
    present = set(digests)
    report = compare_digests(manifest, digests, present=present)
    if report.missing and toml is not None:
        listed = {entry.path: entry.digest for entry in manifest.entries}
        return as_delta(report, toml, listed, source, options)
    return report


def as_delta(
    report: CheckReport,
    toml: bytes,
    listed: Mapping[str, str],
    source: str,
    options: CheckOptions,
) -> CheckReport:
    """`report` of a delta bundle: the members it takes from its base are not missing.
    Only a bundle.toml that verified and has `[base]` makes it a delta; the metadata
    every delta carries (`always_carried`) stays missing when absent. With
    `options.base`, those members are read from the base (refused unless it is the
    delta's base) and checked against `listed`, the delta's manifest."""
    if layout.BUNDLE_TOML not in report.verified:
        return report
    try:
        info = load_bundle_info(toml, source=f"{source}: {layout.BUNDLE_TOML}")
    except BundleFormatError:
        return report
    if info.base is None:
        return report
    report = excuse_from_base(report, info.base)
    from_base = report.from_base
    if options.base is None or not from_base:
        return report
    read = read_base(options.base, wanted=from_base, expected=info.base, delta=source)
    wrong = mismatched_members(read, listed)
    bad = {path for path, _, _ in wrong}
    mismatched = report.mismatched + tuple(
        Mismatch(path, expected, actual) for path, expected, actual in wrong
    )
    verified = report.verified + tuple(p for p in from_base if p not in bad)
    return replace(
        report,
        verified=tuple(sorted(verified, key=path_order)),
        mismatched=tuple(sorted(mismatched, key=lambda m: path_order(m.path))),
        base_checked=options.base,
    )


def _small_file(path: Path) -> bytes | None:
    """A bundle directory's bundle.toml, if it is a regular file of a sane size."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return None
    with os.fdopen(fd, "rb") as stream:
        if not stat.S_ISREG(os.fstat(stream.fileno()).st_mode):
            return None
        data = stream.read(MAX_BUNDLE_TOML_BYTES + 1)
    return data if len(data) <= MAX_BUNDLE_TOML_BYTES else None


def _verify_signature_file(manifest_path: Path, policy: SignaturePolicy) -> None:
    """The signature beside a manifest, verified before a single listed file is read."""
    if not policy.active:
        return
    try:
        manifest = manifest_path.read_bytes()
    except OSError as exc:
        raise InputError(f"{manifest_path}: cannot read: {exc.strerror or exc}") from exc
    sig_path = manifest_path.with_name(manifest_path.name + SIGNATURE_SUFFIX)
    signature = sig_path.read_bytes() if sig_path.is_file() else None
    verify_signature(manifest, signature, policy, source=str(manifest_path))


def classify_target(target: str) -> TargetKind:
    """What TARGET is. A regular file is a manifest when its name ends in .sha256 or its
    content reads as checksum lines; a file that is neither is taken for an archive."""
    if target == "-" or is_url(target):
        return TargetKind.ARCHIVE
    path = Path(target)
    try:
        mode = path.stat().st_mode
    except FileNotFoundError as exc:
        raise InputError(f"{target}: no such file or directory") from exc
    except OSError as exc:
        raise InputError(f"{target}: cannot read: {exc.strerror or exc}") from exc
    if stat.S_ISDIR(mode):
        return TargetKind.DIRECTORY
    if not stat.S_ISREG(mode):
        return TargetKind.ARCHIVE  # a pipe or device: only a stream makes sense
    if path.name.endswith(ARCHIVE_SUFFIXES):
        return TargetKind.ARCHIVE
    try:
        with path.open("rb") as stream:
            head = stream.read(_SNIFF_BYTES)
    except OSError as exc:
        raise InputError(f"{target}: cannot read: {exc.strerror or exc}") from exc
    if _is_archive_head(head):
        return TargetKind.ARCHIVE
    if path.name.endswith(".sha256") or _looks_like_manifest(head):
        return TargetKind.MANIFEST
    return TargetKind.ARCHIVE


def _is_archive_head(head: bytes) -> bool:
    try:
        detect_compression(head)
    except ArchiveError:
        return False
    return True


def _looks_like_manifest(head: bytes) -> bool:
    if b"\0" in head:
        return False
    if len(head) == _SNIFF_BYTES:  # the last line may be cut short
        head = head[: head.rfind(b"\n") + 1]
    manifest = parse_manifest(head, source="")
    return bool(manifest.entries or manifest.rejected)
