"""`repro inspect`: what a bundle holds and whether it verifies, without extracting it.

`inspect_bundle` summarises a BundleView; `copy_member` streams one member's bytes to
a binary stream and checks them against the manifest on the way.
"""

from __future__ import annotations

import hashlib
from dataclasses import asdict, dataclass
from pathlib import Path, PurePosixPath
from typing import Any, BinaryIO

from repro.archive.reader import iter_members
from repro.bundle import layout
from repro.bundle.caches import CarriedCache, describe_key, load_caches
from repro.bundle.environment import EnvironmentFacts, ModuleProbe
from repro.bundle.info import ModelRef
from repro.bundle.limits import PARSED_LIMIT
from repro.bundle.manifest import MANIFEST_NAME, parse_manifest
from repro.bundle.stream import open_archive
from repro.bundle.vault import VaultEntry
from repro.diffapply import count_diff_lines
from repro.errors import (
    EXIT_GPU_NO_CODE,
    EXIT_GPU_PTX_ONLY,
    EXIT_OK,
    InputError,
    NoKernelAudit,
)
from repro.gpu.arch import Verdict
from repro.gpu.audit import Judgement, judge_audit, worst
from repro.gpu.targets import GpuTarget
from repro.hashing import CHUNK_SIZE
from repro.snapshot.facts.modulefiles import probed_by_import
from repro.verbs.check import TargetKind, classify_target
from repro.verbs.view import BundleView, MemberBudget, load_bundle


@dataclass(frozen=True)
class PatchLines:
    """One patched file with the lines its diff adds and removes (None: no diff carried)."""

    dist: str
    version: str
    path: str
    kind: str
    added: int | None
    removed: int | None
    diff: str | None


@dataclass(frozen=True)
class InspectReport:
    view: BundleView
    distributions: int
    patches: tuple[PatchLines, ...]
    units: tuple[str, ...]
    unit_files: tuple[str, ...]  # EnvironmentFile= files carried beside the units
    files: tuple[tuple[str, int], ...]  # files/ members and their sizes
    # how pack learnt about torch & co.: "import"ed them, read their "files", None: no record
    modules_probed: ModuleProbe | None = None
    caches: tuple[CarriedCache, ...] = ()  # env/caches.toml: the compile caches and keys

    @property
    def verified(self) -> bool:
        return self.view.verified

    @property
    def vault(self) -> tuple[VaultEntry, ...]:
        return self.view.vault or ()

    @property
    def models(self) -> tuple[ModelRef, ...]:
        return self.view.info.models if self.view.info is not None else ()

    def patches_by_dist(self) -> dict[str, list[PatchLines]]:
        grouped: dict[str, list[PatchLines]] = {}
        for patch in self.patches:
            grouped.setdefault(patch.dist, []).append(patch)
        return grouped

    def to_json(self) -> dict[str, Any]:
        view = self.view
        info = view.info
        check = view.check.to_json() if view.check is not None else None
        if check is not None:
            del check["verified"]  # the counts say it; the list is the whole bundle
        return {
            "target": view.target,
            "name": info.name if info else None,
            "version": info.version if info else None,
            "created": info.created if info else None,
            "tool_version": info.tool_version if info else None,
            "format_version": info.format_version if info else None,
            "source": asdict(view.origin),
            "distributions": self.distributions,
            "modules_probed": self.modules_probed,
            "vault": [asdict(w) for w in self.vault],
            "patches": [{k: v for k, v in asdict(p).items() if k != "diff"} for p in self.patches],
            "units": list(self.units),
            "unit_files": list(self.unit_files),
            "models": [_model_json(m) for m in self.models],
            "files": [{"path": path, "size": size} for path, size in self.files],
            "caches": [_cache_json(c) for c in self.caches],
            "members": len(view.members) + (0 if view.manifest_problem else 1),
            "verified": self.verified,
            "manifest_problem": view.manifest_problem,
            "check": check,
        }


