"""A delta's base, read: an archive (a file, `-`, an http(s) or file:// URL) through
the safe reader, or a bundle directory, opened below it without following links.

`read_base` gives the base's identity (`BaseRef`: name and version from its
bundle.toml, the sha256 of its MANIFEST.sha256) and manifest, and, for the members a
caller wants, the sha256 of their bytes as read, written into a directory of the
caller's on request (a staging directory where a full bundle is made from a delta and
its base). The base's bundle.toml is checked against its own manifest: a base whose
bundle.toml is not the one its manifest lists is refused. Nothing here judges the
members against a delta's manifest: the caller compares the digests.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import stat
from collections.abc import Collection, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO
from urllib.parse import unquote, urlsplit

from repro.archive.common import CHUNK
from repro.archive.reader import iter_members
from repro.bundle import layout
from repro.bundle.delta import BaseRef, manifest_digest, refuse_other_base
from repro.bundle.info import BundleInfo, load_bundle_info
from repro.bundle.manifest import Manifest, normalize_path, parse_manifest
from repro.bundle.stream import open_archive
from repro.errors import BundleFormatError, InputError, VerificationError

MAX_METADATA_BYTES = 256 << 20  # a manifest of 200,000 members is about 20 MB


@dataclass(frozen=True)
class BaseBundle:
    """What a base is: its identity, bundle.toml and manifest."""

    source: str
    ref: BaseRef
    info: BundleInfo
    manifest: Manifest

    def digests(self) -> dict[str, str]:
        return {entry.path: entry.digest for entry in self.manifest.entries}


@dataclass(frozen=True)
class BaseRead:
    """A base and the members asked for: path -> sha256 of the bytes read (and written
    where `read_base` was given `into`), with each written file's executable bit."""

    base: BaseBundle
    digests: Mapping[str, str]
    sizes: Mapping[str, int] = field(default_factory=dict)


def local_path(spec: str) -> str:
    """A file:// URL as its path; anything else as given."""
    if spec.startswith("file://"):
        parts = urlsplit(spec)
        if parts.netloc not in ("", "localhost"):
            raise InputError(f"{spec}: a file:// URL must name a local file")
        return unquote(parts.path)
    return spec


def read_base(
    spec: str,
    *,
    wanted: Collection[str] = (),
    into: Path | None = None,
    expected: BaseRef | None = None,
    delta: str = "the delta",
) -> BaseRead:
    """Read the base `spec`; hash (and copy into `into`) each member of `wanted`.

    With `expected` (what a delta's `[base]` says), a base of another name, version or
    manifest is refused (DeltaBaseError, naming both): from a directory before any
    member is read, from an archive as soon as its bundle.toml (name, version) or its
    manifest (at its end) is read. A wanted member the base does not hold is an error."""
    location = local_path(spec)
    remote = location == "-" or location.startswith(("http://", "https://"))
    if not remote and Path(location).is_dir():
        return _read_directory(Path(location), spec, wanted, into, expected, delta)
    return _read_archive(location, spec, wanted, into, expected, delta)


# --- the base's identity --------------------------------------------------------------


def _identity(
    spec: str, toml: bytes | None, manifest_bytes: bytes | None, toml_digest: str | None
) -> BaseBundle:
    if manifest_bytes is None:
        raise InputError(f"{spec}: the base has no {layout.MANIFEST}", hint=_NOT_A_BUNDLE)
    if toml is None:
        raise InputError(f"{spec}: the base has no {layout.BUNDLE_TOML}", hint=_NOT_A_BUNDLE)
    manifest = parse_manifest(manifest_bytes, source=f"{spec}: {layout.MANIFEST}")
    if manifest.rejected or manifest.malformed:
        raise VerificationError(f"{spec}: the base's {layout.MANIFEST} is not a bundle's manifest")
    listed = {entry.path: entry.digest for entry in manifest.entries}
    digest = toml_digest or hashlib.sha256(toml).hexdigest()
    if listed.get(layout.BUNDLE_TOML) != digest:
        raise VerificationError(
            f"{spec}: the base's {layout.BUNDLE_TOML} is not the one its {layout.MANIFEST} lists",
            hint="the base is damaged or was changed after packing; get a good copy",
        )
    info = load_bundle_info(toml, source=f"{spec}: {layout.BUNDLE_TOML}")
    ref = BaseRef(info.name, info.version, manifest_digest(manifest_bytes))
    return BaseBundle(spec, ref, info, manifest)


_NOT_A_BUNDLE = (
    "--base names the bundle a delta is packed against: an archive, a URL or a directory"
)


def _early_check(spec: str, toml: bytes, expected: BaseRef | None, delta: str) -> None:
    """Name and version, from an archive's bundle.toml, before its other members."""
    if expected is None:
        return
    try:
        info = load_bundle_info(toml, source=f"{spec}: {layout.BUNDLE_TOML}")
    except BundleFormatError:
        return  # judged with the manifest, at the end
    if (info.name, info.version) != (expected.name, expected.version):
        found = BaseRef(info.name, info.version, "(not read yet: the manifest comes last)")
        refuse_other_base(expected, found, delta=delta, base=spec)


# --- writing a wanted member ----------------------------------------------------------


class _Sink:
    """Where a wanted member's bytes go: a hash, and a new file below `into`."""

    def __init__(self, into: Path | None, rel: str, executable: bool) -> None:
        self.hash = hashlib.sha256()
        self.size = 0
        self.fd: int | None = None
        if into is not None:
            if normalize_path(rel) != rel:
                raise InputError(f"cannot write base member {rel!r}: not a clean path")
            path = layout.at(into, rel)
            path.parent.mkdir(parents=True, exist_ok=True)
            flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
            self.fd = os.open(path, flags, 0o755 if executable else 0o644)

    def write(self, chunk: bytes) -> None:
        self.hash.update(chunk)
        self.size += len(chunk)
        if self.fd is not None:
            view = memoryview(chunk)
            while view:
                view = view[os.write(self.fd, view) :]

    def close(self) -> str:
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None
        return self.hash.hexdigest()


