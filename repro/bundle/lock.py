"""The lock's format: requirements.lock and PEP 751 pylock.toml, rendered and read.

requirements.lock holds one exact `name==version` pin per distribution (normalised names,
sorted), never a `file://` or editable line: distributions no index serves come from the
bundle's wheel vault, which the unpacker adds with `--find-links env/wheels`. Index options
come first; `--hash` options only when every pin has one (pip's all-or-nothing rule).
Pack writes both files (repro.snapshot.stages.locks); unpack and `repro sbom` read them.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import tomli_w
from packaging.utils import canonicalize_name

from repro import __version__, _toml
from repro.bundle import layout
from repro.errors import InputError, PylockError

# A version of PEP 440's characters only: no `${VAR}` for pip or uv to expand.
_PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==([A-Za-z0-9][A-Za-z0-9.+!_-]*)$")
_HASH = re.compile(r"^sha256:[0-9a-f]{64}$")


@dataclass(frozen=True)
class IndexConfig:
    """The package indexes of an environment (read by repro.snapshot.facts.indexes) and of a
    lock: its index options."""

    index_url: str | None = None
    extra_index_urls: tuple[str, ...] = ()
    find_links: tuple[str, ...] = ()
    local: tuple[str, ...] = ()  # file:// URLs and paths: recorded, not portable
    origins: Mapping[str, str] = field(default_factory=dict)  # url -> where it was found


@dataclass(frozen=True)
class Pin:
    name: str  # normalised
    version: str


@dataclass(frozen=True)
class DistFile:
    """A wheel or sdist of a pin: where it lives (URL on an index, or path relative to the
    lock file, e.g. in the vault) and its sha256."""

    filename: str
    sha256: str
    url: str | None = None
    path: str | None = None
    size: int | None = None


@dataclass(frozen=True)
class LockOption:
    """An index option line of a lock: where it is, the option and its value."""

    line: int
    option: str  # --index-url, --extra-index-url or --find-links (-i, -f spelled out)
    value: str


@dataclass(frozen=True)
class LockFile:
    indexes: IndexConfig
    pins: tuple[Pin, ...]
    hashes: Mapping[str, tuple[str, ...]] = field(default_factory=dict)  # name -> sha256 hex
    options: tuple[LockOption, ...] = ()


def render_pins_only(
    lock: LockFile, extra_hashes: Mapping[str, tuple[str, ...]] | None = None
) -> str:
    """The lock as an installer is given it: `name==version` (+ `--hash`) lines and
    nothing else, so that where packages come from is only what repro puts on argv.

    `extra_hashes` (pin name -> sha256 hex) adds digests to a pin's own, for example
    those of the vault's wheels for that pin."""
    lines = []
    for pin in lock.pins:
        digests = list(lock.hashes.get(pin.name, ()))
        for digest in (extra_hashes or {}).get(pin.name, ()):
            if digest not in digests:
                digests.append(digest)
        lines.append(f"{pin.name}=={pin.version}" + "".join(f" --hash=sha256:{d}" for d in digests))
    return "\n".join(lines) + "\n"


def _hashes_complete(pins: Sequence[Pin], hashes: Mapping[str, Sequence[str]] | None) -> bool:
    if not hashes or not pins:
        return False
    normalised: dict[str, Sequence[str]] = {canonicalize_name(k): v for k, v in hashes.items()}
    return all(normalised.get(pin.name) for pin in pins)