def _cache_json(cache: CarriedCache) -> dict[str, Any]:
    key: dict[str, object] = {part: cache.key.part(part) for part in cache.spec.parts}
    key["capability"] = list(cache.key.capability)
    return {
        "kind": cache.kind,
        "variable": cache.spec.variable,
        "source": cache.source,
        "files": cache.files,
        "size": cache.size,
        "key": key,
        "key_described": describe_key(cache.spec, cache.key),
        "from_metadata": list(cache.from_metadata),
    }


def _model_json(model: ModelRef) -> dict[str, Any]:
    document = asdict(model)
    document["small_files"] = dict(model.small_files)
    return document


def _patch_lines(view: BundleView) -> tuple[PatchLines, ...]:
    result = []
    for entry in view.patches.entries:
        added: int | None = None
        removed: int | None = None
        diff_member = entry.diff_member
        diff = view.text(layout.in_patches(diff_member)) if diff_member else None
        if diff is not None:
            added, removed = count_diff_lines(diff)
        elif entry.kind == "added" and entry.full_member is not None:
            content = view.text(layout.in_patches(entry.full_member))
            if content is not None:
                added, removed = len(content.splitlines()), 0
        result.append(
            PatchLines(entry.dist, entry.version, entry.path, entry.kind, added, removed, diff)
        )
    return tuple(result)


def inspect_view(view: BundleView) -> InspectReport:
    services = view.under(layout.under(layout.SERVICES))
    units = tuple(name for name in services if "/" not in name)
    unit_files = tuple(name for name in services if "/" in name)
    files = tuple(
        (path, member.size) for path, member in view.under(layout.under(layout.FILES)).items()
    )
    return InspectReport(
        view=view,
        distributions=len(view.facts.distributions) if view.facts else 0,
        patches=_patch_lines(view),
        units=units,
        unit_files=unit_files,
        files=files,
        modules_probed=_modules_probed(view.facts),
        caches=_caches(view),
    )


def _caches(view: BundleView) -> tuple[CarriedCache, ...]:
    data = view.contents.get(layout.CACHES_TOML)
    return load_caches(data, source=layout.CACHES_TOML) if data is not None else ()


def _modules_probed(facts: EnvironmentFacts | None) -> ModuleProbe | None:
    if facts is None or not facts.modules:
        return None
    return "import" if probed_by_import(facts) else "files"


def inspect_bundle(target: str, *, jobs: int | None = None) -> InspectReport:
    """Read TARGET (archive, `-`, an archive's http(s) URL or bundle directory) once and
    summarise it."""
    return inspect_view(load_bundle(target, jobs=jobs))


# --- one member ---------------------------------------------------------------------------


@dataclass(frozen=True)
class MemberCopy:
    """One member written out, and whether its bytes match the manifest's digest."""

    path: str
    size: int
    sha256: str
    expected: str | None  # None: the manifest does not list it (or there is none)

    @property
    def verified(self) -> bool:
        return self.expected == self.sha256


def _member_path(rel: str) -> str:
    pure = PurePosixPath(rel)
    if not rel or pure.is_absolute() or ".." in pure.parts:
        raise InputError(f"{rel!r}: not a path inside a bundle (e.g. env/environment.json)")
    return pure.as_posix()


def _expected_digest(manifest: bytes | None, rel: str, source: str) -> str | None:
    if manifest is None:
        return None
    for entry in parse_manifest(manifest, source=source).entries:
        if entry.path == rel:
            return entry.digest
    return None


def _copy(data: BinaryIO, out: BinaryIO) -> tuple[str, int]:
    digest = hashlib.sha256()
    size = 0
    while chunk := data.read(CHUNK_SIZE):
        digest.update(chunk)
        out.write(chunk)
        size += len(chunk)
    return digest.hexdigest(), size


def copy_member(target: str, rel: str, out: BinaryIO) -> MemberCopy:
    """Write member `rel` (relative to the bundle's top directory) of TARGET to `out`.

    The bytes are hashed as they pass; an archive is read to its end so the
    manifest, which comes last, can vouch for them.
    """
    wanted = _member_path(rel)
    if classify_target(target) is TargetKind.DIRECTORY:
        return _copy_from_directory(Path(target), wanted, out)
    with open_archive(target) as (stream, name):
        return _copy_from_stream(stream, name, wanted, out)


