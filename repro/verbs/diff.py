"""`repro diff`: what changed between two bundles, or between a bundle and a live env.

`diff_views` compares two BundleViews section by section: distributions, vault wheels,
patches (with the unified diff between the two patched versions), units, environment
facts, model references and carried files. Bundle metadata (name, version, creation
time, tool version) is shown but is not a difference: two packs of the same environment
are identical. Sections a live environment cannot supply (vault, units, models, files)
are listed in `not_compared`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass
from typing import Any, Literal, TypeVar

from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

from repro.bundle import layout
from repro.bundle.info import ModelRef, SourceInfo
from repro.bundle.patchset import PatchEntry
from repro.bundle.vault import VaultEntry
from repro.diffapply import unified_diff
from repro.verbs.view import BundleView, MemberInfo

Change = Literal["added", "removed", "upgraded", "downgraded", "changed"]
T = TypeVar("T")


@dataclass(frozen=True)
class DistChange:
    name: str
    change: Change
    old: str | None
    new: str | None


@dataclass(frozen=True)
class VaultChange:
    name: str
    change: Change
    old: str | None  # wheel filename
    new: str | None
    old_sha256: str | None
    new_sha256: str | None


@dataclass(frozen=True)
class PatchChange:
    dist: str
    path: str
    change: Change
    old_kind: str | None
    new_kind: str | None
    old_version: str | None
    new_version: str | None
    diff: str | None  # between the two patched versions, when both are text and carried


@dataclass(frozen=True)
class TextChange:
    """A unit, model file or carried file that was added, removed or changed."""

    path: str
    change: Change
    diff: str | None


@dataclass(frozen=True)
class FactChange:
    key: str
    old: str | None
    new: str | None


@dataclass(frozen=True)
class ModelChange:
    name: str
    change: Change
    fields: tuple[FactChange, ...]
    files: tuple[TextChange, ...]


@dataclass(frozen=True)
class DiffReport:
    a: str
    b: str
    a_label: str
    b_label: str
    distributions: tuple[DistChange, ...]
    vault: tuple[VaultChange, ...]
    patches: tuple[PatchChange, ...]
    units: tuple[TextChange, ...]
    environment: tuple[FactChange, ...]
    models: tuple[ModelChange, ...]
    files: tuple[TextChange, ...]
    not_compared: tuple[str, ...] = ()

    @property
    def identical(self) -> bool:
        return not any(
            (
                self.distributions,
                self.vault,
                self.patches,
                self.units,
                self.environment,
                self.models,
                self.files,
            )
        )

    def to_json(self) -> dict[str, Any]:
        def rows(items: tuple[Any, ...]) -> list[dict[str, Any]]:
            return [asdict(item) for item in items]

        return {
            "a": self.a,
            "b": self.b,
            "a_label": self.a_label,
            "b_label": self.b_label,
            "identical": self.identical,
            "distributions": rows(self.distributions),
            "vault": rows(self.vault),
            "patches": rows(self.patches),
            "units": rows(self.units),
            "environment": rows(self.environment),
            "models": rows(self.models),
            "files": rows(self.files),
            "not_compared": list(self.not_compared),
        }


def _pairs(old: Mapping[str, T], new: Mapping[str, T]) -> list[tuple[str, T | None, T | None]]:
    return [(key, old.get(key), new.get(key)) for key in sorted(set(old) | set(new))]


def version_change(old: str, new: str) -> Change | None:
    """upgraded / downgraded by PEP 440 ordering; `changed` when either does not parse."""
    if old == new:
        return None
    try:
        before, after = Version(old), Version(new)
    except InvalidVersion:
        return "changed"
    if after > before:
        return "upgraded"
    if after < before:
        return "downgraded"
    return "changed"  # equal by PEP 440, spelled differently (1.0 vs 1.0.0)


def diff_distributions(a: BundleView, b: BundleView) -> tuple[DistChange, ...]:
    def versions(view: BundleView) -> dict[str, tuple[str, str]]:
        dists = view.facts.distributions if view.facts else ()
        return {d.normalized_name: (d.name, d.version) for d in dists}

    changes = []
    for _, old, new in _pairs(versions(a), versions(b)):
        if old is None and new is not None:
            changes.append(DistChange(new[0], "added", None, new[1]))
        elif new is None and old is not None:
            changes.append(DistChange(old[0], "removed", old[1], None))
        elif old is not None and new is not None:
            change = version_change(old[1], new[1])
            if change is not None:
                changes.append(DistChange(new[0], change, old[1], new[1]))
    return tuple(changes)


def diff_vault(a: tuple[VaultEntry, ...], b: tuple[VaultEntry, ...]) -> tuple[VaultChange, ...]:
    def by_name(entries: tuple[VaultEntry, ...]) -> dict[str, VaultEntry]:
        return {canonicalize_name(e.name): e for e in entries}

    changes = []
    for _, old, new in _pairs(by_name(a), by_name(b)):
        if old is not None and new is not None:
            if (old.filename, old.sha256) == (new.filename, new.sha256):
                continue
            change = version_change(old.version, new.version) or "changed"
        else:
            change = "added" if old is None else "removed"
        name = (new or old).name  # type: ignore[union-attr]
        changes.append(
            VaultChange(
                name,
                change,
                old.filename if old else None,
                new.filename if new else None,
                old.sha256 if old else None,
                new.sha256 if new else None,
            )
        )
    return tuple(changes)


def _text_diff(old: str | None, new: str | None, path: str) -> str | None:
    if old is None or new is None:
        return None
    return unified_diff(old, new, path)


def _full_text(view: BundleView, entry: PatchEntry) -> str | None:
    full = entry.full_member
    return view.text(layout.in_patches(full)) if full else None


def diff_patches(a: BundleView, b: BundleView) -> tuple[PatchChange, ...]:
    def by_file(view: BundleView) -> dict[str, PatchEntry]:
        return {f"{canonicalize_name(e.dist)}\0{e.path}": e for e in view.patches.entries}

    changes = []
    for _, old, new in _pairs(by_file(a), by_file(b)):
        diff: str | None = None
        if old is not None and new is not None:
            same = (old.kind, old.patched_sha256, old.pristine_sha256) == (
                new.kind,
                new.patched_sha256,
                new.pristine_sha256,
            )
            if same:
                continue
            change: Change = "changed"
            diff = _text_diff(_full_text(a, old), _full_text(b, new), new.path)
        else:
            change = "added" if old is None else "removed"
        entry = new or old
        assert entry is not None
        changes.append(
            PatchChange(
                entry.dist,
                entry.path,
                change,
                old.kind if old else None,
                new.kind if new else None,
                old.version if old else None,
                new.version if new else None,
                diff,
            )
        )
    return tuple(changes)


def diff_members(a: BundleView, b: BundleView, prefix: str) -> tuple[TextChange, ...]:
    """Members below `prefix` added, removed or changed, with text diffs where both are
    kept in memory and decode as UTF-8."""
    changes = []
    pairs: list[tuple[str, MemberInfo | None, MemberInfo | None]] = _pairs(
        a.under(prefix), b.under(prefix)
    )
    for rel, old, new in pairs:
        if old is not None and new is not None:
            if old.sha256 == new.sha256:
                continue
            path = prefix + rel
            changes.append(
                TextChange(path, "changed", _text_diff(a.text(path), b.text(path), path))
            )
        else:
            changes.append(TextChange(prefix + rel, "added" if old is None else "removed", None))
    return tuple(changes)


def _gpus(source: SourceInfo) -> str | None:
    if not source.gpus:
        return None
    return ", ".join(
        f"{g.name} (sm {g.compute_capability}, {g.memory_mib} MiB)" for g in source.gpus
    )


_SOURCE_FACTS: tuple[tuple[str, Callable[[SourceInfo], str | None]], ...] = (
    ("python", lambda s: s.python or None),
    ("implementation", lambda s: s.implementation or None),
    ("platform", lambda s: s.platform or None),
    ("glibc", lambda s: s.glibc or None),
    ("gpus", _gpus),
    ("driver", lambda s: s.driver),
    ("cuda_driver_version", lambda s: s.cuda_driver_version),
    ("torch", lambda s: s.torch),
    ("torch_cuda", lambda s: s.torch_cuda),
    ("torch_arch_list", lambda s: " ".join(s.torch_arch_list) or None),
)


def diff_environment(a: BundleView, b: BundleView) -> tuple[FactChange, ...]:
    changes = [
        FactChange(key, old, new)
        for key, read in _SOURCE_FACTS
        if (old := read(a.origin)) != (new := read(b.origin))
    ]
    nvcc_a = a.facts.cuda_toolkit.nvcc_version if a.facts else None
    nvcc_b = b.facts.cuda_toolkit.nvcc_version if b.facts else None
    if nvcc_a != nvcc_b:
        changes.append(FactChange("nvcc", nvcc_a, nvcc_b))
    env_a = dict(a.facts.env) if a.facts else {}
    env_b = dict(b.facts.env) if b.facts else {}
    for name, old, new in _pairs(env_a, env_b):
        if old != new:
            changes.append(FactChange(f"env.{name}", old, new))
    return tuple(changes)


_MODEL_FIELDS = ("role", "repo_id", "revision", "local_path", "total_bytes", "file_count")


def diff_models(a: BundleView, b: BundleView) -> tuple[ModelChange, ...]:
    def by_name(view: BundleView) -> dict[str, ModelRef]:
        return {m.name: m for m in (view.info.models if view.info else ())}

    changes = []
    for name, old, new in _pairs(by_name(a), by_name(b)):
        if old is None or new is None:
            changes.append(ModelChange(name, "added" if old is None else "removed", (), ()))
            continue
        fields = tuple(
            FactChange(key, _str(getattr(old, key)), _str(getattr(new, key)))
            for key in _MODEL_FIELDS
            if getattr(old, key) != getattr(new, key)
        )
        files = []
        for filename, old_sha, new_sha in _pairs(old.small_files, new.small_files):
            if old_sha == new_sha:
                continue
            path = layout.model_file(name, filename)
            if old_sha is None or new_sha is None:
                files.append(TextChange(path, "added" if old_sha is None else "removed", None))
            else:
                diff = _text_diff(a.text(path), b.text(path), path)
                files.append(TextChange(path, "changed", diff))
        if fields or files:
            changes.append(ModelChange(name, "changed", fields, tuple(files)))
    return tuple(changes)


def _str(value: object) -> str | None:
    return None if value is None else str(value)


def diff_views(a: BundleView, b: BundleView) -> DiffReport:
    both_bundles = a.is_bundle and b.is_bundle
    return DiffReport(
        a=a.target,
        b=b.target,
        a_label=a.label,
        b_label=b.label,
        distributions=diff_distributions(a, b),
        vault=diff_vault(a.vault or (), b.vault or ()) if both_bundles else (),
        patches=diff_patches(a, b),
        units=diff_members(a, b, layout.under(layout.SERVICES)) if both_bundles else (),
        environment=diff_environment(a, b),
        models=diff_models(a, b) if both_bundles else (),
        files=diff_members(a, b, layout.under(layout.FILES)) if both_bundles else (),
        not_compared=() if both_bundles else ("vault", "units", "models", "files"),
    )
