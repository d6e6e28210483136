"""Where an unpack's packages come from: repro decides, never the lock's own text.

A bundle's `env/requirements.lock` may name the indexes it was packed against
(`--index-url`, `--extra-index-url`, `--find-links` lines written by `repro pack`).
Those lines are read as data, checked here, and put on the installer's argv by repro;
the installer itself is given a lock of `name==version` (+ `--hash`) lines only
(`repro.bundle.lock.render_pins_only`), so it expands no `${VAR}` and takes no option
from the file. Under `--offline` the recorded indexes are not used at all: the vault
is the only source.

A recorded URL must be `https://host/...`: pack never writes `file://` or a local
path as an option line (it keeps them as comments, they do not exist on another box),
strips credentials, and an `http://` index would let anyone on the path choose the
code that is installed.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

from repro.bundle import layout
from repro.bundle.lock import LockFile, LockOption
from repro.errors import BundleFormatError

PYPI = "https://pypi.org/simple"
# What pip and uv would expand or split on, and what no index URL needs.
_UNSAFE = re.compile(r"[\s$`\"'\\<>{}|^\x00-\x1f\x7f]")


@dataclass(frozen=True)
class PackageSources:
    """The sources an install is given, in the order the installer sees them."""

    vault: Path | None
    index_url: str | None  # None: offline
    extra_index_urls: tuple[str, ...] = ()
    find_links: tuple[str, ...] = ()

    @property
    def offline(self) -> bool:
        return self.index_url is None

    def describe(self) -> str:
        parts = [f"vault {self.vault}" if self.vault is not None else "no vault"]
        if self.offline:
            return "; ".join(parts) + "; offline: no index"
        parts.append(f"index {self.index_url}")
        parts += [f"extra index {url}" for url in self.extra_index_urls]
        parts += [f"find-links {url}" for url in self.find_links]
        return "; ".join(parts)


def _problem(url: str) -> str | None:
    """Why `url` is not a usable recorded index URL, or None."""
    if _UNSAFE.search(url):
        return "holds characters no index URL needs (spaces, quotes, `$`, `{`, control)"
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - raises on a malformed port
    except ValueError as exc:
        return f"is not a URL ({exc})"
    if parts.scheme != "https":
        return "is not an https:// URL (repro installs from https indexes only)"
    if not parts.hostname:
        return "names no host"
    if "@" in parts.netloc:
        return "carries credentials (pack strips them; give them through netrc or keyring)"
    return None


def check_lock_options(lock: LockFile, where: str) -> None:
    """Every index line of the lock is an https URL repro can put on argv as it is;
    all bad lines are reported at once, each with its line number."""
    bad = [(option, why) for option in lock.options if (why := _problem(option.value))]
    if bad:
        raise BundleFormatError(
            f"{where}: {layout.REQUIREMENTS_LOCK} names package sources repro will not use:\n"
            + "\n".join(_describe(option, why) for option, why in bad),
            hint="the bundle was changed after packing, or packed against such an index; "
            "repack it with https indexes (or use the vault: pack --wheels all, unpack --offline)",
        )


def _describe(option: LockOption, why: str) -> str:
    shown = option.value.encode("unicode_escape").decode("ascii")
    return f"  - line {option.line}: {option.option} {shown}: {why}"


def package_sources(
    lock: LockFile, *, vault: Path | None, offline: bool, where: str
) -> PackageSources:
    """The sources for installing `lock`: the vault, and online the recorded indexes
    (PyPI when the lock records no `--index-url`, as pip and uv would default)."""
    check_lock_options(lock, where)
    vault = vault if vault is not None and vault.is_dir() else None
    if offline:
        return PackageSources(vault=vault, index_url=None)
    return PackageSources(
        vault=vault,
        index_url=lock.indexes.index_url or PYPI,
        extra_index_urls=lock.indexes.extra_index_urls,
        find_links=lock.indexes.find_links,
    )
