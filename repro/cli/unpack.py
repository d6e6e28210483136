"""`repro unpack BUNDLE` and `repro unpatch TARGET`."""

from __future__ import annotations

from pathlib import Path

import click
from rich.console import Console
from rich.table import Table

from repro.cli._common import echo_json, signature_options
from repro.errors import EXIT_OK
from repro.install.smoke import ladder_step
from repro.install.state import STATE_DIR
from repro.install.unpack import UnpackOptions, UnpackReport, unpack, unpatch_target
from repro.ladder import RungResult
from repro.signing import SignaturePolicy

STYLE = {
    "done": "green",
    "pass": "green",
    "already done": "cyan",
    "skipped": "yellow",
    "warn": "yellow",
    "fail": "bold red",
    "failed": "bold red",
    "will run": "magenta",
    "would run": "magenta",
    "needs": "yellow",
}


@click.command("unpack")
@click.argument("bundle")
@click.option(
    "--target", type=click.Path(path_type=Path), help="Venv to create (default ./NAME-VERSION)."
)
@click.option("--python", type=click.Path(path_type=Path), help="Interpreter for the new venv.")
@click.option("--offline", is_flag=True, help="Install from the bundle's wheel vault only.")
@click.option(
    "--installer", type=click.Choice(["auto", "uv", "pip"]), default="auto", show_default=True
)
@click.option("--cpu", is_flag=True, help="A CPU-only rebuild is intended (no GPU needed).")
@click.option("--force", is_flag=True, help="Turn preflight failures into warnings.")
@click.option("--dry-run", is_flag=True, help="Stop after the preflight and print the plan.")
@click.option("--replace", is_flag=True, help="Rebuild a target that holds another bundle.")
@click.option("--models", type=click.Path(path_type=Path), help="Where model weights live.")
@click.option("--install-units", is_flag=True, help="Copy units into /etc/systemd/system.")
@click.option("--no-smoke", is_flag=True, help="Do not run the smoke ladder at the end.")
@click.option(
    "--no-exec",
    is_flag=True,
    help="Run nothing from the bundle: print the server and unit commands instead; the "
    "smoke ladder runs only the interpreter check.",
)
@signature_options
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON on stdout.")
def unpack_command(
    bundle: str,
    target: Path | None,
    python: Path | None,
    offline: bool,
    installer: str,
    cpu: bool,
    force: bool,
    dry_run: bool,
    replace: bool,
    models: Path | None,
    install_units: bool,
    no_smoke: bool,
    no_exec: bool,
    allowed_signers: Path | None,
    identity: str | None,
    require_signature: bool,
    as_json: bool,
) -> int:
    """Rebuild BUNDLE (a file, a directory, '-' for stdin, or an http(s) URL) into a fresh
    venv: verify, preflight, install, patch, render units, check models, smoke ladder."""
    console = Console(stderr=True)

    def event(step: str, status: str, detail: str) -> None:
        style = STYLE.get(status, "white")
        # soft_wrap: a command is printed on one line, exactly, never broken by rich.
        console.print(
            f"[{style}]{status:>12}[/{style}] {step}: {detail}", highlight=False, soft_wrap=True
        )

    def rung(result: RungResult) -> None:
        event(f"smoke {result.name}", result.status.value, result.summary)

    options = UnpackOptions(
        bundle=bundle,
        target=target,
        python=python,
        offline=offline,
        installer=installer,  # type: ignore[arg-type]
        cpu=cpu,
        force=force,
        dry_run=dry_run,
        replace=replace,
        models=models,
        install_units=install_units,
        smoke=not no_smoke,
        no_exec=no_exec,
        signature=SignaturePolicy(allowed_signers, identity, require_signature),
    )
    log_dir = (target.resolve() / STATE_DIR) if target else None
    report = unpack(
        options,
        events=event,
        smoke=ladder_step(cpu=cpu, no_exec=no_exec, log_dir=log_dir, on_rung=rung),
    )
    if as_json:
        echo_json(report.to_json())
    else:
        _summary(console, report)
    return EXIT_OK


def _summary(console: Console, report: UnpackReport) -> None:
    table = Table(title=f"unpack {report.name} {report.version} -> {report.target}")
    table.add_column("step")
    table.add_column("status")
    table.add_column("detail")
    for step in report.steps:
        style = STYLE.get(step.status, "white")
        table.add_row(step.name, f"[{style}]{step.status}[/{style}]", step.detail)
    console.print(table)
    for line in report.would_run:
        console.print(f"--no-exec: not run: {line}", highlight=False, soft_wrap=True)
    if report.plan is not None:
        console.print(f"dry run, nothing was created: {report.plan}", soft_wrap=True)
    elif not report.changed:
        console.print("nothing to do: the target is already in the bundle's state")


@click.command("unpatch")
@click.argument("target", type=click.Path(path_type=Path, exists=True, file_okay=False))
@click.option("--force", is_flag=True, help="Restore even files changed since patching.")
def unpatch_command(target: Path, force: bool) -> int:
    """Restore the original files that `repro unpack` patched in TARGET; the next
    `repro unpack` of the same bundle into TARGET applies the patches again."""
    restored = unpatch_target(target, force=force)
    for path in restored:
        click.echo(f"restored {path}", err=True)
    return EXIT_OK
