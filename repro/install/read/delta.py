"""A delta bundle on the unpack side: made whole in staging from its base
(`unpack --base OLD`), or judged against the bundle a target holds.

`complete_from_base` runs inside the staging directory the delta was read into, before
its verification: every member the delta's manifest lists and it does not carry is
read from OLD (`repro.archive.deltabase`, which refuses a base other than the one the
delta names) and written beside the carried ones; each one's bytes must be what the
delta's manifest lists, or nothing goes further. The tree is then a full bundle and is
verified as one. `delta_target_decision` is the check for a delta applied in place:
only onto a target whose state.toml records the delta's base.
"""

from __future__ import annotations

from collections.abc import MutableMapping
from pathlib import Path

from repro.archive.deltabase import mismatched_members, read_base
from repro.bundle import layout
from repro.bundle.delta import BaseRef, DeltaDecision, always_carried, delta_decision
from repro.bundle.info import load_bundle_info
from repro.bundle.manifest import read_manifest
from repro.errors import BundleFormatError, VerificationError
from repro.install.state import load_state


def staged_base(top: Path, where: str) -> BaseRef | None:
    """The `[base]` of the bundle read into `top` (None: a full bundle, or a bundle.toml
    the verification will refuse)."""
    toml = layout.at(top, layout.BUNDLE_TOML)
    if not toml.is_file() or toml.is_symlink():
        return None
    try:
        return load_bundle_info(toml.read_bytes(), source=f"{where}: {layout.BUNDLE_TOML}").base
    except BundleFormatError:
        return None


def complete_from_base(top: Path, where: str, base: str, known: MutableMapping[str, str]) -> int:
    """Write into `top` every member of the delta read there that it takes from `base`,
    each checked against the delta's manifest; `known` gets their digests (taken as they
    were written). Returns how many members came from the base; 0 for a full bundle."""
    wanted_base = staged_base(top, where)
    if wanted_base is None:
        return 0
    manifest = read_manifest(layout.at(top, layout.MANIFEST))
    listed = {entry.path: entry.digest for entry in manifest.entries}
    wanted = [
        path
        for path in listed
        if not always_carried(path)
        and path not in known
        and not layout.at(top, path).exists()
        and not layout.at(top, path).is_symlink()
    ]
    read = read_base(base, wanted=wanted, into=top, expected=wanted_base, delta=where)
    wrong = mismatched_members(read, listed)
    if wrong:
        shown = "\n".join(
            f"  - {path}: {where}'s manifest lists {expected}, {base} holds {actual}"
            for path, expected, actual in wrong[:20]
        )
        raise VerificationError(
            f"{base}: {len(wrong)} member(s) the delta {where} takes from its base are not "
            f"what the delta's {layout.MANIFEST} lists:\n{shown}",
            hint="the base was changed after packing; get a good copy of it",
        )
    known.update(read.digests)
    return len(read.digests)


def delta_target_decision(base: BaseRef, target: Path, *, delta: str) -> DeltaDecision:
    """May the delta `delta` (packed against `base`) be applied onto `target` in place?
    Only when `target`'s state.toml records exactly its base (name, version, manifest
    sha256). Reads state.toml only; writes nothing."""
    state = load_state(target) if target.is_dir() else None
    recorded = None
    if state is not None:
        held = state.bundle
        recorded = BaseRef(held.name, held.version, held.manifest_sha256)
    return delta_decision(base, recorded, delta=delta, target=str(target))
