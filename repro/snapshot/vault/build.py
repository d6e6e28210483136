"""The wheel vault: wheels for the distributions no recorded index can serve.

A little over 400 lines for a reason: it is the vault's pipeline (select, plan, hash,
build) with the frozen data passed between its stages; where an original wheel comes
from is `repro.snapshot.vault.original`.

`vault_reasons` says why a distribution needs the vault (a local file or directory, a VCS
URL, an editable install, an archive URL, a local version such as `+cu130` the indexes do
not hold). `build_vault` obtains a wheel for each one, cheapest source first:

1. the original wheel, when it is at hand: the `file://` wheel it was installed from, a
   `--find-links` directory or pip's wheel cache, taken only if its RECORD matches the
   installed RECORD;
2. for `--wheels all`, the wheel an index serves (the URL `check_index` found, else
   `pip download` with the target's pip), again only if it matches the install;
3. otherwise the wheel is rebuilt from the installed files (see repro.wheel.rebuild), or, for an
   editable install, built from the project source.

Original and downloaded wheels are stored byte for byte as they are.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from packaging.tags import Tag
from packaging.utils import (
    canonicalize_name,
)
from packaging.version import InvalidVersion, Version

from repro.errors import VaultError
from repro.hashing import default_jobs, sha256_file
from repro.snapshot.facts.indexcheck import IndexReport, check_index, target_tags
from repro.snapshot.facts.installed import InstalledDist
from repro.snapshot.scan.pristine import default_pip_cache
from repro.snapshot.vault.original import (
    fetch_from_indexes,
    file_url_path,
    local_wheels,
    original_at_hand,
)
from repro.wheel.rebuild import (
    BuiltWheel,
    DigestTable,
    PristineSource,
    RebuildPlan,
    build_from_source,
    plan_rebuild,
)
from repro.wheel.scheme import SchemePaths

WheelsMode = Literal["auto", "all", "none"]
WheelSource = Literal["original", "rebuilt", "built-from-source", "downloaded"]

if TYPE_CHECKING:  # requests is slow to import; imported where a page is fetched
    import requests


@dataclass(frozen=True)
class VaultWheel:
    """One wheel in the vault, where it came from and why it is there."""

    name: str
    version: str
    filename: str
    sha256: str
    reason: str
    source: WheelSource


@dataclass(frozen=True)
class VaultReport:
    wheels: list[VaultWheel]
    warnings: list[str] = field(default_factory=list)
    index: IndexReport | None = None


def _is_local_version(version: str) -> bool:
    try:
        return Version(version).local is not None
    except InvalidVersion:
        return False


def vault_reasons(dist: InstalledDist, index_report: IndexReport | None = None) -> list[str]:
    """Why `dist` cannot be installed from the recorded indexes (empty: it can).

    Without an index report, a local version (`+cu130`) counts as not served; with one,
    anything the report lists as missing does.
    """
    reasons: list[str] = []
    served = index_report is not None and index_report.serves(dist.name)
    direct = dist.direct_url or {}
    url = dist.direct_url_str or ""
    if dist.editable:
        reasons.append(f"editable install of {url}")
    elif isinstance(direct.get("vcs_info"), dict):
        vcs = direct["vcs_info"]
        commit = vcs.get("commit_id") or vcs.get("requested_revision") or "?"
        reasons.append(f"installed from {vcs.get('vcs', 'VCS')} URL {url}@{commit}")
    elif url.startswith("file:"):
        kind = "directory" if isinstance(direct.get("dir_info"), dict) else "file"
        reasons.append(f"installed from local {kind} {file_url_path(url)}")
    elif url and not served:
        reasons.append(f"installed from archive URL {url}")
    if not served:
        if index_report is not None and canonicalize_name(dist.name) in index_report.missing:
            reasons.append(f"{dist.name}=={dist.version} is on none of the recorded indexes")
        elif index_report is None and _is_local_version(dist.version):
            reasons.append(
                f"local version {dist.version}: the recorded indexes are not known to hold it"
            )
    return reasons


def _copy_into(source: Path, out_dir: Path) -> tuple[Path, str]:
    """Copy a wheel byte for byte into the vault; return its path and sha256."""
    target = out_dir / source.name
    if source.resolve() != target.resolve():
        shutil.copyfile(source, target)
    return target, sha256_file(target)


@dataclass(frozen=True)
class VaultSelection:
    """Which distributions go into the vault and where each wheel comes from: an existing
    wheel file (original or downloaded), or a build (`to_build`)."""

    mode: WheelsMode
    reasons: Mapping[str, list[str]]
    selected: list[InstalledDist]
    obtained: Mapping[str, tuple[Path, WheelSource]]
    to_build: list[InstalledDist]
    warnings: list[str]
    index: IndexReport | None

    @property
    def rebuilt(self) -> frozenset[str]:
        """Canonical names of the distributions whose wheels are rebuilt from their files."""
        return frozenset(d.canonical_name for d in self.to_build if not d.editable)


@dataclass(frozen=True)
class PlannedWheel:
    """One wheel of the vault before it is written: a file, or a rebuilt wheel's plan."""

    name: str
    version: str
    filename: str
    reason: str
    source: WheelSource
    path: Path | None = None
    plan: RebuildPlan | None = None

    @property
    def size(self) -> int:
        if self.plan is not None:
            return self.plan.size
        assert self.path is not None
        return self.path.stat().st_size

    def sha256(self) -> str:
        if self.plan is not None:
            return self.plan.zip.sha256()
        assert self.path is not None
        return sha256_file(self.path)

    def wheel(self, sha256: str) -> VaultWheel:
        return VaultWheel(self.name, self.version, self.filename, sha256, self.reason, self.source)


