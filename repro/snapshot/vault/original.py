"""The original wheel of an installed distribution, where one can be had.

At hand (the file:// wheel it was installed from, a `--find-links` directory, pip's wheel
cache) or downloaded (the URL an index check found, else `pip download` with the target's
pip); either way it is kept only when its RECORD matches the installed RECORD
(`wheel_matches_install`). `repro.snapshot.vault.build` decides which distributions need one.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import tempfile
import urllib.parse
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from packaging.utils import InvalidWheelFilename, parse_wheel_filename
from packaging.version import InvalidVersion, Version

from repro.errors import VaultError
from repro.hashing import CHUNK_SIZE
from repro.snapshot.facts.indexcheck import IndexFile, IndexReport
from repro.snapshot.facts.installed import InstalledDist
from repro.wheel.rebuild import EXCLUDED_DIST_INFO, wheel_file_tags
from repro.wheel.record import iter_wheel_record, read_dist_record

if TYPE_CHECKING:  # requests costs ~60 ms at start-up; imported where a page is fetched
    import requests

DOWNLOAD_TIMEOUT = 1800.0


def file_url_path(url: str) -> Path | None:
    """The local path of a file:// URL; None for any other scheme."""
    parsed = urllib.parse.urlparse(url)
    if parsed.scheme != "file":
        return None
    return Path(urllib.parse.unquote(parsed.path))


def wheel_matches_install(wheel: Path, dist: InstalledDist) -> bool:
    """Whether a wheel holds exactly the installed files: its RECORD agrees with the
    installed RECORD on every file both hold, and every hashed file installed into
    site-packages is in the wheel (a wheel of the same name and version built without
    a module or a console script is not the original).

    Files outside site-packages (`.data/` scripts get their shebang rewritten at install,
    console scripts are written by the installer) and the files an installer adds to
    `.dist-info` are not compared.
    """
    try:
        wheel_entries = list(iter_wheel_record(wheel))
    except VaultError:
        return False
    installed = {
        entry.path: entry.sha256
        for entry in read_dist_record(dist.dist_info)
        if entry.sha256 is not None and _compared(entry.path)
    }
    in_wheel: dict[str, str] = {}
    for entry in wheel_entries:
        path = _site_packages_path(entry.path)
        if path is None or entry.sha256 is None or not _compared(path):
            continue
        if installed.get(path) != entry.sha256:
            return False
        in_wheel[path] = entry.sha256
    return bool(in_wheel) and in_wheel.keys() >= installed.keys()


def _site_packages_path(wheel_path: str) -> str | None:
    """Where a wheel member lands relative to site-packages; None for `.data/` members
    that land elsewhere (scripts, headers, data)."""
    top, _, rest = wheel_path.partition("/")
    if not top.endswith(".data"):
        return wheel_path
    scheme, _, inner = rest.partition("/")
    return inner if scheme in ("purelib", "platlib") and inner else None


def _compared(path: str) -> bool:
    """Whether an installed RECORD path takes part in matching a wheel to the install."""
    top, _, rest = path.partition("/")
    if top == ".." or path.startswith("/") or "__pycache__/" in path:
        return False
    return not (top.endswith(".dist-info") and rest in EXCLUDED_DIST_INFO)


def _wheel_name_version(path: Path) -> tuple[str, Version] | None:
    try:
        name, version, _build, _tags = parse_wheel_filename(path.name)
    except (InvalidWheelFilename, InvalidVersion):
        return None
    return name, version


def local_wheels(dirs: Iterable[Path], recursive: bool) -> dict[tuple[str, Version], list[Path]]:
    """The wheel files in `dirs` (and below them when `recursive`), by name and version."""
    found: dict[tuple[str, Version], list[Path]] = {}
    for directory in dirs:
        if not directory.is_dir():
            continue
        paths = directory.rglob("*.whl") if recursive else directory.glob("*.whl")
        for path in sorted(paths):
            key = _wheel_name_version(path)
            if key is not None:
                found.setdefault(key, []).append(path)
    return found


def _dist_key(dist: InstalledDist) -> tuple[str, Version] | None:
    try:
        return dist.canonical_name, Version(dist.version)
    except InvalidVersion:
        return None


def _download(item: IndexFile, directory: Path, session: requests.Session, timeout: float) -> Path:
    """Fetch one index file into `directory`, verifying the sha256 the index gave."""
    target = directory / item.filename
    digest = hashlib.sha256()
    local = file_url_path(item.url)
    if local is not None:
        with open(local, "rb") as src, open(target, "wb") as dst:
            for chunk in iter(lambda: src.read(CHUNK_SIZE), b""):
                digest.update(chunk)
                dst.write(chunk)
    else:
        with session.get(item.url, stream=True, timeout=timeout) as response:
            response.raise_for_status()
            with open(target, "wb") as dst:
                for chunk in response.iter_content(CHUNK_SIZE):
                    digest.update(chunk)
                    dst.write(chunk)
    if item.sha256 is not None and digest.hexdigest() != item.sha256:
        target.unlink()
        raise VaultError(f"{item.url}: sha256 {digest.hexdigest()} differs from the index's")
    return target


