"""A bundle as `inspect` and `diff` see it, read without extracting anything to disk.

`load_bundle` reads an archive (a path or `-`) in one streaming pass, or a bundle
directory: every member is hashed, the manifest is verified against those digests, and
the small text members (bundle.toml, env/*.json|toml|lock|txt, the patch set, units,
model files, carried files) are kept in memory. `load_environment` builds the same view
of a live environment from a probe and a RECORD scan, so a bundle can be compared with
the environment it should match.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO, Literal

from packaging.utils import canonicalize_name

from repro.archive.reader import iter_members
from repro.bundle import layout
from repro.bundle.environment import EnvironmentFacts, facts_from_dict
from repro.bundle.info import BundleInfo, SourceInfo, load_bundle_info, source_info
from repro.bundle.kernels import KernelAudit, load_kernels
from repro.bundle.layout import (
    BUNDLE_TOML,
    ENVIRONMENT,
    FILES,
    KERNELS_TOML,
    MODELS,
    PATCHES,
    PATCHES_TOML,
    SERVICES,
    VAULT_TOML,
)
from repro.bundle.limits import KEEP_LIMIT, MANIFEST_LIMIT, PARSED_LIMIT, SHOWN_BUDGET
from repro.bundle.manifest import MANIFEST_NAME, parse_manifest
from repro.bundle.manifestcheck import CheckReport, compare_digests
from repro.bundle.manifesttree import scan_tree
from repro.bundle.patchset import PatchEntry, PatchSet, load_patchset
from repro.bundle.stream import open_archive
from repro.bundle.vault import VaultEntry, load_vault
from repro.errors import InputError
from repro.hashing import hash_files, sha256_bytes, sha256_stream
from repro.snapshot.facts.modulefiles import probe_target
from repro.snapshot.scan.compare import scan_environment
from repro.verbs.check import TargetKind, classify_target

ViewKind = Literal["archive", "directory", "environment"]
# What a view holds in memory is bounded whatever the bundle (repro.bundle.limits): the
# members the verbs parse (below), and those they only show within their budget.
PARSED = frozenset(
    {
        BUNDLE_TOML,
        ENVIRONMENT,
        VAULT_TOML,
        KERNELS_TOML,
        PATCHES_TOML,
        layout.REQUIREMENTS_LOCK,
        layout.PYLOCK,
        layout.PACK_REPORT,
        layout.CACHES_TOML,
    }
)
_PATCH_TEXTS = layout.under(PATCHES)
_SHOWN_PREFIXES = tuple(layout.under(s) for s in (PATCHES, SERVICES, MODELS, FILES))
_KEPT_ENV_SUFFIXES = (".json", ".toml", ".lock", ".txt")


@dataclass(frozen=True)
class MemberInfo:
    size: int
    sha256: str


@dataclass(frozen=True)
class BundleView:
    """What a bundle (or a live environment) holds, for reading and comparing.

    For an environment, `info`, `vault` and `check` are None and `members` is empty:
    only distributions, environment facts and patches can be compared.
    """

    target: str
    kind: ViewKind
    info: BundleInfo | None
    facts: EnvironmentFacts | None
    origin: SourceInfo
    patches: PatchSet
    vault: tuple[VaultEntry, ...] | None
    members: Mapping[str, MemberInfo]  # every file member but the manifest
    contents: Mapping[str, bytes] = field(default_factory=dict)  # the members kept in memory
    check: CheckReport | None = None
    manifest_problem: str | None = None  # why there is no check report
    # members that would be kept but for the budget (MemberBudget): their text unknown
    not_kept: frozenset[str] = frozenset()
    # env/kernels.toml: every distribution's GPU code; None: packed before the audit
    kernels: KernelAudit | None = None

    @property
    def is_bundle(self) -> bool:
        return self.kind != "environment"

    @property
    def label(self) -> str:
        if self.info is not None:
            return f"{self.info.name} {self.info.version}"
        return self.target

    @property
    def verified(self) -> bool:
        return self.check is not None and self.check.passed(ignore_missing=False, strict=False)

    def text(self, rel: str) -> str | None:
        """A kept member decoded as UTF-8; None when absent, not kept or binary."""
        data = self.contents.get(rel)
        if data is None:
            return None
        try:
            return data.decode("utf-8")
        except UnicodeDecodeError:
            return None

    def under(self, prefix: str) -> dict[str, MemberInfo]:
        """Members below `prefix` (e.g. 'services/'), keyed by the rest of their path."""
        return {
            rel[len(prefix) :]: member
            for rel, member in sorted(self.members.items())
            if rel.startswith(prefix)
        }


def should_keep(rel: str, size: int) -> bool:
    """The members worth holding in memory: metadata, patches, units, model and workspace
    files, never wheels or anything large (the budget aside: `MemberBudget`)."""
    if rel in PARSED:
        return size <= PARSED_LIMIT
    if size > KEEP_LIMIT:
        return False
    if rel.startswith(_SHOWN_PREFIXES):
        return True
    return (
        rel.startswith(layout.under(layout.ENV))
        and rel.count("/") == 1
        and rel.endswith(_KEPT_ENV_SUFFIXES)
    )


@dataclass
class MemberBudget:
    """Which members one view keeps in memory, within its fixed budget.

    A parsed member over PARSED_LIMIT (the manifest: MANIFEST_LIMIT) is an error; a
    shown one is kept while its kind's SHOWN_BUDGET lasts, in the order members come,
    and named in `dropped` once it is spent (its text is then not shown)."""

    target: str
    used: dict[str, int] = field(default_factory=dict)
    dropped: set[str] = field(default_factory=set)

    def keep(self, rel: str, size: int) -> bool:
        if rel == MANIFEST_NAME or rel in PARSED:
            limit = MANIFEST_LIMIT if rel == MANIFEST_NAME else PARSED_LIMIT
            if size > limit:
                raise InputError(
                    f"{self.target}:{rel}: {size} bytes, over the {limit >> 20} MiB that "
                    "inspect, diff and sbom read of a member they parse",
                    hint="this is no bundle repro packed; `repro check` verifies it "
                    "without reading it into memory",
                )
            return True
        if not should_keep(rel, size):
            return False
        kind = "patches" if rel.startswith(_PATCH_TEXTS) else "shown"
        used = self.used.get(kind, 0)
        if used + size > SHOWN_BUDGET:
            self.dropped.add(rel)
            return False
        self.used[kind] = used + size
        return True


# --- loading a bundle ---------------------------------------------------------------------


@dataclass
class _Collected:
    budget: MemberBudget
    digests: dict[str, MemberInfo] = field(default_factory=dict)
    contents: dict[str, bytes] = field(default_factory=dict)
    manifest: bytes | None = None
    nonregular: dict[str, str] = field(default_factory=dict)
    unreadable: dict[str, str] = field(default_factory=dict)


def load_bundle(target: str, *, jobs: int | None = None) -> BundleView:
    """Read TARGET: an archive path, `-` for an archive on stdin, an http(s) URL of an
    archive, or a bundle directory (its files hashed by `jobs` threads; an archive is
    one stream, hashed as it is read)."""
    kind = classify_target(target)
    if kind is TargetKind.DIRECTORY:
        collected = _collect_directory(Path(target), jobs=jobs)
        return _from_collected(target, "directory", collected)
    if kind is TargetKind.MANIFEST:
        raise InputError(
            f"{target}: is a manifest, not a bundle",
            hint="pass the bundle archive or the bundle directory",
        )
    with open_archive(target) as (stream, name):
        return _from_collected(name, "archive", _collect_stream(stream, name))


def _collect_stream(stream: BinaryIO, source: str) -> _Collected:
    collected = _Collected(MemberBudget(source))
    for member, data in iter_members(stream, source=source):
        if data is None:
            continue
        keep = collected.budget.keep(member.name, member.size)
        if member.name == MANIFEST_NAME:
            collected.manifest = data.read(member.size)
            continue
        if keep:
            content = data.read(member.size)
            collected.contents[member.name] = content
            collected.digests[member.name] = MemberInfo(len(content), sha256_bytes(content))
        else:
            digest, size = sha256_stream(data)
            collected.digests[member.name] = MemberInfo(size, digest)
    return collected


def _collect_directory(root: Path, *, jobs: int | None = None) -> _Collected:
    """Kept members are read whole; the rest are hashed in parallel. A file that cannot
    be read is reported as unreadable by the manifest check, as `repro check` does."""
    collected = _Collected(MemberBudget(str(root)))
    tree = scan_tree(root)
    collected.nonregular.update(tree.nonregular)
    collected.unreadable.update(tree.unreadable)
    to_hash: list[str] = []
    for rel in sorted(tree.files, key=_parsed_first):
        path = root / rel
        if not collected.budget.keep(rel, tree.sizes[rel]):
            to_hash.append(rel)
            continue
        try:
            content = _read_bounded(path, tree.sizes[rel])
        except OSError as exc:
            if rel == MANIFEST_NAME:
                raise InputError(f"{path}: cannot read: {exc.strerror or exc}") from exc
            collected.unreadable[rel] = exc.strerror or str(exc)
            continue
        if rel == MANIFEST_NAME:
            collected.manifest = content
        else:
            collected.contents[rel] = content
            collected.digests[rel] = MemberInfo(len(content), sha256_bytes(content))
    for rel, result in zip(
        to_hash, hash_files([root / r for r in to_hash], jobs=jobs), strict=True
    ):
        if result.digest is None:
            collected.unreadable[rel] = result.error or "cannot read"
        else:
            collected.digests[rel] = MemberInfo(result.size, result.digest)
    return collected


def _parsed_first(rel: str) -> tuple[bool, str]:
    return rel != MANIFEST_NAME and rel not in PARSED, rel


def _read_bounded(path: Path, size: int) -> bytes:
    """The file's bytes, never more than the size the scan saw (one that grew since is
    read as far as that, and its digest then differs from the manifest's)."""
    with path.open("rb") as stream:
        return stream.read(size)


