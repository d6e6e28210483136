"""`repro sbom`: the CycloneDX SBOM of a verified bundle (repro.bundle.sbom renders it).

The bundle is read once (repro.verbs.view.load_bundle) and verified against its
manifest first: a bundle that does not verify gives no SBOM.
"""

from __future__ import annotations

from repro.bundle import layout
from repro.bundle.limits import SHOWN_BUDGET
from repro.bundle.sbom import render_sbom
from repro.errors import InputError, VerificationError
from repro.verbs.view import load_bundle

_DIFFS = layout.in_patches("diffs/")


def sbom_of_bundle(target: str, *, jobs: int | None = None) -> bytes:
    """The SBOM of TARGET (an archive, `-`, an archive's URL or a bundle directory),
    read once and verified first: a bundle that does not verify gives none."""
    view = load_bundle(target, jobs=jobs)
    if not view.verified:
        check = view.check
        problems = view.manifest_problem
        if check is not None:
            named = [
                *(f"{m.path} does not match" for m in check.mismatched),
                *(f"{p} is missing" for p in check.missing),
                *(f"{u.path} is not listed" for u in check.unlisted),
                *(f"{u.path} cannot be read" for u in check.unreadable),
                *(f"{r.path} rejected" for r in check.rejected),
            ]
            problems = "; ".join(named[:5]) + ("; ..." if len(named) > 5 else "")
        raise VerificationError(
            f"{view.target}: does not verify against its manifest ({problems}); no SBOM made",
            hint="`repro inspect` shows every problem; an SBOM describes only a verified bundle",
        )
    diffs = sorted(rel for rel in view.not_kept if rel.startswith(_DIFFS))
    if diffs:
        # pack's SBOM carries each diff's text: one left out here would make another document
        raise InputError(
            f"{view.target}:{diffs[0]}: not read: the bundle's patch texts exceed the "
            f"{SHOWN_BUDGET >> 20} MiB that sbom holds in memory ({len(diffs)} diff(s) "
            "left out)",
            hint="a bundle repro packs carries far less; check where this one came from",
        )
    digests = {rel: member.sha256 for rel, member in view.members.items()}
    return render_sbom(view.contents, digests)
