"""Installed distributions as seen on disk, and the install scheme of a target interpreter.

Kept small and file-based: the probe reports the same facts from inside the target
interpreter; this module reads `*.dist-info` directories directly so the vault can work
on a site-packages directory alone.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from email.message import Message
from email.parser import HeaderParser
from pathlib import Path
from typing import Any

from packaging.utils import canonicalize_name

from repro.errors import InputError, ProbeError
from repro.interpreter import run_target_script
from repro.redaction import scrub_document
from repro.wheel.scheme import SchemePaths

PROBE_TIMEOUT = 60.0


@dataclass(frozen=True)
class InstalledDist:
    """One installed distribution, read from its `.dist-info` directory."""

    name: str
    version: str
    dist_info: Path
    site_packages: Path
    direct_url: dict[str, Any] | None
    editable: bool
    installer: str | None

    @property
    def canonical_name(self) -> str:
        return canonicalize_name(self.name)

    @property
    def direct_url_str(self) -> str | None:
        if self.direct_url is None:
            return None
        url = self.direct_url.get("url")
        return url if isinstance(url, str) else None


def scheme_paths(python: Path, *, timeout: float = PROBE_TIMEOUT) -> SchemePaths:
    """Ask a target interpreter where it installs purelib, platlib, scripts and data
    (site on: a venv's `sys.prefix` is set by site.py)."""
    proc = run_target_script(python, "scheme.py", timeout=timeout, site=True)
    if proc.returncode != 0:
        raise ProbeError(
            f"{python} failed to report its install scheme (exit {proc.returncode}): "
            + proc.stderr.strip()[-500:]
        )
    try:
        data = json.loads(proc.stdout)
        return SchemePaths.from_sysconfig(data)
    except (ValueError, KeyError, TypeError) as exc:
        raise ProbeError(f"{python} printed an unreadable install scheme: {exc}") from exc


_HEADERS_END = re.compile(r"\r?\n\r?\n")


def read_metadata_headers(dist_info: Path) -> Message:
    """The header fields of a distribution's METADATA (its description left unread)."""
    metadata = dist_info / "METADATA"
    try:
        text = metadata.read_text(encoding="utf-8", errors="surrogateescape")
    except OSError as exc:
        raise InputError(f"{metadata}: cannot read: {exc.strerror or exc}") from exc
    # The headers end at the first empty line; the description after it can be long (the
    # feed parser read every line of it, a large part of `pack --wheels none` on a CUDA
    # venv under cProfile: bench/README.md)
    end = _HEADERS_END.search(text)
    return HeaderParser().parsestr(text if end is None else text[: end.start() + 1])


def read_metadata_name_version(dist_info: Path) -> tuple[str, str]:
    headers = read_metadata_headers(dist_info)
    metadata = dist_info / "METADATA"
    name, version = headers.get("Name"), headers.get("Version")
    if not name or not version:
        raise InputError(f"{metadata}: no Name or Version header")
    return str(name), str(version)


def _read_optional_text(path: Path) -> str | None:
    try:
        return path.read_text(encoding="utf-8").strip()
    except (OSError, UnicodeDecodeError):
        return None


def read_dist(dist_info: Path, site_packages: Path) -> InstalledDist:
    name, version = read_metadata_name_version(dist_info)
    direct_url: dict[str, Any] | None = None
    raw = _read_optional_text(dist_info / "direct_url.json")
    if raw is not None:
        try:
            loaded = json.loads(raw)
        except ValueError as exc:
            raise InputError(f"{dist_info / 'direct_url.json'}: not JSON: {exc}") from exc
        if isinstance(loaded, dict):
            direct_url = scrub_document(loaded)  # no URL credentials past this point
    editable = False
    if direct_url is not None:
        dir_info = direct_url.get("dir_info")
        editable = isinstance(dir_info, dict) and bool(dir_info.get("editable"))
    return InstalledDist(
        name=name,
        version=version,
        dist_info=dist_info,
        site_packages=site_packages,
        direct_url=direct_url,
        editable=editable,
        installer=_read_optional_text(dist_info / "INSTALLER"),
    )


def list_installed(site_packages: Path) -> list[InstalledDist]:
    """Every `*.dist-info` distribution in a site-packages directory, sorted by name."""
    if not site_packages.is_dir():
        raise InputError(f"{site_packages}: not a directory")
    dists = [
        read_dist(dist_info, site_packages)
        for dist_info in sorted(site_packages.glob("*.dist-info"))
        if dist_info.is_dir()
    ]
    return sorted(dists, key=lambda d: d.canonical_name)