def _installed_tags(dist: InstalledDist) -> frozenset[str]:
    # expanded, as parse_wheel_filename's are; WHEEL read as the headers it is
    return wheel_file_tags(dist.dist_info / "WHEEL")


def _preferred_index_wheel(dist: InstalledDist, files: Sequence[IndexFile]) -> IndexFile | None:
    """The index wheel the dist was most likely installed from: same tags as its WHEEL."""
    wheels = [f for f in files if f.filename.endswith(".whl")]
    installed = _installed_tags(dist)
    for item in wheels:
        _n, _v, _b, tags = parse_wheel_filename(item.filename)
        if {str(t) for t in tags} == installed:
            return item
    return wheels[0] if wheels else None


def pip_download(
    python: Path,
    requirements: Sequence[str],
    dest: Path,
    *,
    indexes: Sequence[str] = (),
    timeout: float = DOWNLOAD_TIMEOUT,
) -> list[str]:
    """`pip download --no-deps --only-binary=:all:` with the target's pip, in batches.

    One pip run fetches every requirement; when it fails, the batch is split in halves so
    that a few unavailable pins cost a few extra runs, not one run per pin. Returns the
    requirements that could not be downloaded.
    """
    if not requirements:
        return []
    argv = [str(python), "-m", "pip", "download", "--no-deps", "--only-binary=:all:"]
    argv += ["--disable-pip-version-check", "-q", "-d", str(dest)]
    if indexes:
        argv += ["--index-url", indexes[0]]
        for extra in indexes[1:]:
            argv += ["--extra-index-url", extra]
    try:
        proc = subprocess.run(
            [*argv, *requirements], capture_output=True, timeout=timeout, check=False
        )
        ok = proc.returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        ok = False
    if ok:
        return []
    if len(requirements) == 1:
        return list(requirements)
    half = len(requirements) // 2
    return pip_download(
        python, requirements[:half], dest, indexes=indexes, timeout=timeout
    ) + pip_download(python, requirements[half:], dest, indexes=indexes, timeout=timeout)


def original_at_hand(
    dist: InstalledDist,
    find_links: Mapping[tuple[str, Version], list[Path]],
    cached: Mapping[tuple[str, Version], list[Path]],
) -> Path | None:
    """The wheel `dist` was installed from, where one at hand matches the install: its
    file:// URL, else a `--find-links` directory or pip's wheel cache."""
    local = file_url_path(dist.direct_url_str or "")
    if (
        local is not None
        and local.suffix == ".whl"
        and local.is_file()
        and wheel_matches_install(local, dist)
    ):
        return local
    key = _dist_key(dist)
    if key is None:
        return None
    for path in [*find_links.get(key, []), *cached.get(key, [])]:
        if wheel_matches_install(path, dist):
            return path
    return None


def fetch_from_indexes(
    dists: Sequence[InstalledDist],
    out_dir: Path,
    indexes: Sequence[str],
    report: IndexReport | None,
    python: Path | None,
    session: requests.Session | None,
    warnings: list[str],
) -> dict[str, Path]:
    """Download the original wheels of index-served dists; keep those matching the install
    (by canonical name, moved into `out_dir`)."""
    import requests

    fetched: dict[str, Path] = {}
    if not dists:
        return fetched
    with tempfile.TemporaryDirectory(prefix=".download-", dir=out_dir) as tmp:
        staging = Path(tmp)
        remaining: list[InstalledDist] = []
        http = session or requests.Session()
        try:
            for dist in dists:
                files = report.found.get(dist.canonical_name, []) if report else []
                item = _preferred_index_wheel(dist, files)
                if item is None:
                    remaining.append(dist)
                    continue
                try:
                    _download(item, staging, http, DOWNLOAD_TIMEOUT)
                except (requests.RequestException, OSError, VaultError) as exc:
                    warnings.append(f"{dist.name}: download failed, will rebuild: {exc}")
                    remaining.append(dist)
        finally:
            if session is None:
                http.close()
        if remaining and python is not None:
            pip_download(
                python, [f"{d.name}=={d.version}" for d in remaining], staging, indexes=indexes
            )
        downloaded = local_wheels([staging], recursive=False)
        for dist in dists:
            key = _dist_key(dist)
            for path in downloaded.get(key, []) if key else []:
                if wheel_matches_install(path, dist):
                    target = out_dir / path.name
                    os.replace(path, target)
                    fetched[dist.canonical_name] = target
                    break
            else:
                if key in downloaded:
                    warnings.append(
                        f"{dist.name} {dist.version}: the index's wheel differs from the "
                        "installed files; rebuilt from RECORD instead"
                    )
    return fetched
