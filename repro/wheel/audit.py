"""A wheel's central directory read into a checked plan: each member, where it goes.

Nothing is written here. `plan_wheel` reads the central directory and every local
header (no member's data) and refuses, naming the wheel, the member and the rule:

- a zip that is not one, a member that is encrypted, compressed otherwise than stored
  or deflated, listed twice, or whose local header disagrees with the central directory
  (name, method, and, without a data descriptor, CRC-32 and sizes);
- data ranges that overlap each other or the central directory, or run past the file
  (a central directory pointing many entries at one stored member);
- more inflated bytes than `MAX_RATIO` times the compressed ones (past a small floor);
- a member without a RECORD row that hashes it (RECORD and its signatures aside), or
  whose row's size is not the member's;
- a destination the wheel does not own: the venv's own files (`pyvenv.cfg`,
  `bin/python*`, `bin/activate*`, a file where the venv has a directory), what the
  scheme reserves (`TARGET/.repro` for the unpack), another distribution's
  `.dist-info`, anything outside the venv, or one destination twice;
- entry points that are not INI, or whose name or object reference is not plain
  (repro.wheel.entrypoints reads them).

Destinations are judged as paths relative to the venv, normalized (`Member.key`), so a
route through `.data/data/bin/`, `.data/scripts/` or an entry point ends at the same
rule. `Claims` holds the keys of every wheel of one run: a second distribution writing
a path the first one claimed is refused with both names, whatever the order.

In the spirit of pypa/installer's `WheelSource` / `SchemeDictionaryDestination`.
"""

from __future__ import annotations

import hashlib
import itertools
import os
import re
import stat
import struct
import zipfile
import zlib
from dataclasses import dataclass, field
from email.parser import BytesHeaderParser
from pathlib import Path

from packaging.utils import (
    InvalidWheelFilename,
    canonicalize_name,
    parse_wheel_filename,
)
from packaging.version import InvalidVersion

from repro.errors import EntryPointsError, InputError, InstallError
from repro.wheel.entrypoints import ENTRY_POINTS, checked_scripts
from repro.wheel.record import record_rows
from repro.wheel.scheme import SCHEME_KEYS, Scheme

# Inflated bytes allowed per compressed byte over a whole wheel; real wheels stay far
# below (torch's CPU wheel: 3.6x; a wheel of text: under 10x), deflate bombs are ~1000x.
MAX_RATIO = 200
# ...and a floor below which any ratio is fine (a small wheel of repetitive text).
RATIO_FLOOR = 8 * 2**20

# WHEEL, RECORD and entry_points.txt are read into memory: torch's RECORD is 1.5 MB.
MAX_METADATA = 64 * 2**20

_LOCAL_HEADER = struct.Struct("<4sHHHHHIIIHH")
_LOCAL_MAGIC = b"PK\x03\x04"
_ZIP64_EXTRA = 0x0001
_FLAG_ENCRYPTED = 0x1
_FLAG_DESCRIPTOR = 0x8
_FLAG_UTF8 = 0x800
_METHODS = (zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED)
# Hashes a RECORD row may use: hashlib's guaranteed ones, less the broken and the
# variable-length ones.
_HASHES = frozenset(hashlib.algorithms_guaranteed) - {"md5", "sha1", "shake_128", "shake_256"}
_SIGNATURES = ("RECORD.jws", "RECORD.p7s")
_GENERATED = ("INSTALLER", "REQUESTED", "RECORD")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
# The file names in the scripts directory that are the venv's own (lowercase prefixes:
# python, python3, python3.11, activate, activate.fish, Activate.ps1).
_VENV_SCRIPTS = ("python", "activate")


@dataclass(frozen=True)
class Member:
    """One file of the wheel and where it goes."""

    name: str  # as the zip names it
    dest: str  # absolute destination
    record: str  # the path as the installed RECORD lists it (relative to the root)
    key: str  # the destination relative to the venv, normalized: what is claimed
    offset: int  # where its data starts in the wheel
    compressed: int
    size: int
    method: int
    crc: int
    executable: bool
    script: bool  # under `.data/scripts/`: a `#!python` line is rewritten
    digest: str  # RECORD's "algo=urlsafe-b64" for it ("" for a signature of RECORD)