def render_requirements_lock(
    pins: Sequence[Pin],
    indexes: IndexConfig,
    *,
    hashes: Mapping[str, Sequence[str]] | None = None,
    source: str = "",
) -> str:
    """The requirements.lock text; `hashes` maps names to sha256 hex digests of acceptable
    files (written only when every pin has at least one)."""
    lines = [
        f"# requirements.lock written by repro {__version__}"
        + (f" from {source}" if source else ""),
        "# Install into a fresh venv with: pip-sync requirements.lock  or  uv pip sync",
        "# requirements.lock; add --find-links env/wheels for the bundle's wheel vault.",
    ]
    for url in indexes.local:
        lines.append(f"# source-only location, not portable: {url}")
    if indexes.index_url:
        lines.append(f"--index-url {indexes.index_url}")
    lines.extend(f"--extra-index-url {url}" for url in indexes.extra_index_urls)
    lines.extend(f"--find-links {url}" for url in indexes.find_links)
    with_hashes = _hashes_complete(pins, hashes)
    normalised: dict[str, list[str]] = {
        canonicalize_name(k): sorted(set(v)) for k, v in (hashes or {}).items()
    }
    for pin in sorted(pins, key=lambda p: p.name):
        line = f"{pin.name}=={pin.version}"
        if with_hashes:
            line += "".join(f" \\\n    --hash=sha256:{digest}" for digest in normalised[pin.name])
        lines.append(line)
    return "\n".join(lines) + "\n"


def render_pylock(
    pins: Sequence[Pin],
    indexes: IndexConfig,
    *,
    requires_python: str,
    files: Mapping[str, Sequence[DistFile]] | None = None,
    index_of: Mapping[str, str] | None = None,
) -> str:
    """The same pins as a PEP 751 pylock.toml, checked by `packaging.pylock` before it is
    returned. `files` maps names to the wheels and sdists known for the pin (URLs on an
    index, or paths relative to the lock file such as the vault's `wheels/<file>`);
    `index_of` names the index a pin's files came from.

    PEP 751 and its installers (uv) need a source per package, so a pin without a known
    file is left out of `packages` and named in `[tool.repro] unlisted`: the file then
    installs only what it lists (requirements.lock still pins everything)."""
    known: dict[str, list[DistFile]] = {
        canonicalize_name(k): list(v) for k, v in (files or {}).items()
    }
    sources: dict[str, str] = {canonicalize_name(k): v for k, v in (index_of or {}).items()}
    packages: list[dict[str, Any]] = []
    unlisted: list[str] = []
    for pin in sorted(pins, key=lambda p: p.name):
        refs = sorted(known.get(pin.name, ()), key=lambda r: r.filename)
        if not refs:
            unlisted.append(pin.name)
            continue
        package: dict[str, Any] = {"name": pin.name, "version": pin.version}
        if pin.name in sources:
            package["index"] = sources[pin.name]
        wheels = [ref for ref in refs if ref.filename.endswith(".whl")]
        sdists = [ref for ref in refs if not ref.filename.endswith(".whl")]
        if sdists:  # PEP 751 holds one sdist per package: the .tar.gz where there are two
            sdist = min(sdists, key=lambda r: (not r.filename.endswith(".tar.gz"), r.filename))
            package["sdist"] = _file_table(sdist)
        if wheels:
            package["wheels"] = [_file_table(ref) for ref in wheels]
        packages.append(package)
    document: dict[str, Any] = {
        "lock-version": "1.0",
        "requires-python": requires_python,
        "created-by": "repro",
        "packages": packages,
    }
    tool: dict[str, Any] = {"version": __version__}
    if indexes.extra_index_urls:
        tool["extra-index-urls"] = list(indexes.extra_index_urls)
    if indexes.find_links:
        tool["find-links"] = list(indexes.find_links)
    if unlisted:
        tool["unlisted"] = unlisted
    document["tool"] = {"repro": tool}
    text = tomli_w.dumps(document)
    check_pylock(text, layout.PYLOCK)
    return text


def check_pylock(text: str, source: str) -> None:
    """Raise PylockError unless `packaging.pylock` accepts `text` as a PEP 751 lock."""
    from packaging.pylock import Pylock, PylockValidationError

    try:
        Pylock.from_dict(_toml.loads(text)).validate()
    except (_toml.TOMLDecodeError, PylockValidationError) as exc:
        raise PylockError(
            f"{source}: not a valid PEP 751 lock: {exc}",
            hint="this is a bug in repro: report it with the environment's pip freeze",
        ) from exc


