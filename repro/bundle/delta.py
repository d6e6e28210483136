"""Delta bundles: a bundle that carries only what differs from the bundle it was packed
against (its base), and says which base that is.

A delta's `bundle.toml` has a `[base]` table (`BaseRef`: the base's name, version and
the sha256 of its MANIFEST.sha256 bytes) and a `format_version` of 4 or more (4: a delta
of format 3's member order; from 5 on, full bundles and deltas share the number and
`[base]` alone makes a delta), so that a repro that does not know deltas refuses it
rather than calling it damaged. Its MANIFEST.sha256 is
the complete manifest of the new bundle; a member the manifest lists and the delta does
not hold is, by definition, taken from the base, which is only allowed when `[base]`
is there and never for the metadata (`always_carried`), which every delta holds.
docs/bundle-format.md, section 7, is the normative text.

Pure: no file is read here. Reading a base (an archive, a URL, a directory) is
`repro.archive.deltabase`'s.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from typing import Any

from repro.bundle import layout
from repro.bundle.manifest import Manifest
from repro.bundle.tomltable import TomlTable
from repro.errors import DeltaBaseError

# The first format a delta bundle has, and the only one that is a delta alone (of a
# format 3 bundle); from bundle.info.FORMAT_VERSION 5 on, [base] alone makes a delta.
DELTA_FORMAT_VERSION = 4
BASE_TABLE = "base"

_SHA256 = re.compile(r"[0-9a-f]{64}")


@dataclass(frozen=True)
class BaseRef:
    """Which bundle a delta needs: what `[base]` says, or what a base (or a target
    holding one) is."""

    name: str
    version: str
    manifest_sha256: str  # of the base's MANIFEST.sha256, its exact bytes

    def describe(self) -> str:
        return f"{self.name} {self.version} (manifest sha256 {self.manifest_sha256})"


def manifest_digest(data: bytes) -> str:
    """A bundle's identity digest: the sha256 of its MANIFEST.sha256 bytes."""
    return hashlib.sha256(data).hexdigest()


def load_base(table: TomlTable) -> BaseRef:
    """`[base]` of a bundle.toml; problems go into the table's list (bundle.info)."""
    ref = BaseRef(
        name=table.string("name"),
        version=table.string("version"),
        manifest_sha256=table.string("manifest_sha256"),
    )
    if ref.manifest_sha256 and not _SHA256.fullmatch(ref.manifest_sha256):
        table.problem("manifest_sha256", "must be a lowercase hex sha256")
    table.finish()
    return ref


def dump_base(ref: BaseRef) -> dict[str, Any]:
    """`[base]` as bundle.toml writes it, keys in the order of the format."""
    return {"name": ref.name, "version": ref.version, "manifest_sha256": ref.manifest_sha256}


def always_carried(member: str) -> bool:
    """Metadata every delta carries, whatever the base holds: the top-level files
    (bundle.toml, the manifest, REPRODUCE.md, setup_env.sh), env/'s files (the locks,
    the facts, the reports; not env/wheels/) and patches/patches.toml. They are small,
    and a reader judges a delta by them before any base is at hand."""
    if "/" not in member:
        return True
    if member == layout.PATCHES_TOML:
        return True
    parent, _, _ = member.rpartition("/")
    return parent == layout.ENV


def members_from_base(manifest: Manifest, carried: Collection[str]) -> set[str]:
    """The members of `manifest` a delta holding `carried` takes from its base."""
    return {entry.path for entry in manifest.entries if entry.path not in carried}


def delta_members(digests: Mapping[str, str], base: Mapping[str, str]) -> tuple[set[str], set[str]]:
    """(carried, from base): a new bundle's members by digest against its base's
    manifest. A member is taken from the base when the base lists it with the same
    digest and it is not metadata."""
    from_base = {
        path
        for path, digest in digests.items()
        if not always_carried(path) and base.get(path) == digest
    }
    return set(digests) - from_base, from_base


def refuse_other_base(wanted: BaseRef, found: BaseRef, *, delta: str, base: str) -> None:
    """DeltaBaseError (exit 2) unless `found` (what `base` is) is the base `wanted` (what
    the delta `delta` says); the message names both."""
    if wanted == found:
        return
    what = (
        "another bundle"
        if wanted.name != found.name
        else "another version"
        if wanted.version != found.version
        else "another manifest (same name and version, other contents)"
    )
    raise DeltaBaseError(
        f"{delta} is a delta against {wanted.describe()}, but {base} is {what}: {found.describe()}",
        hint="pass the bundle the delta was packed against (--base), or a full bundle",
    )


@dataclass(frozen=True)
class DeltaDecision:
    """Whether a delta may be applied onto a target: `ok`, and why (the message a
    refusal raises)."""

    ok: bool
    reason: str

    def raise_unless_ok(self) -> None:
        if not self.ok:
            raise DeltaBaseError(
                self.reason,
                hint="unpack it with --base OLD (OLD: the base bundle) to rebuild it "
                "anywhere, or apply it to a target of its base",
            )


def delta_decision(
    wanted: BaseRef, recorded: BaseRef | None, *, delta: str, target: str
) -> DeltaDecision:
    """May the delta `delta` (packed against `wanted`) be applied onto `target`, which
    holds `recorded` (its state.toml's bundle; None: no bundle)? Only onto its base."""
    if recorded is None:
        return DeltaDecision(
            False,
            f"{delta} is a delta against {wanted.describe()}; {target} holds no bundle",
        )
    if recorded != wanted:
        return DeltaDecision(
            False,
            f"{delta} is a delta against {wanted.describe()}; {target} holds {recorded.describe()}",
        )
    return DeltaDecision(True, f"{target} holds {wanted.describe()}, the delta's base")