@dataclass(frozen=True)
class Generated:
    """A file the installer writes itself: an entry point's script, INSTALLER..."""

    dest: str
    record: str
    key: str
    content: bytes  # "" for RECORD, written last
    executable: bool


@dataclass(frozen=True)
class WheelPlan:
    wheel: Path
    name: str
    version: str
    dist_info: str
    scheme: Scheme
    members: tuple[Member, ...]
    generated: tuple[Generated, ...]  # RECORD last
    identity: tuple[int, int, int, int]  # st_dev, st_ino, st_size, st_mtime_ns planned

    def destinations(self) -> list[tuple[str, str]]:
        """(destination key, what of the wheel goes there) of every file it writes."""
        return [(m.key, f"member {m.name!r}") for m in self.members] + [
            (g.key, f"{g.record!r} (the installer's)") for g in self.generated
        ]


def refuse(wheel: Path, what: str, rule: str) -> InstallError:
    return InstallError(f"{wheel.name}: {what}: {rule}", hint=_HINT)


_HINT = "the wheel is not one repro installs; rebuild the bundle from a trusted source"


def identity_of(fd: int) -> tuple[int, int, int, int]:
    st = os.fstat(fd)
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)


def plan_wheel(wheel: Path, scheme: Scheme) -> WheelPlan:
    """The checked plan of `wheel` for the venv of `scheme`; see the module's docstring."""
    try:
        parsed = parse_wheel_filename(wheel.name)
    except (InvalidWheelFilename, InvalidVersion) as exc:
        raise refuse(wheel, "file name", f"not a wheel's ({exc})") from exc
    name, version = str(parsed[0]), str(parsed[1])
    with wheel.open("rb") as handle:
        fd = handle.fileno()
        identity = identity_of(fd)
        try:
            with zipfile.ZipFile(handle) as archive:
                infos = archive.infolist()
                end = int(getattr(archive, "start_dir", identity[2]))
                members = _read_members(fd, infos, end, identity[2], wheel)
                return _plan(fd, wheel, name, version, members, scheme, identity)
        except InstallError:
            raise
        except (zipfile.BadZipFile, zipfile.LargeZipFile, EOFError, ValueError) as exc:
            raise refuse(wheel, "archive", f"not a readable zip ({exc})") from exc
        except NotImplementedError as exc:  # zipfile: a version or feature it cannot read
            raise refuse(wheel, "archive", f"a zip feature no installer reads ({exc})") from exc
        except (struct.error, IndexError, OverflowError, zlib.error) as exc:
            raise refuse(wheel, "archive", f"damaged ({exc})") from exc
        except OSError as exc:  # a seek zipfile computed from damaged offsets
            raise refuse(wheel, "archive", f"damaged ({exc.strerror or exc})") from exc


@dataclass(frozen=True)
class _Raw:
    """A member as the central directory and its local header agree it is."""

    name: str
    offset: int
    compressed: int
    size: int
    method: int
    crc: int
    mode: int


def _read_members(
    fd: int, infos: list[zipfile.ZipInfo], cd_start: int, file_size: int, wheel: Path
) -> list[_Raw]:
    seen: set[str] = set()
    raws: list[_Raw] = []
    ranges: list[tuple[int, int, str]] = []
    for info in infos:
        member = info.filename
        if info.orig_filename != member:  # zipfile cut the name at a NUL
            raise refuse(wheel, f"member {info.orig_filename!r}", "is not a safe relative path")
        if member in seen:
            raise refuse(wheel, f"member {member!r}", "listed twice in the central directory")
        seen.add(member)
        if info.flag_bits & _FLAG_ENCRYPTED:
            raise refuse(wheel, f"member {member!r}", "encrypted")
        if info.compress_type not in _METHODS:
            rule = f"compression method {info.compress_type} (a wheel is stored or deflated)"
            raise refuse(wheel, f"member {member!r}", rule)
        start = int(info.header_offset)
        offset = _local_header(fd, info, wheel)
        stop = offset + int(info.compress_size)
        if stop > min(cd_start, file_size):
            raise refuse(wheel, f"member {member!r}", "its data runs past the members' area")
        if info.compress_type == zipfile.ZIP_STORED and info.compress_size != info.file_size:
            raise refuse(wheel, f"member {member!r}", "stored with two different sizes")
        ranges.append((start, stop, member))
        raws.append(
            _Raw(
                member, offset, int(info.compress_size), int(info.file_size),
                info.compress_type, int(info.CRC), info.external_attr >> 16,
            )
        )  # fmt: skip
    ranges.sort()
    for (_, stop, first), (start, _, second) in itertools.pairwise(ranges):
        if start < stop:
            raise refuse(wheel, f"member {second!r}", f"its bytes overlap those of {first!r}")
    _check_ratio(raws, wheel)
    return raws