def _file_table(ref: DistFile) -> dict[str, Any]:
    table: dict[str, Any] = {"name": ref.filename}
    if ref.url:
        table["url"] = ref.url
    if ref.path:
        table["path"] = ref.path
    if ref.size is not None:
        table["size"] = ref.size
    table["hashes"] = {"sha256": ref.sha256}
    return table


# --- reading -------------------------------------------------------------------------------


def _logical_lines(text: str) -> list[tuple[int, str]]:
    """Join backslash continuations; strip comments; keep the first line number."""
    result: list[tuple[int, str]] = []
    pending = ""
    start = 0
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.split(" #", 1)[0] if not raw.lstrip().startswith("#") else ""
        if not pending:
            start = number
        if line.rstrip().endswith("\\"):
            pending += line.rstrip()[:-1] + " "
            continue
        full = (pending + line).strip()
        pending = ""
        if full:
            result.append((start, full))
    if pending.strip():
        result.append((start, pending.strip()))
    return result


def read_requirements_lock(path: Path) -> LockFile:
    """Parse a requirements.lock written by repro (or any pins-only requirements file)."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(f"cannot read {path}: {exc}") from exc
    return parse_requirements_lock(text, source=str(path))


def parse_requirements_lock(text: str, *, source: str) -> LockFile:
    """Parse the text of a requirements.lock; `source` names it in errors."""
    path = source
    index_url: str | None = None
    extras: list[str] = []
    links: list[str] = []
    pins: list[Pin] = []
    options: list[LockOption] = []
    hashes: dict[str, tuple[str, ...]] = {}
    seen: dict[str, int] = {}
    for number, line in _logical_lines(text):
        tokens = line.replace("=", " ", 1).split() if line.startswith("-") else line.split()
        head = tokens[0]
        if head.startswith("-"):
            if len(tokens) != 2:
                raise InputError(f"{path}:{number}: option {head} needs exactly one value")
            if head in ("--index-url", "-i"):
                index_url = tokens[1]
                options.append(LockOption(number, "--index-url", tokens[1]))
            elif head == "--extra-index-url":
                extras.append(tokens[1])
                options.append(LockOption(number, head, tokens[1]))
            elif head in ("--find-links", "-f"):
                links.append(tokens[1])
                options.append(LockOption(number, "--find-links", tokens[1]))
            else:
                raise InputError(
                    f"{path}:{number}: unsupported option {head}",
                    hint="a lock holds only index options and name==version pins",
                )
            continue
        match = _PIN.match(head)
        if match is None:
            raise InputError(
                f"{path}:{number}: {head!r} is not an exact pin (name==version)",
                hint="editable, file:// and ranged requirements do not belong in a lock",
            )
        name: str = canonicalize_name(match.group(1))
        if name in seen:
            raise InputError(
                f"{path}:{number}: {name} is pinned twice (first on line {seen[name]})"
            )
        seen[name] = number
        digests: list[str] = []
        for option in tokens[1:]:
            value = option.removeprefix("--hash=")
            if not option.startswith("--hash=") or not _HASH.match(value):
                raise InputError(f"{path}:{number}: {option!r} is not --hash=sha256:<64 hex>")
            digests.append(value.removeprefix("sha256:"))
        if digests:
            hashes[name] = tuple(digests)
        pins.append(Pin(name, match.group(2)))
    if hashes and len(hashes) != len(pins):
        unhashed = sorted(p.name for p in pins if p.name not in hashes)
        raise InputError(
            f"{path}: some pins have --hash and some do not ({', '.join(unhashed[:5])}); "
            "pip refuses such a file"
        )
    indexes = IndexConfig(
        index_url=index_url, extra_index_urls=tuple(extras), find_links=tuple(links)
    )
    return LockFile(indexes=indexes, pins=tuple(pins), hashes=hashes, options=tuple(options))
