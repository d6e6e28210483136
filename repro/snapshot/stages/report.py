"""Stage `report`: env/pack-report.json (what was checked, warned about and left out)
and the PackResult the caller gets."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import TYPE_CHECKING, Protocol

from repro.snapshot.facts.requirements import UnmetRequirement
from repro.snapshot.scan.compare import ScanReport
from repro.snapshot.stages.options import DeltaSummary, PackOptions, PackResult
from repro.snapshot.stages.output import Target
from repro.snapshot.workspace.leftout import LeftOut
from repro.snapshot.write.bundle import Members

if TYPE_CHECKING:
    from repro.snapshot.stages.caches import Caches
    from repro.snapshot.stages.kernelsources import KernelSources
    from repro.snapshot.stages.scanning import Patched
    from repro.snapshot.stages.vaulting import Vaulted
    from repro.snapshot.stages.workspace import WorkspaceParts


def pack_report(
    scan: ScanReport,
    warnings: list[str],
    unmet: Sequence[UnmetRequirement],
    left_out: Sequence[LeftOut],
) -> bytes:
    document = {
        "installed_bytes": scan.bytes_checked,
        "installed_files": scan.files_checked,
        "unchecked_distributions": dict(sorted(scan.dists_skipped.items())),
        "skipped_files": [
            {"dist": f.dist, "path": f.path, "reason": f.reason} for f in scan.skipped_files
        ],
        "unmet_requirements": [u.to_json() for u in unmet],
        "warnings": warnings,
        "left_out": [
            {"path": item.path, "kind": item.kind, "reason": item.reason} for item in left_out
        ],
    }
    return (json.dumps(document, indent=2, sort_keys=True) + "\n").encode()


class AssembledMembers(Protocol):
    """What the result reads of stage `members`' *Assembled* (a protocol, so that this
    stage, whose report `members` carries, does not import it back)."""

    @property
    def members(self) -> Members: ...
    @property
    def warnings(self) -> tuple[str, ...]: ...
    @property
    def unmet(self) -> tuple[UnmetRequirement, ...]: ...
    @property
    def delta(self) -> DeltaSummary | None: ...


def result(
    options: PackOptions,
    target: Target,
    distributions: int,
    stages: tuple[Patched, Vaulted, WorkspaceParts, AssembledMembers],
    size: int,
    *,
    sources: KernelSources | None = None,
    caches: Caches | None = None,
) -> PackResult:
    patched, vaulted, workspace, assembled = stages
    return PackResult(
        path=target.output,
        name=target.name,
        version=target.version,
        distributions=distributions,
        vault_wheels=tuple(sorted(w.filename for w in vaulted.report.wheels)),
        patched_files=tuple(
            f"{p.entry.dist}: {p.entry.path} ({p.entry.kind})" for p in patched.patches
        ),
        units=tuple(u.name for u in workspace.units),
        models=tuple(r.name for r in workspace.models),
        files=tuple(p.relative_to(options.source).as_posix() for p in workspace.carried),
        members=len(assembled.members.items) + (2 if options.sign else 1),
        bundle_bytes=size,
        warnings=assembled.warnings,
        left_out=tuple(
            item.describe() for item in (*workspace.left_out, *(caches.left_out if caches else ()))
        ),
        unmet_requirements=assembled.unmet,
        kernel_sources=sources.described() if sources is not None else (),
        caches=caches.described() if caches is not None else (),
        delta=assembled.delta,
    )