@dataclass(frozen=True)
class VaultPlan:
    entries: list[PlannedWheel]
    warnings: list[str]
    index: IndexReport | None


def select_vault(
    dists: Sequence[InstalledDist],
    *,
    mode: WheelsMode,
    work_dir: Path,
    indexes: Sequence[str] = (),
    check_index: bool = False,
    python: Path | None = None,
    tags: Sequence[Tag] | None = None,
    find_links: Sequence[Path] = (),
    pip_cache: Path | None = None,
    download: bool = True,
    session: requests.Session | None = None,
) -> VaultSelection:
    """Decide, without building anything, where each vaulted distribution's wheel comes from.

    Original wheels at hand are used where they lie; downloads land in `work_dir`.
    """
    report: IndexReport | None = None
    warnings: list[str] = []
    if check_index and indexes:
        if tags is None:
            if python is None:
                raise VaultError("--check-index needs the target interpreter to know its tags")
            tags = target_tags(python)
        pins = [(d.name, d.version) for d in dists if not d.editable]
        report = _check(pins, indexes, tags, session)
        warnings += report.errors
    reasons = {d.canonical_name: vault_reasons(d, report) for d in dists}
    if mode == "none":
        for dist in dists:
            if reasons[dist.canonical_name]:
                warnings.append(
                    f"{dist.name} {dist.version}: {'; '.join(reasons[dist.canonical_name])}: "
                    "the target will not be able to install it (--wheels none)"
                )
        return VaultSelection(mode, reasons, [], {}, [], warnings, report)
    selected = [d for d in dists if mode == "all" or reasons[d.canonical_name]]
    originals = local_wheels(find_links, recursive=False)
    cache = pip_cache if pip_cache is not None else default_pip_cache()
    cached = local_wheels([cache / "wheels"], recursive=True) if selected else {}

    obtained: dict[str, tuple[Path, WheelSource]] = {}
    for dist in selected:
        original = original_at_hand(dist, originals, cached)
        if original is not None:
            obtained[dist.canonical_name] = (original, "original")

    if download:
        wanted = [
            d
            for d in selected
            if d.canonical_name not in obtained and not reasons[d.canonical_name] and not d.editable
        ]
        if wanted:
            work_dir.mkdir(parents=True, exist_ok=True)
        fetched = fetch_from_indexes(wanted, work_dir, indexes, report, python, session, warnings)
        obtained.update((name, (path, "downloaded")) for name, path in fetched.items())
    to_build = [d for d in selected if d.canonical_name not in obtained]
    return VaultSelection(mode, reasons, selected, obtained, to_build, warnings, report)


