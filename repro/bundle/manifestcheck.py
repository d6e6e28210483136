"""A manifest against the digests of what a tree or an archive holds: the CheckReport.

`compare_digests` is pure: the digests come from `repro.bundle.manifesttree` for a
directory and from `repro.verbs.check` for an archive read as a stream.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from types import MappingProxyType
from typing import Any

from repro.bundle.delta import BaseRef, always_carried
from repro.bundle.manifest import (
    MANIFEST_NAME,
    SIGNATURE_SUFFIX,
    MalformedLine,
    Manifest,
    RejectedEntry,
    path_order,
    printable_path,
)

_EMPTY: Mapping[str, str] = MappingProxyType({})


@dataclass(frozen=True)
class Mismatch:
    path: str
    expected: str
    actual: str


@dataclass(frozen=True)
class UnlistedPath:
    """A path present in the tree that the manifest does not list; kind is `file`,
    `symlink`, `fifo`, `socket`, `device` or `other`."""

    path: str
    kind: str = "file"


@dataclass(frozen=True)
class Unreadable:
    path: str
    reason: str


@dataclass(frozen=True)
class CheckReport:
    """Everything found while checking a tree or archive against its manifest."""

    source: str
    verified: tuple[str, ...]
    mismatched: tuple[Mismatch, ...]
    missing: tuple[str, ...]
    unlisted: tuple[UnlistedPath, ...]
    malformed: tuple[MalformedLine, ...]
    unreadable: tuple[Unreadable, ...]
    rejected: tuple[RejectedEntry, ...]
    # A delta bundle (repro.bundle.delta): the base it needs, the members its manifest
    # lists that it takes from that base (not "missing"), and the base they were checked
    # in (`check --base OLD`; None: not checked, they are neither verified nor failures).
    base: BaseRef | None = None
    from_base: tuple[str, ...] = ()
    base_checked: str | None = None

    def passed(self, *, ignore_missing: bool, strict: bool) -> bool:
        """True when the tree is exactly what the manifest describes.

        Like `sha256sum -c`: at least one file must verify, missing files fail unless
        `ignore_missing`, malformed lines fail only when `strict`. Beyond sha256sum:
        unlisted paths and rejected entries always fail.
        """
        if self.mismatched or self.unreadable or self.unlisted or self.rejected:
            return False
        if self.missing and not ignore_missing:
            return False
        if self.malformed and strict:
            return False
        return bool(self.verified)

    def to_json(self) -> dict[str, Any]:
        document: dict[str, Any] = {
            "manifest": self.source,
            "counts": {
                "verified": len(self.verified),
                "mismatched": len(self.mismatched),
                "missing": len(self.missing),
                "unlisted": len(self.unlisted),
                "malformed": len(self.malformed),
                "unreadable": len(self.unreadable),
                "rejected": len(self.rejected),
            },
            "verified": [printable_path(p) for p in self.verified],
            "mismatched": [
                {"path": printable_path(m.path), "expected": m.expected, "actual": m.actual}
                for m in self.mismatched
            ],
            "missing": [printable_path(p) for p in self.missing],
            "unlisted": [{"path": printable_path(u.path), "kind": u.kind} for u in self.unlisted],
            "malformed": [
                {"line": m.lineno, "text": m.text, "reason": m.reason} for m in self.malformed
            ],
            "unreadable": [
                {"path": printable_path(u.path), "reason": u.reason} for u in self.unreadable
            ],
            "rejected": [
                {"line": r.lineno, "path": printable_path(r.path), "reason": r.reason}
                for r in self.rejected
            ],
        }
        if self.base is not None:  # a delta bundle: what it needs, what comes from there
            document["counts"]["from_base"] = len(self.from_base)
            document["base"] = {
                "name": self.base.name,
                "version": self.base.version,
                "manifest_sha256": self.base.manifest_sha256,
                "checked_in": self.base_checked,
            }
            document["from_base"] = [printable_path(p) for p in self.from_base]
        return document


def excuse_from_base(report: CheckReport, base: BaseRef) -> CheckReport:
    """`report` of a delta against `base`: the members it lacks are taken from the base
    (`from_base`), not missing, except the metadata every delta carries."""
    return replace(
        report,
        missing=tuple(p for p in report.missing if always_carried(p)),
        from_base=tuple(p for p in report.missing if not always_carried(p)),
        base=base,
    )


def exempt_names(manifest_name: str) -> frozenset[str]:
    """The root-level names a manifest never lists: itself and its signature."""
    return frozenset({manifest_name, manifest_name + SIGNATURE_SUFFIX})


def compare_digests(
    manifest: Manifest,
    actual: Mapping[str, str],
    *,
    present: Iterable[str],
    unreadable: Mapping[str, str] = _EMPTY,
    nonregular: Mapping[str, str] = _EMPTY,
    exempt: Iterable[str] = exempt_names(MANIFEST_NAME),
) -> CheckReport:
    """Compare computed digests with the manifest; pure.

    actual: path -> digest of each listed file that was hashed. present: every
    regular-file path in the tree (or archive). unreadable: path -> why it could not be
    read. nonregular: path -> kind of each non-regular member (symlink, fifo, ...).
    exempt: root-level names that are never "unlisted" (the manifest and its signature).
    """
    present_set = set(present)
    exempt_set = set(exempt)
    listed: set[str] = set()
    verified: list[str] = []
    mismatched: list[Mismatch] = []
    missing: list[str] = []
    failures: dict[str, str] = {}
    for entry in manifest.entries:
        listed.add(entry.path)
        if entry.path in actual:
            digest = actual[entry.path].lower()
            if digest == entry.digest:
                verified.append(entry.path)
            else:
                mismatched.append(Mismatch(entry.path, entry.digest, digest))
        elif entry.path in unreadable:
            failures[entry.path] = unreadable[entry.path]
        elif entry.path in nonregular:
            failures[entry.path] = f"not a regular file ({nonregular[entry.path]})"
        elif entry.path in present_set:
            failures[entry.path] = "present but not hashed"
        else:
            missing.append(entry.path)
    # A rejected entry is reported once, as rejected, not again as unlisted.
    listed.update(r.path for r in manifest.rejected)
    for path, reason in unreadable.items():
        if path not in listed:
            failures.setdefault(path, reason)
    unlisted = [UnlistedPath(p) for p in present_set - listed - exempt_set]
    unlisted += [
        UnlistedPath(p, kind)
        for p, kind in nonregular.items()
        if p not in listed and p not in exempt_set
    ]
    return CheckReport(
        source=manifest.source,
        verified=tuple(sorted(verified, key=path_order)),
        mismatched=tuple(sorted(mismatched, key=lambda m: path_order(m.path))),
        missing=tuple(sorted(missing, key=path_order)),
        unlisted=tuple(sorted(unlisted, key=lambda u: path_order(u.path))),
        malformed=manifest.malformed,
        unreadable=tuple(Unreadable(p, failures[p]) for p in sorted(failures, key=path_order)),
        rejected=tuple(sorted(manifest.rejected, key=lambda r: r.lineno)),
    )