def _copy_from_stream(stream: BinaryIO, source: str, rel: str, out: BinaryIO) -> MemberCopy:
    found: tuple[str, int] | None = None
    manifest: bytes | None = None
    for member, data in iter_members(stream, source=source):
        if data is None:
            continue
        if member.name == MANIFEST_NAME and MemberBudget(source).keep(member.name, member.size):
            manifest = data.read(member.size)
        if member.name == rel:
            found = _copy(data, out)
            out.flush()
    if found is None:
        raise InputError(f"{source}: has no member {rel!r}", hint="`repro inspect` lists them")
    expected = _expected_digest(manifest, rel, f"{source}:{MANIFEST_NAME}")
    return MemberCopy(rel, found[1], found[0], expected)


def _copy_from_directory(root: Path, rel: str, out: BinaryIO) -> MemberCopy:
    path = root / rel
    inside = path.resolve().is_relative_to(root.resolve())
    if not inside or path.is_symlink() or not path.is_file():
        raise InputError(f"{root}: has no member {rel!r}", hint="`repro inspect` lists them")
    try:
        with path.open("rb") as data:
            digest, size = _copy(data, out)
        manifest_path = root / MANIFEST_NAME
        manifest = None
        if manifest_path.is_file():
            MemberBudget(str(root)).keep(MANIFEST_NAME, manifest_path.stat().st_size)
            manifest = manifest_path.read_bytes()
    except OSError as exc:
        raise InputError(f"{path}: cannot read: {exc.strerror or exc}") from exc
    out.flush()
    return MemberCopy(rel, size, digest, _expected_digest(manifest, rel, str(root / MANIFEST_NAME)))


# --- the plan of a move to other GPUs (--gpu) ---------------------------------------------


@dataclass(frozen=True)
class GpuPlan:
    """Every distribution with GPU code judged on every GPU asked about."""

    targets: tuple[GpuTarget, ...]
    judgements: tuple[tuple[GpuTarget, Judgement], ...]  # by distribution, then GPU

    @property
    def verdict(self) -> Verdict:
        return worst(j for _, j in self.judgements)

    @property
    def exit_code(self) -> int:
        """0 all native, 1 some PTX JIT only, 4 some with no code (docs/kernels.md)."""
        return {
            Verdict.PASS: EXIT_OK,
            Verdict.WARN: EXIT_GPU_PTX_ONLY,
            Verdict.FAIL: EXIT_GPU_NO_CODE,
        }[self.verdict]

    def to_json(self) -> dict[str, Any]:
        return {
            "gpus": [
                {"given": t.given, "capability": f"{t.capability[0]}.{t.capability[1]}"}
                for t in self.targets
            ],
            "verdict": self.verdict.value,
            "judgements": [
                {
                    "name": j.name,
                    "version": j.version,
                    "gpu": t.given,
                    "capability": f"{j.capability[0]}.{j.capability[1]}",
                    "verdict": j.verdict.value,
                    "words": j.words,
                    "deciding": j.deciding,
                    "matched": j.detail.matched,
                    "detail": j.detail.message,
                    "rebuildable": j.rebuildable,
                }
                for t, j in self.judgements
            ],
        }


def gpu_plan(view: BundleView, targets: tuple[GpuTarget, ...]) -> GpuPlan:
    """The bundle's env/kernels.toml judged on `targets`; `NoKernelAudit` for a bundle
    packed before the audit (or whose audit was too large to read)."""
    audit = view.kernels
    if audit is None:
        if layout.KERNELS_TOML in view.members:
            raise NoKernelAudit(
                f"{view.target}: {layout.KERNELS_TOML} is larger than repro reads "
                f"({PARSED_LIMIT >> 20} MiB): its GPU code cannot be judged"
            )
        raise NoKernelAudit(
            f"{view.target}: has no {layout.KERNELS_TOML}: it was packed by a repro older "
            "than the GPU code audit, so what its shared objects run on is not recorded",
            hint="pack it again with this repro; `repro unpack` still judges the vault's "
            "wheels on the target's GPU",
        )
    by_cap = {t.capability: t for t in targets}
    judged = judge_audit(audit, by_cap)
    return GpuPlan(targets, tuple((by_cap[j.capability], j) for j in judged))