def plan_vault(
    selection: VaultSelection,
    *,
    work_dir: Path,
    python: Path | None = None,
    tags: Sequence[Tag] | None = None,
    scheme: SchemePaths | None = None,
    pristine: Mapping[str, PristineSource] | None = None,
    source_date_epoch: int | None = None,
    jobs: int | None = None,
    digests: DigestTable | None = None,
    consume: bool = False,
) -> VaultPlan:
    """Plan every rebuilt wheel (from the scan's `digests` where it has them; with
    `consume` each entry a wheel's member was planned from is removed) and build
    the editable ones from source into `work_dir`. Nothing is written for a rebuilt wheel:
    its plan is written, or streamed into the bundle, later."""
    warnings = list(selection.warnings)

    def build_one(dist: InstalledDist) -> PlannedWheel | VaultError:
        reason = "; ".join(selection.reasons[dist.canonical_name]) or "--wheels all"
        try:
            if dist.editable:
                built = _build_editable(dist, work_dir, python, scheme, source_date_epoch)
                return PlannedWheel(
                    dist.name, dist.version, built.filename, reason, "built-from-source", built.path
                )
            plan = plan_rebuild(
                dist,
                scheme=scheme,
                pristine=(pristine or {}).get(dist.canonical_name),
                fallback_tags=list(tags or ()),
                source_date_epoch=source_date_epoch,
                digests=digests,
                consume=consume,
            )
        except VaultError as exc:
            return exc
        if plan.unverified:
            warnings.append(
                f"{dist.name}: RECORD lists no hash for {', '.join(plan.unverified)}; "
                "copied into the rebuilt wheel unverified"
            )
        return PlannedWheel(dist.name, dist.version, plan.filename, reason, "rebuilt", plan=plan)

    # Editable distributions are built from source by pip, a process each: in threads.
    # Rebuilt wheels are planned here, one after another: planning is interpreter-bound,
    # and threads only queue on the lock: eight threads were slower than one
    # (bench/gpu/plan_threads.py; figures in bench/README.md).
    with ThreadPoolExecutor(max_workers=jobs or default_jobs()) as pool:
        editables = {
            d.canonical_name: pool.submit(build_one, d) for d in selection.to_build if d.editable
        }
        planned = {d.canonical_name: build_one(d) for d in selection.to_build if not d.editable}
        results = [
            editables[d.canonical_name].result() if d.editable else planned[d.canonical_name]
            for d in selection.to_build
        ]
    failures = [r for r in results if isinstance(r, VaultError)]
    if len(failures) == 1:
        raise failures[0]
    if failures:
        raise VaultError(
            f"{len(failures)} distributions cannot be put into the vault:\n"
            + "\n".join(str(f) for f in failures)
        )
    built = {e.name: e for e in results if isinstance(e, PlannedWheel)}
    entries: list[PlannedWheel] = []
    for dist in selection.selected:
        if dist.canonical_name in selection.obtained:
            path, source = selection.obtained[dist.canonical_name]
            reason = "; ".join(selection.reasons[dist.canonical_name]) or "--wheels all"
            entries.append(PlannedWheel(dist.name, dist.version, path.name, reason, source, path))
        else:
            entries.append(built[dist.name])
    entries.sort(key=lambda e: e.filename)
    return VaultPlan(entries, sorted(set(warnings), key=warnings.index), selection.index)


