"""`repro demo`: pack, check, tamper, unpack offline and smoke-test an example workspace."""

from __future__ import annotations

from pathlib import Path

import click
from rich.console import Console
from rich.text import Text

from repro.cli._common import diagnostic_console, echo_json, verbosity_options
from repro.errors import EXIT_INVALID, EXIT_OK
from repro.verbs.demo import DemoReport, DemoStep, run_demo


@click.command("demo", short_help="Run the whole round trip on an example; needs no GPU.")
@click.option(
    "--workdir",
    type=click.Path(path_type=Path, file_okay=False),
    help="The run's work directory, new or empty: the bundle, a tampered copy, the rebuilt "
    "environment (default: a new directory in the temp folder).",
)
@click.option(
    "--keep",
    is_flag=True,
    help="Keep the work directory (default: removed when the demo ends, passed or failed; "
    "the cached example workspace is kept either way).",
)
@click.option(
    "--torch/--no-torch",
    "with_torch",
    default=None,
    help="Put torch's CPU build in the example (default: when pip has it locally).",
)
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON on stdout.")
@verbosity_options
def demo_command(
    workdir: Path | None,
    keep: bool,
    with_torch: bool | None,
    as_json: bool,
    quiet: bool,
    verbose: bool,
) -> int:
    """Show the whole round trip on an example deployment; needs no GPU."""
    console = diagnostic_console()

    def say(step: DemoStep) -> None:
        if quiet:
            return
        mark = "[green]ok[/green]  " if step.ok else "[bold red]FAIL[/bold red]"
        # what a step proved names paths (the work directory): text, never markup
        line = Text.from_markup(mark)
        line.append(f" {step.name:9} {step.seconds:6.1f} s  {step.proved}")
        console.print(line, highlight=False)

    report = run_demo(workdir, keep=keep, with_torch=with_torch, say=say)
    if as_json:
        echo_json(report.to_json())
    _where(console, report)
    return EXIT_OK if report.ok else EXIT_INVALID


def _where(console: Console, report: DemoReport) -> None:
    """Where the run's files are, or that they are gone."""
    if report.kept:
        console.print(
            Text(f"work directory kept: {report.workdir}"), highlight=False, soft_wrap=True
        )
        if report.bundle is not None:
            console.print(Text(f"bundle: {report.bundle}"), highlight=False, soft_wrap=True)
        if report.target is not None:
            console.print(Text(f"rebuilt target: {report.target}"), highlight=False, soft_wrap=True)
        if not report.ok and report.logs is not None:
            console.print(
                Text(f"logs: {report.logs} (unpack-report.json, the ladder's logs)"),
                highlight=False,
                soft_wrap=True,
            )
        return
    again = " (run again with --keep to keep it and its logs)" if not report.ok else ""
    console.print(
        Text(f"work directory removed: {report.workdir}{again}"), highlight=False, soft_wrap=True
    )
