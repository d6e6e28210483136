"""Pristine content of an installed file, for diffs: from a wheel or tree the user names,
from pip's cache, or from the exact wheel downloaded with the target's own pip. Every
candidate is checked against RECORD's sha256 before use."""

from __future__ import annotations

import hashlib
import os
import re
import subprocess
import tempfile
import zipfile
from collections.abc import Mapping
from pathlib import Path

from packaging.utils import canonicalize_name

from repro.diffapply import unified_diff
from repro.snapshot.scan.compare import ScanReport


class PristineCache:
    """Where wheels are looked for and kept, for one pack or scan.

    `python` is the target interpreter (its pip downloads the exact wheel, so the wheel
    matches the target's platform); `workdir` holds the downloads; `pip_cache` is pip's cache
    directory, searched before any download.
    """

    def __init__(
        self,
        python: Path,
        workdir: Path,
        *,
        pip_cache: Path | None = None,
        download: bool = True,
        timeout: float = 300,
        env: Mapping[str, str] | None = None,
    ) -> None:
        self.python = python
        self.workdir = workdir
        self.pip_cache = pip_cache
        self.download = download
        self.timeout = timeout
        self.env = dict(os.environ if env is None else env)
        self._wheels: dict[tuple[str, str], list[Path]] = {}
        self._http_index: dict[str, list[Path]] | None = None

    def wheels(self, dist: str, version: str) -> list[Path]:
        """Candidate wheels of dist==version: cached ones first, then a download."""
        key = (canonicalize_name(dist), version)
        if key not in self._wheels:
            found = self._from_pip_cache(*key)
            if not found and self.download:
                found = self._download(*key)
            self._wheels[key] = found
        return self._wheels[key]

    def _from_pip_cache(self, name: str, version: str) -> list[Path]:
        if self.pip_cache is None or not self.pip_cache.is_dir():
            return []
        stem = f"{name.replace('-', '_')}-{version}-"
        built = [
            p
            for p in sorted((self.pip_cache / "wheels").rglob("*.whl"))
            if p.name.lower().startswith(stem.lower())
        ]
        return built + self._http_cache_index().get(f"{name}=={version}", [])

    def _http_cache_index(self) -> dict[str, list[Path]]:
        """pip's HTTP cache keeps downloaded wheels as `<key>.body` files; index them once by
        the dist-info directory inside each zip."""
        if self._http_index is not None:
            return self._http_index
        index: dict[str, list[Path]] = {}
        assert self.pip_cache is not None
        for body in sorted((self.pip_cache / "http-v2").rglob("*.body")):
            try:
                with body.open("rb") as stream:
                    if stream.read(4) != b"PK\x03\x04":
                        continue
                with zipfile.ZipFile(body) as archive:
                    names = {n.split("/", 1)[0] for n in archive.namelist()}
            except (OSError, zipfile.BadZipFile):
                continue
            for top in names:
                match = re.fullmatch(r"(.+)-([^-]+)\.dist-info", top)
                if match:
                    key = f"{canonicalize_name(match.group(1))}=={match.group(2)}"
                    index.setdefault(key, []).append(body)
        self._http_index = index
        return index

    def _download(self, name: str, version: str) -> list[Path]:
        target = self.workdir / f"{name}-{version}"
        target.mkdir(parents=True, exist_ok=True)
        argv = [
            str(self.python),
            "-m",
            "pip",
            "download",
            "--no-deps",
            "--only-binary=:all:",
            "--disable-pip-version-check",
            "-q",
            "-d",
            str(target),
            f"{name}=={version}",
        ]
        try:
            proc = subprocess.run(
                argv,
                capture_output=True,
                timeout=self.timeout,
                env=self.env,
                stdin=subprocess.DEVNULL,
                check=False,
            )
        except (OSError, subprocess.TimeoutExpired):
            return []
        if proc.returncode != 0:
            return []
        return sorted(target.glob("*.whl"))


def default_pip_cache(environ: Mapping[str, str] | None = None) -> Path:
    """pip's cache directory: $PIP_CACHE_DIR, else $XDG_CACHE_HOME/pip, else ~/.cache/pip."""
    env = os.environ if environ is None else environ
    if env.get("PIP_CACHE_DIR"):
        return Path(env["PIP_CACHE_DIR"])
    base = Path(env["XDG_CACHE_HOME"]) if env.get("XDG_CACHE_HOME") else Path.home() / ".cache"
    return base / "pip"


def _read_member(source: Path, path: str) -> bytes | None:
    if path.startswith("../"):
        return None  # scripts/headers live under .data/ in a wheel, renamed at install
    try:
        if source.is_dir():
            candidate = source / path
            return candidate.read_bytes() if candidate.is_file() else None
        with zipfile.ZipFile(source) as archive:
            return archive.read(path)
    except (OSError, KeyError, zipfile.BadZipFile):
        return None


def pristine_file(
    dist: str,
    version: str,
    path: str,
    *,
    expected_sha256: str | None,
    pristine: Path | None = None,
    cache: PristineCache | None = None,
) -> bytes | None:
    """The original bytes of `path` (relative to site-packages) of dist==version, verified
    against RECORD's sha256; None when no source has them."""
    if expected_sha256 is None:
        return None
    sources: list[Path] = [pristine] if pristine is not None else []
    for source in sources:
        data = _read_member(source, path)
        if data is not None and hashlib.sha256(data).hexdigest() == expected_sha256:
            return data
    if cache is not None:
        for wheel in cache.wheels(dist, version):
            data = _read_member(wheel, path)
            if data is not None and hashlib.sha256(data).hexdigest() == expected_sha256:
                return data
    return None


def make_diff(pristine: bytes, patched: bytes, path: str) -> str:
    """A unified diff `a/path` -> `b/path` that `patch -p1` and `git apply` accept."""
    try:
        old = pristine.decode("utf-8")
        new = patched.decode("utf-8")
    except UnicodeDecodeError:
        return f"Binary files a/{path} and b/{path} differ\n"
    if "\0" in old or "\0" in new:
        return f"Binary files a/{path} and b/{path} differ\n"
    return unified_diff(old, new, path)


def modified_file_diffs(
    report: ScanReport, python: Path, pristine: Path | None = None
) -> dict[str, str | None]:
    """path -> the unified diff of each modified file of a scan against its pristine
    original (from `pristine`, pip's cache, or a wheel downloaded with `python`'s pip
    into a temporary directory); None where the original cannot be had."""
    diffs: dict[str, str | None] = {}
    with tempfile.TemporaryDirectory(prefix="repro-scan-") as workdir:
        cache = PristineCache(python, Path(workdir), pip_cache=default_pip_cache())
        for item in report.patched:
            if item.kind != "modified":
                continue
            original = pristine_file(
                item.dist,
                item.version,
                item.path,
                expected_sha256=item.pristine_sha256,
                pristine=pristine,
                cache=cache,
            )
            site = Path(report.site_dirs[item.dist])
            diffs[item.path] = (
                None
                if original is None
                else make_diff(original, (site / item.path).read_bytes(), item.path)
            )
    return diffs
