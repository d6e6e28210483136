"""`repro inspect BUNDLE`: what a bundle holds and whether it verifies."""

from __future__ import annotations

import sys

import click
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from repro.cli._common import (
    diagnostic_console,
    echo_json,
    jobs_option,
    result_console,
    verbosity_options,
)
from repro.cli._terminal import echo, echo_content
from repro.errors import EXIT_GPU_NO_CODE, EXIT_INVALID, EXIT_OK
from repro.gpu.arch import Verdict
from repro.gpu.targets import parse_gpus
from repro.verbs.inspection import GpuPlan, InspectReport, copy_member, gpu_plan, inspect_bundle

INSPECT_EPILOG = """\b
Exit codes:
  0  the manifest verifies (--gpu: and every distribution has native code there)
  1  it does not (everything is still shown); --gpu: some distribution runs there
     only by the driver's PTX JIT (slow first start)
  2  the bundle cannot be read; --gpu: it has no env/kernels.toml (an older repro)
  4  --gpu: some distribution has no code at all for a GPU asked about
"""

_STYLE = {Verdict.PASS: "green", Verdict.WARN: "yellow", Verdict.FAIL: "bold red"}


@click.command(
    "inspect",
    short_help="Show what a bundle holds and whether it verifies.",
    epilog=INSPECT_EPILOG,
)
@click.argument("bundle")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON document on stdout.")
@click.option("--patches", "show_patches", is_flag=True, help="Also print the patch diffs.")
@click.option(
    "--file",
    "member",
    metavar="PATH",
    help="Print the bytes of one member (e.g. env/environment.json) to stdout.",
)
@click.option(
    "--gpu",
    "gpus",
    multiple=True,
    metavar="ARCH",
    help="Plan a move: judge every distribution's GPU code for this GPU (sm_103, 10.3, "
    "sm_120a, B300, H200, 'RTX PRO 6000'; repeatable). Exit 0 native, 1 PTX JIT only, "
    "4 no code.",
)
@jobs_option
@verbosity_options
def inspect_command(
    bundle: str,
    as_json: bool,
    show_patches: bool,
    member: str | None,
    gpus: tuple[str, ...],
    jobs: int | None,
    quiet: bool,
    verbose: bool,
) -> int:
    """Show what BUNDLE (an archive, '-' for stdin, an archive's http(s) URL, or a bundle
    directory) holds, on stdout (-q: only the verdict and problems; -v: every member
    that verified too).

    Nothing is extracted: an archive is read once, every member hashed and the
    manifest verified in the same pass. Exit 0: the manifest verifies; 1: it does
    not (everything is still shown); 2: the bundle cannot be read.
    """
    console = diagnostic_console()
    targets = parse_gpus(gpus)
    if member is not None:
        if as_json or show_patches or targets:
            raise click.UsageError(
                "--file prints raw bytes; it takes no --json, --patches or --gpu"
            )
        copied = copy_member(bundle, member, sys.stdout.buffer)
        if not copied.verified:
            why = "is not in the manifest" if copied.expected is None else "does not match"
            console.print(f"[bold red]warning:[/] {escape(member)} {why} the manifest's digest")
            return EXIT_INVALID
        return EXIT_OK
    report = inspect_bundle(bundle, jobs=jobs)
    if targets:
        return _plan_command(console, report, gpu_plan(report.view, targets), as_json=as_json)
    if as_json:
        document = report.to_json()
        if show_patches:
            document["diffs"] = {f"{p.dist}/{p.path}": p.diff for p in report.patches}
        echo_json(document)
    else:
        _render(result_console(), report, quiet=quiet, verbose=verbose)
        if show_patches:
            _print_diffs(report)
    return EXIT_OK if report.verified else EXIT_INVALID


def _plan_command(console: Console, report: InspectReport, plan: GpuPlan, *, as_json: bool) -> int:
    """The plan of a move on stdout; its exit code, or 1 for a manifest that does not
    verify (unless some distribution has no code: 4 says more)."""
    if as_json:
        document = report.to_json()
        document["gpu_plan"] = plan.to_json()
        echo_json(document)
    else:
        out = result_console()
        _print_plan(out, report, plan)
        out.print(f"manifest: {_verdict(report)}")
    code = plan.exit_code
    if not report.verified and code != EXIT_GPU_NO_CODE:
        console.print("[bold red]warning:[/] the bundle does not verify (see above)")
        code = EXIT_INVALID
    return code


