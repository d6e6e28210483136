"""`repro pack`: snapshot a workspace and its environment into one bundle archive.

Pack is a sequence of stages (repro/snapshot/stages/), each a function from frozen
inputs to a frozen result; `_pack` below is that sequence. The members are parts
first and the archive streamed in one pass, hashing every member as it is written,
with the manifest last. Nothing in SOURCE is written; a failed pack leaves nothing at
the output path.
"""

from __future__ import annotations

import contextlib
import tempfile
from collections.abc import Iterator
from concurrent.futures import Executor, ThreadPoolExecutor
from pathlib import Path

from repro.bundle.manifest import ProgressSink
from repro.errors import NotAsRecorded
from repro.snapshot.stages import (
    caches,
    delta,
    kernels,
    kernelsources,
    locks,
    members,
    output,
    probe,
    report,
    scanning,
    vaulting,
)
from repro.snapshot.stages import workspace as workspace_stage
from repro.snapshot.stages.info import venv_place
from repro.snapshot.stages.options import (
    PackOptions,
    PackResult,
    Progress,
    WheelsMode,
    default_cache_dir,
)
from repro.snapshot.stages.output import (
    ARCHIVE_SUFFIXES,
    FOREIGN_ARCHIVE_SUFFIXES,
    bundle_name,
    next_version,
)
from repro.snapshot.stages.scanning import DEFER_SHA_FROM, scan_warnings

__all__ = [
    "ARCHIVE_SUFFIXES",
    "DEFER_SHA_FROM",
    "FOREIGN_ARCHIVE_SUFFIXES",
    "PackOptions",
    "PackResult",
    "Progress",
    "WheelsMode",
    "bundle_name",
    "default_cache_dir",
    "next_version",
    "pack",
    "scan_warnings",
    "venv_place",
]


def pack(
    options: PackOptions,
    *,
    progress: Progress | None = None,
    writing: ProgressSink | None = None,
) -> PackResult:
    """Pack; if a file whose check the scan left to the writing (its size is RECORD's)
    turns out patched, pack again reading every file itself.

    `progress` hears what pack does, in words; `writing` follows the archive being
    written: its files and bytes, then each member's size once written."""
    try:
        return _pack(options, progress, writing, defer=True)
    except NotAsRecorded as exc:
        if progress is not None:
            progress(f"{exc.message}: packing again, every file read by the scan")
        return _pack(options, progress, writing, defer=False)


def _pack(
    options: PackOptions,
    progress: Progress | None,
    writing: ProgressSink | None,
    *,
    defer: bool,
) -> PackResult:
    say = progress or _quiet
    start = probe.start(options)
    with _scratch() as (temp, background, stack):
        probed = probe.probe(start, background, say)
        facts = probed.facts
        target = output.target(start.options, start.config, facts)
        base = delta.open_base(start.options, target)  # before the long part
        env = probe.environment(start, facts, background)
        # before the long part: a [kernels.<dist>] of repro.toml that names nothing fails here
        carried = kernelsources.kernel_sources(start, env, say)
        selected = vaulting.select(start, env, temp, background)
        scanned = scanning.scan(
            start, facts, selected.selection, target, defer=defer, stack=stack, say=say
        )
        patched = scanning.patches(start, facts, scanned, temp)
        # before anything is written: --require-gpu fails the pack here
        audited = kernels.audit(start, facts, sources=carried.sources, say=say)
        vaulted = vaulting.plan(start, env, selected, scanned.report, patched.carriers, target, say)
        parts = workspace_stage.gather(start, facts, env, say)
        cached = caches.gather(start, facts, parts.units, say)
        locked = locks.locks(start, probed, env, selected, vaulted)
        assembled = members.assemble(
            start,
            facts,
            env,
            target,
            scanned.report,
            (patched, vaulted, locked, parts),
            kernels=audited,
            sources=carried,
            caches=cached,
            temp=temp,
            say=say,
            base=(base.ref, base.info.created) if base is not None else None,
        )
        if base is not None:
            say(f"leaving out what {start.options.base} holds already")
            assembled = delta.subtract(assembled, base, jobs=start.options.jobs)
        cache = scanned.cache
        del scanned  # the scan's results (one per installed file) go before the writing
        size = members.write(assembled, target, start, progress=writing, say=say)
        cache.commit()
    stages = (patched, vaulted, parts, assembled)
    return report.result(
        start.options,
        target,
        len(facts.distributions),
        stages,
        size,
        sources=carried,
        caches=cached,
    )


@contextlib.contextmanager
def _scratch() -> Iterator[tuple[Path, Executor, contextlib.ExitStack]]:
    """A temporary directory, a pool for the background jobs, and a stack for what a
    failed pack undoes (the scan cache's staged file); all gone when the pack ends."""
    with (
        tempfile.TemporaryDirectory(prefix="repro-pack-") as temp,
        ThreadPoolExecutor(max_workers=5, thread_name_prefix="pack-") as background,
        contextlib.ExitStack() as stack,
    ):
        yield Path(temp), background, stack


def _quiet(message: str) -> None:
    del message