def _local_header(fd: int, info: zipfile.ZipInfo, wheel: Path) -> int:
    """Where `info`'s data starts, once its local header agrees with the central one."""
    what = f"member {info.filename!r}"
    header = os.pread(fd, _LOCAL_HEADER.size, info.header_offset)
    if len(header) != _LOCAL_HEADER.size or header[:4] != _LOCAL_MAGIC:
        raise refuse(wheel, what, "no local header where the central directory points")
    _, _, flags, method, _, _, crc, csize, usize, nlen, elen = _LOCAL_HEADER.unpack(header)
    start = int(info.header_offset) + _LOCAL_HEADER.size
    raw = os.pread(fd, nlen + elen, start)
    if len(raw) != nlen + elen:
        raise refuse(wheel, what, "the wheel ends inside its local header")
    encoding = "utf-8" if info.flag_bits & _FLAG_UTF8 else "cp437"
    if raw[:nlen].decode(encoding, "replace") != info.orig_filename:
        raise refuse(wheel, what, "its local header names another member")
    if method != info.compress_type:
        raise refuse(wheel, what, "its local header says another compression method")
    if not flags & _FLAG_DESCRIPTOR:
        if csize == 0xFFFFFFFF or usize == 0xFFFFFFFF:
            usize, csize = _zip64_sizes(raw[nlen:], usize, csize)
        if (crc, csize, usize) != (info.CRC, info.compress_size, info.file_size):
            rule = "its local header's CRC-32 or sizes differ from the central directory's"
            raise refuse(wheel, what, rule)
    return start + int(nlen) + int(elen)