def _from_collected(target: str, kind: ViewKind, collected: _Collected) -> BundleView:
    contents = collected.contents
    if BUNDLE_TOML not in contents:
        raise InputError(
            f"{target}: holds no {BUNDLE_TOML}",
            hint="only bundles made by `repro pack` can be inspected",
        )
    info = load_bundle_info(contents[BUNDLE_TOML], source=f"{target}:{BUNDLE_TOML}")
    facts = _load_facts(contents.get(ENVIRONMENT), f"{target}:{ENVIRONMENT}")
    patches = PatchSet(())
    if PATCHES_TOML in contents:
        patches = load_patchset(contents[PATCHES_TOML], source=f"{target}:{PATCHES_TOML}")
    vault: tuple[VaultEntry, ...] = ()
    if VAULT_TOML in contents:
        vault = load_vault(contents[VAULT_TOML], source=f"{target}:{VAULT_TOML}")
    kernels = None
    if KERNELS_TOML in contents:
        kernels = load_kernels(contents[KERNELS_TOML], source=f"{target}:{KERNELS_TOML}")
    check: CheckReport | None = None
    problem: str | None = None
    if collected.manifest is None:
        problem = f"no {MANIFEST_NAME}"
    else:
        manifest = parse_manifest(collected.manifest, source=f"{target}:{MANIFEST_NAME}")
        digests = {rel: member.sha256 for rel, member in collected.digests.items()}
        check = compare_digests(
            manifest,
            digests,
            present=digests,
            unreadable=collected.unreadable,
            nonregular=collected.nonregular,
        )
    return BundleView(
        target=target,
        kind=kind,
        info=info,
        facts=facts,
        origin=info.source,
        patches=patches,
        vault=vault,
        members=dict(sorted(collected.digests.items())),
        contents=contents,
        check=check,
        manifest_problem=problem,
        not_kept=frozenset(collected.budget.dropped),
        kernels=kernels,
    )


