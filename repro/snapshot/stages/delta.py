"""Stage `delta` (`repro pack --base OLD`): the base read, then the members that OLD
already holds, byte for byte, taken out of the archive.

`open_base` reads OLD's bundle.toml and MANIFEST.sha256 (`repro.archive.deltabase`),
before the long part of the pack, and refuses a base of another name. `subtract` takes
every assembled member's sha256 ahead (the bytes, the files, the vault wheels' digests,
which a delta hashes in a pass of their own: `Target.delta`) and drops each one OLD
lists with the same digest, unless it is metadata (`repro.bundle.delta.always_carried`).
The dropped ones stay in the manifest (`Assembled.listed`), which is the new bundle's
complete one.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from repro.archive.deltabase import BaseBundle, read_base
from repro.bundle.delta import always_carried
from repro.errors import DeltaBaseError, InputError
from repro.hashing import hash_files, sha256_bytes
from repro.snapshot.stages.members import Assembled
from repro.snapshot.stages.options import DeltaSummary, PackOptions
from repro.snapshot.stages.output import Target
from repro.snapshot.write.bundle import Content, Members, Streamed, content_size


def open_base(options: PackOptions, target: Target) -> BaseBundle | None:
    """OLD's identity and manifest (None without --base); a base of another name than
    the bundle being packed is refused (exit 2), naming both."""
    if options.base is None:
        return None
    base = read_base(options.base).base
    if base.ref.name != target.name:
        raise DeltaBaseError(
            f"--base {options.base} is bundle {base.ref.name!r} ({base.ref.version}); "
            f"this pack makes {target.name!r} ({target.version}): a delta is packed "
            "against an earlier bundle of the same name",
            hint="pass an earlier bundle of this name, or --name to match the base's",
        )
    return base


def subtract(assembled: Assembled, base: BaseBundle, *, jobs: int | None) -> Assembled:
    """`assembled` without the members `base` holds as they are; `listed` names them."""
    old = base.digests()
    items = assembled.members.items
    candidates = [rel for rel in items if rel in old and not always_carried(rel)]
    digests: dict[str, str] = {}
    files = [rel for rel in candidates if isinstance(items[rel], Path)]
    for rel, result in zip(
        files, hash_files([_path(items[rel]) for rel in files], jobs=jobs), strict=True
    ):
        if result.digest is None:
            raise InputError(f"{result.path}: cannot read: {result.error}")
        digests[rel] = result.digest
    for rel in candidates:
        digest = _digest_ahead(items[rel])
        if digest is not None:
            digests[rel] = digest
    from_base = {rel for rel, digest in digests.items() if old[rel] == digest}
    kept = Members()
    for rel, content in items.items():
        if rel not in from_base:
            kept.add(rel, content, executable=rel in assembled.members.executable)
    listed = {rel: digests[rel] for rel in from_base}
    sizes = {rel: content_size(content) for rel, content in items.items()}
    summary = DeltaSummary(
        base=base.ref,
        carried_members=len(kept.items) + 1,  # and the manifest
        carried_bytes=sum(size for rel, size in sizes.items() if rel not in from_base),
        base_members=len(from_base),
        base_bytes=sum(sizes[rel] for rel in from_base),
    )
    return replace(assembled, members=kept, listed=listed, delta=summary)


def _path(content: Content) -> Path:
    assert isinstance(content, Path)
    return content


def _digest_ahead(content: Content) -> str | None:
    """The sha256 of a member known before it is written; None for a file (hashed in
    parallel by `subtract`) and for what is made while writing (always carried)."""
    if isinstance(content, bytes):
        return sha256_bytes(content)
    if isinstance(content, Streamed):
        return content.sha256
    return None
