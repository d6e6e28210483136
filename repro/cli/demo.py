"""`repro demo`: pack, check, tamper, unpack offline and smoke-test an example workspace."""

from __future__ import annotations

import tempfile
from pathlib import Path

import click
from rich.console import Console

from repro.cli._common import echo_json
from repro.demo import DemoStep, run_demo
from repro.errors import EXIT_INVALID, EXIT_OK


@click.command("demo")
@click.option(
    "--workdir",
    type=click.Path(path_type=Path, file_okay=False),
    help="Where bundles and the rebuilt environment go (default: a new temp directory).",
)
@click.option(
    "--torch/--no-torch",
    "with_torch",
    default=None,
    help="Put torch's CPU build in the example (default: when pip has it locally).",
)
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON on stdout.")
def demo_command(workdir: Path | None, with_torch: bool | None, as_json: bool) -> int:
    """Show the whole round trip on an example deployment; needs no GPU."""
    console = Console(stderr=True)

    def say(step: DemoStep) -> None:
        mark = "[green]ok[/green]  " if step.ok else "[bold red]FAIL[/bold red]"
        console.print(f"{mark} {step.name:9} {step.seconds:6.1f} s  {step.proved}", highlight=False)

    root = workdir or Path(tempfile.mkdtemp(prefix="repro-demo-"))
    report = run_demo(root, with_torch=with_torch, say=say)
    if as_json:
        echo_json(report.to_json())
    if report.bundle is not None:
        console.print(f"bundle: {report.bundle}")
    return EXIT_OK if report.ok else EXIT_INVALID