def _load_facts(data: bytes | None, source: str) -> EnvironmentFacts | None:
    if data is None:
        return None
    try:
        return facts_from_dict(json.loads(data.decode("utf-8")))
    except (UnicodeDecodeError, json.JSONDecodeError, KeyError, TypeError, ValueError) as exc:
        raise InputError(f"{source}: not a valid environment document: {exc!r}") from exc


# --- a live environment -----------------------------------------------------------------------


def load_environment(
    python: Path, *, jobs: int | None = None, import_modules: bool = False
) -> BundleView:
    """A view of the environment of `python` (an interpreter or a venv directory); its key
    modules read from files, or imported in it with `import_modules` (as pack does)."""
    interpreter = python / "bin" / "python" if python.is_dir() else python
    facts = probe_target(interpreter, import_modules=import_modules)
    scan = scan_environment(facts, jobs=jobs)
    entries: list[PatchEntry] = []
    contents: dict[str, bytes] = {}
    budget = MemberBudget(str(interpreter))
    for item in scan.patched:
        if item.path.startswith("../") or "/../" in item.path:
            continue  # outside site-packages: pack does not carry these either
        entry = PatchEntry(
            item.dist,
            item.version,
            item.path,
            item.kind,
            item.pristine_sha256,
            item.patched_sha256,
        )
        entries.append(entry)
        full = entry.full_member
        site = scan.site_dirs.get(item.dist)
        member = layout.in_patches(full) if full is not None else None
        if member is not None and site is not None and budget.keep(member, item.size):
            try:
                contents[member] = _read_bounded(Path(site) / item.path, item.size)
            except OSError as exc:
                where = Path(site) / item.path
                raise InputError(f"{where}: cannot read: {exc.strerror or exc}") from exc
    entries.sort(key=lambda e: (canonicalize_name(e.dist), e.path))
    return BundleView(
        target=str(interpreter),
        kind="environment",
        info=None,
        facts=facts,
        origin=source_info(facts),
        patches=PatchSet(tuple(entries)),
        vault=None,
        members={},
        contents=contents,
    )