def hash_vault(entries: Sequence[PlannedWheel], *, jobs: int | None = None) -> list[str]:
    """The sha256 of every entry's wheel, in parallel, largest first (a rebuilt wheel is
    read from the files it is planned from; the page cache usually still holds them)."""
    order = sorted(range(len(entries)), key=lambda i: entries[i].size, reverse=True)
    digests: dict[int, str] = {}
    with ThreadPoolExecutor(max_workers=jobs or default_jobs()) as pool:
        for index, digest in zip(
            order, pool.map(lambda i: entries[i].sha256(), order), strict=True
        ):
            digests[index] = digest
    return [digests[i] for i in range(len(entries))]


def build_vault(
    dists: Sequence[InstalledDist],
    *,
    mode: WheelsMode,
    out_dir: Path,
    indexes: Sequence[str] = (),
    check_index: bool = False,
    python: Path | None = None,
    tags: Sequence[Tag] | None = None,
    scheme: SchemePaths | None = None,
    pristine: Mapping[str, PristineSource] | None = None,
    find_links: Sequence[Path] = (),
    pip_cache: Path | None = None,
    download: bool = True,
    session: requests.Session | None = None,
    source_date_epoch: int | None = None,
    jobs: int | None = None,
) -> VaultReport:
    """Put a wheel for each distribution that needs one into `out_dir`.

    `mode`: "auto" vaults what `vault_reasons` names, "all" every distribution (for
    air-gapped targets), "none" nothing but warns about each distribution the target will
    not be able to install. `python` is the target interpreter (for its tags, pip and
    editable builds). `pristine` maps a canonical distribution name to a callback giving
    pristine bytes of its patched files. `download=False` keeps everything offline.
    (`repro pack` runs the same steps but streams the wheels into the bundle instead.)
    """
    selection = select_vault(
        dists,
        mode=mode,
        work_dir=out_dir,
        indexes=indexes,
        check_index=check_index,
        python=python,
        tags=tags,
        find_links=find_links,
        pip_cache=pip_cache,
        download=download,
        session=session,
    )
    if mode != "none":
        out_dir.mkdir(parents=True, exist_ok=True)
    plan = plan_vault(
        selection,
        work_dir=out_dir,
        python=python,
        tags=tags,
        scheme=scheme,
        pristine=pristine,
        source_date_epoch=source_date_epoch,
        jobs=jobs,
    )
    wheels = [_materialize(entry, out_dir) for entry in plan.entries]
    return VaultReport(wheels, plan.warnings, plan.index)


def _materialize(entry: PlannedWheel, out_dir: Path) -> VaultWheel:
    target = out_dir / entry.filename
    if entry.plan is not None:
        fd, tmp_name = tempfile.mkstemp(prefix=".rebuild-", suffix=".whl", dir=out_dir)
        os.close(fd)
        tmp = Path(tmp_name)
        try:
            digest = entry.plan.zip.write(tmp)
            os.replace(tmp, target)
        finally:
            tmp.unlink(missing_ok=True)
        return entry.wheel(digest)
    assert entry.path is not None
    _path, digest = _copy_into(entry.path, out_dir)
    return entry.wheel(digest)


def _check(
    pins: Sequence[tuple[str, str]],
    indexes: Sequence[str],
    tags: Sequence[Tag],
    session: requests.Session | None,
) -> IndexReport:
    return check_index(pins, indexes, tags=tags, session=session)


def _build_editable(
    dist: InstalledDist,
    out_dir: Path,
    python: Path | None,
    scheme: SchemePaths | None,
    source_date_epoch: int | None,
) -> BuiltWheel:
    source = file_url_path(dist.direct_url_str or "")
    if source is None:
        raise VaultError(f"{dist.dist_info}: editable install without a file:// source")
    interpreter = (
        python
        or (scheme or SchemePaths.for_venv_site_packages(dist.site_packages)).scripts / "python"
    )
    out_dir.mkdir(parents=True, exist_ok=True)
    return build_from_source(source, interpreter, out_dir, source_date_epoch=source_date_epoch)