def _copy(data: BinaryIO, sink: _Sink) -> str:
    try:
        while chunk := data.read(CHUNK):
            sink.write(chunk)
    finally:
        digest = sink.close()
    return digest


def _bounded(data: BinaryIO, spec: str, name: str) -> bytes:
    content = data.read(MAX_METADATA_BYTES + 1)
    if len(content) > MAX_METADATA_BYTES:
        raise InputError(f"{spec}: the base's {name} is over {MAX_METADATA_BYTES} bytes")
    return content


def _missing(spec: str, wanted: Collection[str], found: Collection[str]) -> None:
    absent = sorted(set(wanted) - set(found))
    if absent:
        shown = ", ".join(absent[:5]) + (f" and {len(absent) - 5} more" if len(absent) > 5 else "")
        raise VerificationError(
            f"{spec}: the base does not hold {len(absent)} member(s) the delta takes from "
            f"it: {shown}",
            hint="the base is incomplete (a delta itself, or damaged); pass the full base",
        )


# --- an archive -----------------------------------------------------------------------


def _read_archive(
    location: str,
    spec: str,
    wanted: Collection[str],
    into: Path | None,
    expected: BaseRef | None,
    delta: str,
) -> BaseRead:
    wanted_set = set(wanted)
    toml: bytes | None = None
    manifest_bytes: bytes | None = None
    digests: dict[str, str] = {}
    sizes: dict[str, int] = {}
    with open_archive(location) as (stream, name):
        for member, data in iter_members(stream, source=name):
            if data is None:
                continue
            if member.name == layout.MANIFEST:
                manifest_bytes = _bounded(data, spec, layout.MANIFEST)
            elif member.name == layout.BUNDLE_TOML:
                toml = _bounded(data, spec, layout.BUNDLE_TOML)
                _early_check(spec, toml, expected, delta)
                if member.name in wanted_set:
                    digests[member.name] = hashlib.sha256(toml).hexdigest()
            elif member.name in wanted_set:
                sink = _Sink(into, member.name, member.mode & 0o100 != 0)
                digests[member.name] = _copy(data, sink)
                sizes[member.name] = sink.size
    base = _identity(spec, toml, manifest_bytes, None)
    if expected is not None:
        refuse_other_base(expected, base.ref, delta=delta, base=spec)
    _missing(spec, wanted_set, digests)
    return BaseRead(base, digests, sizes)


# --- a directory ----------------------------------------------------------------------


@contextlib.contextmanager
def _opened_below(root_fd: int, rel: str, spec: str) -> Iterator[tuple[int, os.stat_result]]:
    """`rel` opened below the directory `root_fd`, no component followed as a link."""
    parts = rel.split("/")
    fds: list[int] = []
    try:
        fd = root_fd
        for part in parts[:-1]:
            fd = os.open(part, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=fd)
            fds.append(fd)
        fd = os.open(parts[-1], os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=fd)
        fds.append(fd)
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise InputError(f"{spec}: the base's {rel} is not a regular file")
        yield fd, info
    except FileNotFoundError:
        raise
    except OSError as exc:
        raise InputError(
            f"{spec}: cannot read the base's {rel}: {exc.strerror or exc} (a link, or not readable)"
        ) from exc
    finally:
        for opened in reversed(fds):
            os.close(opened)


def _read_small(root_fd: int, rel: str, spec: str) -> bytes | None:
    try:
        with _opened_below(root_fd, rel, spec) as (fd, _), os.fdopen(os.dup(fd), "rb") as stream:
            return _bounded(stream, spec, rel)
    except FileNotFoundError:
        return None


def _read_directory(
    root: Path,
    spec: str,
    wanted: Collection[str],
    into: Path | None,
    expected: BaseRef | None,
    delta: str,
) -> BaseRead:
    try:
        root_fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError as exc:
        raise InputError(f"{spec}: cannot open the base: {exc.strerror or exc}") from exc
    try:
        toml = _read_small(root_fd, layout.BUNDLE_TOML, spec)
        manifest_bytes = _read_small(root_fd, layout.MANIFEST, spec)
        base = _identity(spec, toml, manifest_bytes, None)
        if expected is not None:
            refuse_other_base(expected, base.ref, delta=delta, base=spec)
        digests: dict[str, str] = {}
        sizes: dict[str, int] = {}
        for rel in sorted(wanted):
            try:
                with (
                    _opened_below(root_fd, rel, spec) as (fd, info),
                    os.fdopen(os.dup(fd), "rb") as stream,
                ):
                    sink = _Sink(into, rel, info.st_mode & 0o100 != 0)
                    digests[rel] = _copy(stream, sink)
                    sizes[rel] = sink.size
            except FileNotFoundError:
                continue  # reported below, with every other absent one
    finally:
        os.close(root_fd)
    _missing(spec, wanted, digests)
    return BaseRead(base, digests, sizes)


def mismatched_members(read: BaseRead, manifest: Mapping[str, str]) -> list[tuple[str, str, str]]:
    """(path, the delta's manifest digest, the base's bytes' digest) of each member read
    from the base that is not what the delta's manifest lists."""
    return sorted(
        (path, manifest.get(path, ""), digest)
        for path, digest in read.digests.items()
        if manifest.get(path) != digest
    )