def _print_plan(console: Console, report: InspectReport, plan: GpuPlan) -> None:
    """One block per distribution with GPU code, one line per GPU: the verdict, the
    shared object that decides it, and whether the bundle can rebuild it there."""
    gpus = ", ".join(t.label for t in plan.targets)
    console.print(escape(f"{report.view.label}: GPU code on {gpus}"), soft_wrap=True)
    if not plan.judgements:
        console.print("  no distribution carries GPU code")
    current = None
    for target, judgement in plan.judgements:
        if judgement.name != current:
            current = judgement.name
            console.print(escape(f"{judgement.name} {judgement.version}"), soft_wrap=True)
        style = _STYLE[judgement.verdict]
        line = (
            f"  {escape(target.label)}: [{style}]{escape(judgement.words)}[/] "
            f"({escape(judgement.deciding)}: {escape(judgement.detail.message)})"
        )
        if judgement.verdict is not Verdict.PASS:
            line += "; rebuild there: " + (
                "yes, the bundle carries its source" if judgement.rebuildable else "no"
            )
        console.print(line, soft_wrap=True, highlight=False)


def _render(console: Console, report: InspectReport, *, quiet: bool, verbose: bool) -> None:
    if not quiet:
        console.print(_table(report))
    else:
        console.print(f"manifest: {_verdict(report)}")
    view = report.view
    if view.check is not None:
        if verbose:
            for path in view.check.verified:
                console.print(f"[green]OK[/]         {escape(path)}")
        for mismatch in view.check.mismatched:
            console.print(f"[bold red]MISMATCH[/]   {escape(mismatch.path)}")
        for path in view.check.missing:
            console.print(f"[bold red]MISSING[/]    {escape(path)}")
        for unlisted in view.check.unlisted:
            console.print(f"[bold red]UNLISTED[/]   {escape(unlisted.path)}")
        for unreadable in view.check.unreadable:
            console.print(f"[bold red]UNREADABLE[/] {escape(unreadable.path)}")


def _table(report: InspectReport) -> Table:
    view = report.view
    info = view.info
    source = view.origin
    title = f"{info.name} {info.version}" if info else view.target
    table = Table(title=escape(title), show_header=False, title_justify="left")
    table.add_column(style="bold")
    table.add_column()

    def row(label: str, value: str) -> None:
        table.add_row(label, escape(value))

    row("bundle", view.target)
    if info is not None:
        row(
            "created", f"{info.created} by repro {info.tool_version} (format {info.format_version})"
        )
    gpus = [f"{g.name} (sm {g.compute_capability}, {g.memory_mib} MiB)" for g in source.gpus]
    row("hardware", "\n".join(gpus) or "no GPU recorded")
    driver = source.driver or "none"
    if source.cuda_driver_version:
        driver += f" (CUDA {source.cuda_driver_version})"
    row("driver", driver)
    row("python", f"{source.python} ({source.implementation}) on {source.platform}")
    torch = source.torch or "not installed"
    if source.torch_cuda:
        torch += f", CUDA {source.torch_cuda}"
    if report.modules_probed is not None:
        torch += " (read from files)" if report.modules_probed == "files" else " (imported)"
    row("torch", torch)
    row("arch list", " ".join(source.torch_arch_list) or "none")
    row("distributions", str(report.distributions))
    row(
        "vault wheels",
        "\n".join(f"{w.filename} ({w.reason}; {w.source})" for w in report.vault) or "none",
    )
    patch_lines = []
    for dist, patches in report.patches_by_dist().items():
        patch_lines.append(f"{dist} {patches[0].version}:")
        for patch in patches:
            counts = "no diff" if patch.added is None else f"+{patch.added} -{patch.removed}"
            patch_lines.append(f"  {patch.path} ({patch.kind}, {counts})")
    row("patches", "\n".join(patch_lines) or "none")
    row("units", "\n".join([*report.units, *(f"  {f}" for f in report.unit_files)]) or "none")
    models = []
    for model in report.models:
        where = model.repo_id or model.local_path or "?"
        if model.revision:
            where += f" @ {model.revision}"
        models.append(
            f"{model.name} ({model.role}): {where}, {model.file_count} files, "
            f"{model.total_bytes / 2**20:.1f} MiB"
        )
    row("models", "\n".join(models) or "none")
    row("files", "\n".join(f"{path} ({size} bytes)" for path, size in report.files) or "none")
    if report.caches:
        row("compile caches", "\n".join(cache.describe() for cache in report.caches))
    table.add_row("manifest", _verdict(report))
    return table


def _verdict(report: InspectReport) -> str:
    view = report.view
    if view.check is None:
        return f"[bold red]does not verify[/]: {escape(view.manifest_problem or '')}"
    counts = f"{len(view.check.verified)} files verified"
    if report.verified:
        return f"[green]verifies[/] ({counts})"
    problems = [
        f"{len(items)} {label}"
        for label, items in (
            ("mismatched", view.check.mismatched),
            ("missing", view.check.missing),
            ("unlisted", view.check.unlisted),
            ("unreadable", view.check.unreadable),
            ("rejected", view.check.rejected),
        )
        if items
    ]
    return f"[bold red]does not verify[/]: {', '.join(problems) or counts}"


def _print_diffs(report: InspectReport) -> None:
    for patch in report.patches:
        if patch.diff is not None:
            echo_content(patch.diff, nl=not patch.diff.endswith("\n"))
        else:
            echo(f"# {patch.dist}: {patch.path} ({patch.kind}): no diff in the bundle")
