"""Render REPRODUCE.md and setup_env.sh from bundle_templates/.

Templates use string.Template, so the bundle's own bootstrap needs no template
engine: REPRODUCE.md's placeholders are $name, setup_env.sh's are @@name (a bash
script is full of `$`); list sections are rendered here as Markdown and
substituted whole.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from importlib import resources
from shlex import quote
from string import Template

from repro.bundle import layout
from repro.bundle.info import ModelRef
from repro.bundle.modelplace import dir_name, expected_place, fetch_command
from repro.bundle.signing import FAILURES, NAMESPACE


@dataclass(frozen=True)
class PatchSummary:
    dist: str
    version: str
    path: str
    kind: str
    added_lines: int
    removed_lines: int


@dataclass(frozen=True)
class ReproduceFacts:
    name: str
    version: str
    top: str
    bundle_file: str
    created: str
    tool_version: str
    python_version: str
    hardware: Sequence[str] = ()
    environment: Sequence[str] = ()
    torch_cuda: str = "unknown"
    vault: Sequence[tuple[str, str, str]] = ()
    patches: Sequence[PatchSummary] = ()
    services: Sequence[str] = ()
    launch: Sequence[tuple[str, str]] = ()  # (what it is and where from, the command)
    models: Sequence[str] = ()
    kernel_sources: Sequence[str] = ()  # one line per carried source tree


class _ShellTemplate(Template):
    delimiter = "@@"


def model_entry(ref: ModelRef) -> str:
    """One model of REPRODUCE.md: identity and revision, size and file count, pinned
    or not, where the unit expects it, the command that fetches it."""
    identity = ref.repo_id or "identity unknown"
    revision = f" @ {ref.revision}" if ref.revision else " (no revision recorded)"
    if ref.present:
        size = f"{ref.total_bytes / 2**30:.2f} GiB in {ref.file_count} files"
    else:
        size = "not present when packed: size and files unknown"
    pins = getattr(ref, "weights", ())
    pinned = f"pinned ({len(pins)} weight file(s) by sha256)" if pins else "not pinned"
    dest = (
        f"TARGET/{ref.local_path}"
        if ref.in_workspace
        else f"TARGET/{layout.MODELS}/{dir_name(ref)}"
        if ref.local_path
        else ""
    )
    fetch = fetch_command(ref, dest) if ref.repo_id else None
    if fetch is None:
        fetch_line = "fetch: identity unknown; copy the model there from where it came from"
    else:
        fetch_line = f"fetch: `{fetch}`"
    recorded = f", recorded at {ref.local_path}" if ref.local_path else ""
    return "\n".join(
        [
            f"**{ref.name}** ({ref.role}): {identity}{revision}{recorded}",
            f"  - {size}; {pinned}",
            f"  - the unit expects it at {expected_place(ref)}",
            f"  - {fetch_line}",
        ]
    )


def _template_text(name: str) -> str:
    return resources.files("bundle_templates").joinpath(name).read_text(encoding="utf-8")


def _template(name: str) -> Template:
    return Template(_template_text(name))


def _bullets(items: Sequence[str], empty: str) -> str:
    return "\n".join(f"- {item}" for item in items) if items else f"_{empty}_"


def _patch_table(patches: Sequence[PatchSummary]) -> str:
    if not patches:
        return "_No installed file differs from its RECORD._"
    rows = [
        "| distribution | file | kind | lines |",
        "| --- | --- | --- | --- |",
    ]
    for patch in patches:
        lines = f"+{patch.added_lines} -{patch.removed_lines}"
        rows.append(f"| {patch.dist} {patch.version} | `{patch.path}` | {patch.kind} | {lines} |")
    rows.append("")
    rows.append(
        "Full patched files are under `patches/full/`, diffs against pristine under "
        "`patches/diffs/`; `repro unpack` applies them as one transaction."
    )
    return "\n".join(rows)


def _vault_table(vault: Sequence[tuple[str, str, str]]) -> str:
    if not vault:
        return "_No wheels: every distribution comes from the recorded indexes._"
    rows = ["| wheel | why | obtained |", "| --- | --- | --- |"]
    rows.extend(f"| `{filename}` | {why} | {source} |" for filename, why, source in vault)
    return "\n".join(rows)


def _launch_list(launch: Sequence[tuple[str, str]]) -> str:
    if not launch:
        return "_No launch command recorded._"
    blocks = [f"- {label}:\n\n      {command}" for label, command in launch]
    return "\n\n".join(blocks)


def render_reproduce(facts: ReproduceFacts) -> str:
    return _template("REPRODUCE.md.tmpl").substitute(
        name=facts.name,
        version=facts.version,
        top=facts.top,
        bundle_file=facts.bundle_file,
        created=facts.created,
        tool_version=facts.tool_version,
        python_version=facts.python_version,
        torch_cuda=facts.torch_cuda,
        hardware=_bullets(facts.hardware, "No GPU was visible on the source."),
        environment=_bullets(facts.environment, "No facts."),
        vault=_vault_table(facts.vault),
        patches=_patch_table(facts.patches),
        services=_bullets(facts.services, "No systemd units."),
        launch=_launch_list(facts.launch),
        models=_bullets(facts.models, "No model references."),
        kernel_sources=_bullets(
            facts.kernel_sources, "No source tree: nothing is rebuilt on the target."
        ),
    )


def _signature_failures() -> str:
    """signing.FAILURES as the arms of setup_env.sh's `case` over ssh-keygen's lowered
    words: the script names a bad signature as repro does."""
    return "\n".join(
        f"        *{quote(needle.lower())}*) why={quote(why)} ;;" for needle, why in FAILURES
    )


def render_setup_env(
    *, tool_version: str, tool_python: str, source_python: str, wheel_pythons: Sequence[str]
) -> str:
    """setup_env.sh for a bundle packed by repro `tool_version` on Python `tool_python`
    (X.Y) from an environment of Python `source_python`; `wheel_pythons`: the X.Y that
    tool/wheels can install repro on."""
    return _ShellTemplate(_template_text("setup_env.sh.tmpl")).substitute(
        tool_version=tool_version,
        tool_python=tool_python,
        source_python=source_python,
        wheel_pythons=", ".join(wheel_pythons) or "none",
        namespace=NAMESPACE,
        signature_failures=_signature_failures(),
    )
