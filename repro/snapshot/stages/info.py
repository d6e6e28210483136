"""Stage `info`: bundle.toml (name, version, when, the source box, launch, ladder,
models, where the venv goes) and the facts REPRODUCE.md is rendered from."""

from __future__ import annotations

import contextlib
import os
import re
import shlex
from collections.abc import Sequence
from datetime import datetime, timezone
from pathlib import Path

from repro import __version__
from repro.bundle import layout
from repro.bundle.environment import EnvironmentFacts
from repro.bundle.info import BundleInfo, LadderInfo, ModelRef, WorkspaceInfo, source_info
from repro.config import Config
from repro.diffapply import count_diff_lines
from repro.snapshot.scan.patches import CollectedPatch
from repro.snapshot.stages.output import Target
from repro.snapshot.stages.workspace import WorkspaceParts, launch
from repro.snapshot.vault.build import VaultReport
from repro.snapshot.workspace.models import ModelReference
from repro.snapshot.write.reproduce import PatchSummary, ReproduceFacts, model_entry

_PLAIN_WORD = re.compile(r"[\w@%+=:,./${}-]+")


def describe_bundle(
    target: Target,
    config: Config,
    facts: EnvironmentFacts,
    workspace: WorkspaceParts,
    source: Path,
    epoch: int,
) -> BundleInfo:
    created = datetime.fromtimestamp(epoch, tz=timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    return BundleInfo(
        name=target.name,
        version=target.version,
        created=created,
        tool_version=__version__,
        source=source_info(facts),
        launch=launch(config, workspace.units),
        ladder=LadderInfo(
            rungs=config.ladder.rungs,
            expected_text=None,
            timeout_s=config.ladder.timeout,
        ),
        models=tuple(_model_ref(ref) for ref in workspace.models),
        workspace=WorkspaceInfo(venv=venv_place(source, Path(facts.python.prefix))),
    )


def _model_ref(ref: ModelReference) -> ModelRef:
    return ModelRef(
        name=ref.name,
        role=ref.role,  # type: ignore[arg-type]
        total_bytes=ref.total_bytes,
        file_count=ref.file_count,
        repo_id=ref.repo_id,
        revision=ref.revision,
        local_path=ref.local_path or None,
        small_files=dict(ref.small_files),
        large_files=dict(ref.large_files),
        present=ref.present,
        weights=ref.weights,
        weights_hashed=ref.weights_hashed,
    )


def venv_place(source: Path, prefix: Path) -> str:
    """Where the venv goes under the target: its place in the workspace, or `venv` for
    a venv that lives elsewhere on the source box."""
    for inner, outer in (
        (Path(os.path.abspath(prefix)), source),
        (prefix.resolve(), source.resolve()),
    ):
        if inner.is_relative_to(outer):
            return inner.relative_to(outer).as_posix() or "."
    return "venv"


def record_mtime(facts: EnvironmentFacts) -> int:
    """The newest mtime of the distributions' RECORD files: when the venv last changed."""
    times = []
    for dist in facts.distributions:
        record = Path(dist.metadata_dir) / "RECORD"
        with contextlib.suppress(OSError):
            times.append(int(record.stat().st_mtime))
    return max(times, default=0)


def _display(argv: Sequence[str]) -> str:
    """A command for people to read: words quoted only where a shell needs it, the
    ${REPRO_*} variables left readable."""
    return " ".join(arg if _PLAIN_WORD.fullmatch(arg) else shlex.quote(arg) for arg in argv)


def reproduce_facts(
    info: BundleInfo,
    facts: EnvironmentFacts,
    bundle_file: str,
    vault: VaultReport,
    patches: Sequence[CollectedPatch],
    workspace: WorkspaceParts,
    *,
    kernel_sources: Sequence[str] = (),
) -> ReproduceFacts:
    source = info.source
    hardware = [
        f"GPU: {gpu.name} (compute capability {gpu.compute_capability}, {gpu.memory_mib} MiB)"
        for gpu in source.gpus
    ]
    if source.driver:
        hardware.append(f"NVIDIA driver {source.driver} (CUDA {source.cuda_driver_version})")
    environment = [
        f"Python {source.python} ({source.implementation}) on {source.platform}, glibc "
        f"{source.glibc or 'unknown'}",
        f"{len(facts.distributions)} distributions; torch {source.torch or 'not installed'}"
        + (f" built for CUDA {source.torch_cuda}" if source.torch_cuda else ""),
    ]
    if source.torch_arch_list:
        torch = next((m for m in facts.modules if m.module == "torch"), None)
        how = (
            "kernels in torch/lib/libtorch_cuda.so"
            if torch is not None and torch.probed == "files"
            else "torch.cuda.get_arch_list()"
        )
        environment.append(f"torch arch list ({how}): {', '.join(source.torch_arch_list)}")
    if facts.cuda_toolkit.nvcc_version:
        environment.append(f"nvcc {facts.cuda_toolkit.nvcc_version}")
    summaries = []
    for patch in patches:
        added, removed = count_diff_lines(patch.diff or "")
        entry = patch.entry
        summaries.append(
            PatchSummary(entry.dist, entry.version, entry.path, entry.kind, added, removed)
        )
    launch_lines = []
    for command in info.launch.commands:
        text = command.shell or _display(command.argv or ())
        origin = f"from {layout.unit(command.unit)}" if command.unit else "from repro.toml [launch]"
        launch_lines.append(
            (f"{command.name} ({command.engine}, port {command.port}; {origin})", text)
        )
    model_lines = [model_entry(m) for m in info.models]
    return ReproduceFacts(
        name=info.name,
        version=info.version,
        top=info.top_dir,
        bundle_file=bundle_file,
        created=info.created,
        tool_version=info.tool_version,
        python_version=source.python,
        hardware=hardware,
        environment=environment,
        torch_cuda=source.torch_cuda or "n/a",
        vault=[(w.filename, w.reason, w.source) for w in vault.wheels],
        patches=summaries,
        services=[u.name for u in workspace.units],
        launch=launch_lines,
        models=model_lines,
        kernel_sources=kernel_sources,
    )
