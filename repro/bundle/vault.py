"""env/vault.toml: the wheels a bundle carries, each with why and where it came from.

The one owner of that member: pack dumps it, and unpack, inspect, diff and the SBOM
load it through here.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import tomli_w

from repro import _toml
from repro.errors import BundleFormatError

# The reason of a wheel carried only because the bundle was packed `--wheels all` (an
# index serves it); any other reason says why no index can.
ALL_WHEELS_REASON = "--wheels all"


@dataclass(frozen=True)
class VaultEntry:
    """One wheel listed in env/vault.toml."""

    name: str
    version: str
    filename: str
    sha256: str
    reason: str
    source: str  # original / downloaded / rebuilt / built-from-source

    @property
    def index_serves(self) -> bool:
        """Carried only for an offline install: an index served it at pack time."""
        return self.reason == ALL_WHEELS_REASON


def load_vault(data: bytes, *, source: str) -> tuple[VaultEntry, ...]:
    """Parse env/vault.toml: a list of [[wheels]] tables."""
    try:
        document = _toml.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, _toml.TOMLDecodeError) as exc:
        raise BundleFormatError(f"{source}: not valid TOML: {exc}") from exc
    wheels: Any = document.get("wheels", [])
    if not isinstance(wheels, list):
        raise BundleFormatError(f"{source}: 'wheels' must be an array of tables")
    entries = []
    keys = ("name", "version", "filename", "sha256", "reason", "source")
    for index, table in enumerate(wheels):
        if not isinstance(table, dict) or not all(isinstance(table.get(k), str) for k in keys):
            raise BundleFormatError(
                f"{source}: wheels[{index}] needs string keys {', '.join(keys)}"
            )
        filename = str(table["filename"])
        if not _WHEEL_NAME.fullmatch(filename):
            raise BundleFormatError(
                f"{source}: wheels[{index}].filename {filename!r} is not the name of a "
                "wheel file inside env/wheels/",
                hint="a vault entry names a file in env/wheels/ itself: no '/', no '..'",
            )
        entries.append(VaultEntry(*(str(table[k]) for k in keys)))
    return tuple(entries)


# A wheel's file name, as it lies in env/wheels/: no directory part, no leading dot.
_WHEEL_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+!-]*\.whl")


def is_wheel_filename(name: str) -> bool:
    """Whether `name` may name a file directly inside env/wheels/."""
    return _WHEEL_NAME.fullmatch(name) is not None


def dump_vault(entries: Iterable[VaultEntry]) -> bytes:
    """env/vault.toml for `entries`, sorted by file name; loads back as the same entries."""
    wheels = [
        {
            "name": w.name,
            "version": w.version,
            "filename": w.filename,
            "sha256": w.sha256,
            "reason": w.reason,
            "source": w.source,
        }
        for w in sorted(entries, key=lambda w: w.filename)
    ]
    return tomli_w.dumps({"wheels": wheels}).encode()
