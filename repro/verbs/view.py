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
from repro.bundle.info import BundleInfo, SourceInfo, load_bundle_info
from repro.bundle.layout import (
    BUNDLE_TOML,
    ENVIRONMENT,
    FILES,
    MODELS,
    PATCHES,
    PATCHES_TOML,
    SERVICES,
    VAULT_TOML,
)
from repro.bundle.manifest import MANIFEST_NAME, parse_manifest
from repro.bundle.manifestcheck import CheckReport, compare_digests
from repro.bundle.manifesttree import scan_tree
from repro.bundle.patchset import PatchEntry, PatchSet, load_patchset
from repro.bundle.stream import open_archive
from repro.bundle.vault import VaultEntry, load_vault
from repro.errors import InputError
from repro.hashing import hash_files, sha256_bytes, sha256_stream
from repro.snapshot.environment import EnvironmentFacts, facts_from_dict
from repro.snapshot.modulefiles import probe_target
from repro.snapshot.pack import source_info
from repro.snapshot.scan import scan_environment
from repro.verbs.check import TargetKind, classify_target

ViewKind = Literal["archive", "directory", "environment"]
KEEP_LIMIT = 2 << 20  # members larger than this are hashed but not kept in memory
_KEPT_PREFIXES = tuple(layout.under(s) for s in (PATCHES, SERVICES, MODELS, FILES))
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
    files, never wheels or anything large."""
    if size > KEEP_LIMIT:
        return False
    if rel == BUNDLE_TOML or rel.startswith(_KEPT_PREFIXES):
        return True
    return (
        rel.startswith(layout.under(layout.ENV))
        and rel.count("/") == 1
        and rel.endswith(_KEPT_ENV_SUFFIXES)
    )


# --- loading a bundle ---------------------------------------------------------------------


@dataclass
class _Collected:
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
    collected = _Collected()
    for member, data in iter_members(stream, source=source):
        if data is None:
            continue
        if member.name == MANIFEST_NAME:
            collected.manifest = data.read()
            continue
        if should_keep(member.name, member.size):
            content = data.read()
            collected.contents[member.name] = content
            collected.digests[member.name] = MemberInfo(len(content), sha256_bytes(content))
        else:
            digest, size = sha256_stream(data)
            collected.digests[member.name] = MemberInfo(size, digest)
    return collected


def _collect_directory(root: Path, *, jobs: int | None = None) -> _Collected:
    """Kept members are read whole; the rest are hashed in parallel. A file that cannot
    be read is reported as unreadable by the manifest check, as `repro check` does."""
    collected = _Collected()
    tree = scan_tree(root)
    collected.nonregular.update(tree.nonregular)
    collected.unreadable.update(tree.unreadable)
    to_hash: list[str] = []
    for rel in sorted(tree.files):
        path = root / rel
        if rel != MANIFEST_NAME and not should_keep(rel, tree.sizes[rel]):
            to_hash.append(rel)
            continue
        try:
            content = path.read_bytes()
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
        if full is not None and site is not None and item.size <= KEEP_LIMIT:
            try:
                contents[layout.in_patches(full)] = (Path(site) / item.path).read_bytes()
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