def _zip64_sizes(extra: bytes, usize: int, csize: int) -> tuple[int, int]:
    at = 0
    while at + 4 <= len(extra):
        kind, length = struct.unpack_from("<HH", extra, at)
        body = extra[at + 4 : at + 4 + length]
        if kind == _ZIP64_EXTRA:
            values = [v for (v,) in struct.iter_unpack("<Q", body[: len(body) // 8 * 8])]
            if usize == 0xFFFFFFFF and values:
                usize = values.pop(0)
            if csize == 0xFFFFFFFF and values:
                csize = values.pop(0)
            break
        at += 4 + length
    return usize, csize


def _check_ratio(raws: list[_Raw], wheel: Path) -> None:
    inflated = sum(r.size for r in raws)
    compressed = sum(r.compressed for r in raws)
    if inflated <= max(RATIO_FLOOR, MAX_RATIO * compressed):
        return
    worst = max(raws, key=lambda r: r.size / max(r.compressed, 1))
    ratio = worst.size / max(worst.compressed, 1)
    rule = (
        f"inflates {worst.compressed} bytes to {worst.size} ({ratio:.0f}x); the wheel's "
        f"{compressed} compressed bytes would be {inflated} (more than {MAX_RATIO}x)"
    )
    raise refuse(wheel, f"member {worst.name!r}", rule)


# -- member names and destinations ----------------------------------------------------


def _safe_parts(member: str, wheel: Path) -> tuple[str, ...]:
    parts = tuple(member.split("/"))
    bad = (
        member.startswith("/")
        or "\\" in member
        or _CONTROL.search(member) is not None
        or any(part in ("", ".", "..") for part in parts)
    )
    if bad:
        raise refuse(wheel, f"member {member!r}", "is not a safe relative path")
    return parts


def _dist_info(names: list[str], name: str, wheel: Path) -> str:
    """The wheel's one `<name>-<version>.dist-info`; a wheel holds no other."""
    canonical = canonicalize_name(name)
    found = {
        top
        for top, sep, _ in (n.partition("/") for n in names)
        if sep and top.endswith(".dist-info")
    }
    own = {
        t
        for t in found
        if canonicalize_name(t[: -len(".dist-info")].rpartition("-")[0]) == canonical
    }
    if len(own) != 1:
        what = "no" if not own else f"{len(own)}"
        raise refuse(wheel, "dist-info", f"{what} .dist-info directory for {canonical}")
    other = sorted(found - own)
    if other:
        raise refuse(wheel, f"directory {other[0]!r}", "another distribution's .dist-info")
    return own.pop()


@dataclass
class _Layout:
    """The scheme's directories as strings, and what of the venv is its own."""

    scheme: Scheme
    distribution: str
    root: str  # "purelib" or "platlib": where the wheel's root goes
    prefix: str = ""
    bases: dict[str, str] = field(default_factory=dict)
    base_keys: dict[str, str] = field(default_factory=dict)  # relative to the venv
    from_root: dict[str, str] = field(default_factory=dict)  # relative to the root
    scripts_key: str = ""
    venv_dirs: frozenset[str] = frozenset()
    site_keys: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        self.prefix = os.path.normpath(str(self.scheme.data))
        self.bases = {
            k: os.path.normpath(self.scheme.base(k, self.distribution)) for k in SCHEME_KEYS
        }
        self.base_keys = {k: self.key(base) for k, base in self.bases.items()}
        root = self.bases[self.root]
        self.from_root = {
            k: os.path.relpath(base, root).replace(os.sep, "/") for k, base in self.bases.items()
        }
        self.scripts_key = self.base_keys["scripts"]
        dirs: set[str] = set()
        for key in ("purelib", "platlib", "scripts"):
            parts = self.key(self.bases[key]).split("/")
            dirs.update("/".join(parts[: i + 1]) for i in range(len(parts)))
        self.venv_dirs = frozenset(dirs)
        self.site_keys = tuple({self.key(self.bases["purelib"]), self.key(self.bases["platlib"])})

    def key(self, dest: str) -> str:
        """`dest` relative to the venv, normalized; `lib64` is the venv's link to `lib`."""
        rel = os.path.relpath(os.path.normpath(dest), self.prefix).replace(os.sep, "/")
        if rel == "lib64" or rel.startswith("lib64/"):
            rel = "lib" + rel[len("lib64") :]
        return rel

    def where(self, scheme_key: str, rest: str) -> tuple[str, str, str]:
        """(destination, its key, its RECORD path) of `rest` (checked parts joined by
        "/") under the scheme's directory `scheme_key`: string operations only, a wheel
        of torch's size has tens of thousands of members."""
        dest = f"{self.bases[scheme_key]}/{rest}"
        base_key = self.base_keys[scheme_key]
        key = f"{base_key}/{rest}" if base_key != "." else rest
        if key == "lib64" or key.startswith("lib64/"):
            key = "lib" + key[len("lib64") :]
        from_root = self.from_root[scheme_key]
        return dest, key, f"{from_root}/{rest}" if from_root != "." else rest

    def judge(self, key: str, own_dist_info: str) -> str | None:
        """Why the venv's path `key` is not the wheel's to write, or None."""
        if key == ".." or key.startswith("../") or os.path.isabs(key):
            return "outside the venv"
        if key == "pyvenv.cfg":
            return "pyvenv.cfg is the venv's own"
        for reserved, why in self.scheme.reserved:
            if key == reserved or key.startswith(reserved + "/"):
                return f"{reserved}/ is {why}"
        if key in self.venv_dirs or key == "lib":
            return "a directory of the venv itself"
        head, _, base = key.rpartition("/")
        if head == self.scripts_key and base.lower().startswith(_VENV_SCRIPTS):
            return f"{key} is the venv's own (its interpreter or activation scripts)"
        for site in self.site_keys:
            if key.startswith(site + "/"):
                top = key[len(site) + 1 :].partition("/")[0]
                if top.endswith(".dist-info") and top != own_dist_info:
                    return "another distribution's .dist-info"
        return None


def _record_rows(data: bytes, wheel: Path) -> dict[str, tuple[str, str]]:
    """The wheel's RECORD, path -> (hash, size) as written (repro.wheel.record reads it)."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise refuse(wheel, "RECORD", f"not UTF-8 CSV ({exc})") from exc
    listed: dict[str, tuple[str, str]] = {}
    try:
        for line, path, digest, size in record_rows(text, "RECORD"):
            if listed.setdefault(path, (digest, size)) != (digest, size):
                raise refuse(wheel, f"RECORD:{line}", f"{path!r} listed twice, differently")
    except InputError as exc:  # the reader's: RECORD:<line>: <rule>
        raise InstallError(f"{wheel.name}: {exc.message}", hint=_HINT) from exc
    return listed


def _checked_digest(member: _Raw, listed: dict[str, tuple[str, str]], wheel: Path) -> str:
    what = f"member {member.name!r}"
    row = listed.get(member.name)
    if row is None:
        raise refuse(wheel, what, "no RECORD row lists it")
    digest, size = row
    algo, sep, value = digest.partition("=")
    if not sep or algo not in _HASHES or not value:
        raise refuse(wheel, what, f"RECORD hash {digest!r} is not one repro checks")
    if size and size != str(member.size):
        raise refuse(wheel, what, f"RECORD says {size!r} bytes, the wheel holds {member.size}")
    return digest


# -- the plan -------------------------------------------------------------------------


def _read_small(fd: int, raw: _Raw, wheel: Path) -> bytes:
    """A metadata member's bytes (WHEEL, RECORD, entry_points.txt), CRC-checked."""
    if raw.size > MAX_METADATA:
        rule = f"{raw.size} bytes: more than the {MAX_METADATA} repro reads as metadata"
        raise refuse(wheel, f"member {raw.name!r}", rule)
    data = os.pread(fd, raw.compressed, raw.offset)
    if len(data) != raw.compressed:
        raise refuse(wheel, f"member {raw.name!r}", "the wheel ends inside it")
    if raw.method == zipfile.ZIP_DEFLATED:
        inflater = zlib.decompressobj(-15)
        data = inflater.decompress(data, raw.size + 1)
    if len(data) != raw.size or zlib.crc32(data) != raw.crc:
        raise refuse(wheel, f"member {raw.name!r}", "its bytes do not match its CRC-32 or size")
    return data


def _plan(
    fd: int,
    wheel: Path,
    name: str,
    version: str,
    raws: list[_Raw],
    scheme: Scheme,
    identity: tuple[int, int, int, int],
) -> WheelPlan:
    by_name = {r.name: r for r in raws}
    dist_info = _dist_info(list(by_name), name, wheel)
    data_dir = dist_info[: -len(".dist-info")] + ".data"

    def small(member: str) -> bytes:
        raw = by_name.get(f"{dist_info}/{member}")
        if raw is None:
            raise refuse(wheel, f"{dist_info}/{member}", "missing")
        return _read_small(fd, raw, wheel)

    try:
        meta = BytesHeaderParser().parsebytes(small("WHEEL"))
        wheel_version = str(meta.get("Wheel-Version", ""))
        purelib = str(meta.get("Root-Is-Purelib", "")).strip().lower() == "true"
    except (UnicodeError, TypeError, ValueError) as exc:  # a header email cannot decode
        raise refuse(wheel, f"{dist_info}/WHEEL", f"unreadable ({exc})") from exc
    if not wheel_version.strip().startswith("1."):
        raise refuse(wheel, f"{dist_info}/WHEEL", f"Wheel-Version {wheel_version!r}")
    listed = _record_rows(small("RECORD"), wheel)
    root = "purelib" if purelib else "platlib"
    layout = _Layout(scheme, name, root)

    def place(scheme_key: str, rest: str, what: str) -> tuple[str, str, str]:
        dest, key, record = layout.where(scheme_key, rest)
        why = layout.judge(key, dist_info)
        if why is not None:
            raise refuse(wheel, what, f"{key}: {why}")
        return dest, key, record

    skipped = {f"{dist_info}/{g}" for g in _GENERATED}
    members: list[Member] = []
    for raw in raws:
        if raw.name.endswith("/"):
            continue  # a directory entry: directories are made as needed
        parts = _safe_parts(raw.name, wheel)
        what = f"member {raw.name!r}"
        if stat.S_ISLNK(raw.mode):
            raise refuse(wheel, what, "is a symbolic link")
        if raw.name in skipped:
            continue  # RECORD, INSTALLER, REQUESTED: the installer writes its own
        if parts[0] == data_dir:
            if len(parts) < 3 or parts[1] not in SCHEME_KEYS:
                raise refuse(wheel, what, "unknown scheme")
            dest, key, record = place(parts[1], "/".join(parts[2:]), what)
            script = parts[1] == "scripts"
        else:
            dest, key, record = place(root, raw.name, what)
            script = False
        signature = len(parts) == 2 and parts[0] == dist_info and parts[1] in _SIGNATURES
        digest = "" if signature else _checked_digest(raw, listed, wheel)
        executable = script or bool(raw.mode & 0o111)
        members.append(
            Member(
                raw.name, dest, record, key, raw.offset, raw.compressed, raw.size,
                raw.method, raw.crc, executable, script, digest,
            )
        )  # fmt: skip
    generated: list[Generated] = []
    if f"{dist_info}/{ENTRY_POINTS}" in by_name:
        try:
            found = checked_scripts(small(ENTRY_POINTS), ENTRY_POINTS, scheme.version)
        except EntryPointsError as exc:
            raise InstallError(f"{wheel.name}: {exc.message}", hint=_HINT) from exc
        for command, module, attrs in found:
            dest, key, record = place("scripts", command, f"entry point {command!r}")
            content = scheme.script(module, attrs)
            generated.append(Generated(dest, record, key, content, True))
    for extra, content in (
        ("INSTALLER", scheme.installer_line()),
        ("REQUESTED", b""),
        ("RECORD", b""),
    ):
        dest, key, record = place(root, f"{dist_info}/{extra}", f"{dist_info}/{extra}")
        generated.append(Generated(dest, record, key, content, False))
    plan = WheelPlan(
        wheel, name, version, dist_info, scheme, tuple(members), tuple(generated), identity
    )
    Claims().add(plan)  # one destination twice within the wheel, or a file in a file
    return plan


class Claims:
    """The destinations of every wheel of one run, by the distribution that wrote them:
    a later wheel writing a claimed path (or a file where another's is a directory, or
    the reverse) is refused naming both; a refused wheel claims nothing."""

    def __init__(self) -> None:
        self._files: dict[str, tuple[str, str]] = {}  # key -> (distribution, member)
        self._dirs: dict[str, str] = {}  # directory key -> first distribution below it

    def add(self, plan: WheelPlan) -> None:
        dist = f"{plan.name} {plan.version} ({plan.wheel.name})"
        files: dict[str, str] = {}
        dirs: set[str] = set()
        for key, what in plan.destinations():
            earlier = files.get(key)
            if earlier is not None:
                rule = f"{key}: also written by its {earlier}"
                raise refuse(plan.wheel, what, rule)
            files[key] = what
            parent = key.rpartition("/")[0]
            while parent and parent not in dirs:
                dirs.add(parent)
                parent = parent.rpartition("/")[0]
        for key, what in files.items():
            owner = self._files.get(key)
            if owner is not None:
                rule = f"{key} is also written by {owner[0]}, its {owner[1]}"
                raise refuse(plan.wheel, what, rule)
            if key in self._dirs or key in dirs:
                other = self._dirs.get(key, dist)
                raise refuse(plan.wheel, what, f"{key} is a directory of {other}")
        for key in dirs:
            owner = self._files.get(key)
            if owner is not None:
                rule = f"{key} is a file of {owner[0]}, its {owner[1]}"
                raise refuse(plan.wheel, f"directory {key!r}", rule)
        for key, what in files.items():
            self._files[key] = (dist, what)
        for key in dirs:
            self._dirs.setdefault(key, dist)


def check_claims(plans: list[WheelPlan]) -> None:
    """Refuse the run when two of its wheels write one destination."""
    claims = Claims()
    for plan in sorted(plans, key=lambda p: (canonicalize_name(p.name), p.wheel.name)):
        claims.add(plan)
