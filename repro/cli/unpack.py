"""`repro unpack BUNDLE` and `repro unpatch TARGET`."""

from __future__ import annotations

from pathlib import Path

import click
from rich.console import Console
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from repro.bundle.signing import SignaturePolicy
from repro.cli._common import (
    JOBS_DEFAULT,
    PYTHON,
    diagnostic_console,
    echo_json,
    progress_wanted,
    result_console,
    signature_options,
    verbosity_options,
)
from repro.cli._progress import hash_progress
from repro.errors import EXIT_OK
from repro.install.deploy.unitinstall import SYSTEMD_DIR
from repro.install.smoke import ladder_step
from repro.install.state import STATE_DIR
from repro.install.unpack import UnpackOptions, UnpackReport, unpack, unpatch_target
from repro.ladder import RungResult

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
    "backed up": "yellow",
    "started": "dim",
    "redo": "yellow",
}


UNPACK_EPILOG = """\b
Example:
  repro unpack dflash-3.tar --target /srv/dflash
  repro unpack https://host/dflash-3.tar --target /srv/dflash --offline

\b
Exit codes:
  0  rebuilt (or already in the bundle's state; --dry-run: the plan)
  1  the bundle does not verify, or the preflight failed
  2  usage error or unreadable bundle; a target holding another bundle, or another
     run holding its lock; a delta whose base is not --base OLD nor the target's
  3  install failed
  4  patch conflict: nothing was written
  5  smoke ladder failed
"""

UNPATCH_EPILOG = """\b
Exit codes:
  0  restored, or nothing was patched
  2  TARGET is not a target `repro unpack` wrote
  4  files changed since patching (nothing restored; --force restores anyway)
"""


@click.command(
    "unpack",
    short_help="Rebuild a bundle into a fresh venv and smoke-test it.",
    epilog=UNPACK_EPILOG,
)
@click.argument("bundle")
@click.option(
    "--target", type=click.Path(path_type=Path), help="Venv to create (default ./NAME-VERSION)."
)
@click.option("--python", type=PYTHON, help="Interpreter (or a venv directory) for the new venv.")
@click.option("--offline", is_flag=True, help="Install from the bundle's wheel vault only.")
@click.option(
    "--installer",
    type=click.Choice(["auto", "vault", "uv", "pip"]),
    default="auto",
    show_default=True,
    help="auto: the vault's own wheels when they cover every pin (repro unpacks them), "
    "else uv when installed, else pip-sync.",
)
@click.option("--cpu", is_flag=True, help="A CPU-only rebuild is intended (no GPU needed).")
@click.option(
    "--force",
    is_flag=True,
    help="Turn preflight failures into warnings; let --install-units take a unit name the "
    "box already uses (a unit file repro did not install is backed up first).",
)
@click.option("--dry-run", is_flag=True, help="Stop after the preflight and print the plan.")
@click.option("--replace", is_flag=True, help="Rebuild a target that holds another bundle.")
@click.option("--models", type=click.Path(path_type=Path), help="Where model weights live.")
@click.option(
    "--install-units", is_flag=True, help="Copy units into the units directory (--units-dir)."
)
@click.option(
    "--units-dir",
    type=click.Path(path_type=Path, file_okay=False),
    default=SYSTEMD_DIR,
    show_default=True,
    help="Where --install-units puts the units; systemd is reloaded only for its own.",
)
@click.option(
    "--verify-weights",
    is_flag=True,
    help="Check each pinned model weight file's sha256 too (reads every weight file; "
    "sizes and safetensors headers are checked always).",
)
@click.option("--no-smoke", is_flag=True, help="Do not run the smoke ladder at the end.")
@click.option(
    "--keep-bundle",
    is_flag=True,
    help="Keep the whole verified bundle in TARGET/.repro/bundle, its wheels too (by "
    "default they are removed once installed).",
)
@click.option(
    "--compile-bytecode",
    is_flag=True,
    help="Compile the venv's Python files to bytecode once they are final (after the "
    "patches), one process per core (as pip does, not uv): the server's first start, and "
    "every start where PYTHONDONTWRITEBYTECODE is set, then compiles none of its modules.",
)
@click.option(
    "--no-exec",
    is_flag=True,
    help="Run nothing from the bundle: print the server and unit commands instead, run no "
    "smoke rung, build no source distribution; see docs/unpack.md.",
)
@click.option(
    "--rebuild-kernels",
    type=click.Choice(["auto", "never", "always"]),
    default="auto",
    show_default=True,
    help="Rebuild the distributions whose source the bundle carries (kernels/) for this "
    "box's GPUs, after the install: auto, those with no code for a GPU here; always, "
    "every one; never, none (the preflight then fails on a distribution with no code).",
)
@click.option(
    "--base",
    metavar="OLD",
    help="BUNDLE is a delta (`repro pack --base`): OLD is its base (an archive, URL or "
    "directory); the full bundle is made from both, each member from OLD checked "
    "against BUNDLE's manifest, then unpacked as usual.",
)
@click.option(
    "--keep-releases",
    type=click.IntRange(min=0),
    default=2,
    show_default=True,
    help="An upgrade in place keeps what it replaced under TARGET/.repro/releases/<version>/ "
    "for `repro rollback`: this many releases, the oldest dropped.",
)
@signature_options
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON on stdout.")
@click.option(
    "-j",
    "--jobs",
    type=click.IntRange(min=1),
    default=None,
    help=f"Files hashed in parallel by the verification [default: {JOBS_DEFAULT}].",
)
@verbosity_options
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
    units_dir: Path,
    verify_weights: bool,
    no_smoke: bool,
    compile_bytecode: bool,
    no_exec: bool,
    keep_bundle: bool,
    rebuild_kernels: str,
    base: str | None,
    keep_releases: int,
    allowed_signers: Path | None,
    identity: str | None,
    require_signature: bool,
    as_json: bool,
    jobs: int | None,
    quiet: bool,
    verbose: bool,
) -> int:
    """Rebuild BUNDLE (a file, a directory, '-' for stdin, or an http(s) URL) into a fresh
    venv: verify, preflight, install, patch, render units, check models, smoke ladder.

    Each step is reported on stderr as it runs (-q: none of them); the summary table
    goes to stdout (--json: the report). Without --target the venv is ./NAME-VERSION.
    """
    console = diagnostic_console()

    def event(step: str, status: str, detail: str) -> None:
        if not (quiet or (status == "started" and not verbose)):
            style = STYLE.get(status, "white")
            # soft_wrap: a command is printed on one line, exactly, never broken by rich.
            console.print(f"[{style}]{status:>12}[/{style}] {escape(step)}: {escape(detail)}")

    def rung(result: RungResult) -> None:
        event(f"smoke {result.name}", result.status.value, result.summary)

    log_dir = (target.resolve() / STATE_DIR) if target else None
    with (
        hash_progress(
            console, enabled=progress_wanted(quiet), description="extracting", delay=0
        ) as bar,
        hash_progress(
            console,
            enabled=progress_wanted(quiet) and verify_weights,
            description="hashing weights",
            delay=0,
        ) as weights_bar,
    ):
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
            units_dir=units_dir.absolute(),
            smoke=not no_smoke,
            no_exec=no_exec,
            compile_bytecode=compile_bytecode,
            keep_bundle=keep_bundle,
            rebuild_kernels=rebuild_kernels,  # type: ignore[arg-type]
            base=base,
            keep_releases=keep_releases,
            signature=SignaturePolicy(allowed_signers, identity, require_signature),
            jobs=jobs,
            verify_weights=verify_weights,
            weights_progress=weights_bar,
        )

        # the extraction comes first: the first step reported ends its bar; the models
        # step's end ends the bar of --verify-weights
        def step(name: str, status: str, detail: str) -> None:
            if bar is not None:
                bar.close()
            if weights_bar is not None and name == "models" and status != "started":
                weights_bar.close()
            event(name, status, detail)

        report = unpack(
            options,
            events=step,
            smoke=ladder_step(cpu=cpu, log_dir=log_dir, on_rung=rung),
            progress=bar,
        )
    if as_json:
        echo_json(report.to_json())
    else:
        _summary(result_console(), report)
    return EXIT_OK


def _summary(console: Console, report: UnpackReport) -> None:
    table = Table(title=escape(f"unpack {report.name} {report.version} -> {report.target}"))
    table.add_column("step")
    table.add_column("status")
    table.add_column("detail")
    for step in report.steps:
        style = STYLE.get(step.status, "white")
        table.add_row(step.name, f"[{style}]{step.status}[/{style}]", escape(step.detail))
    console.print(table)
    for line in report.would_run:
        console.print(Text(f"--no-exec: not run: {line}"))
    if report.plan is not None:
        console.print(Text(f"dry run, nothing was created: {report.plan}"))
    elif not report.changed:
        console.print("nothing to do: the target is already in the bundle's state")


@click.command(
    "unpatch",
    short_help="Restore the files that unpack patched in a target.",
    epilog=UNPATCH_EPILOG,
)
@click.argument("target", type=click.Path(path_type=Path, exists=True, file_okay=False))
@click.option("--force", is_flag=True, help="Restore even files changed since patching.")
@verbosity_options
def unpatch_command(target: Path, force: bool, quiet: bool, verbose: bool) -> int:
    """Restore the original files that `repro unpack` patched in TARGET; the next
    `repro unpack` of the same bundle into TARGET applies the patches again. The files
    restored are listed on stdout."""
    restored = unpatch_target(target, force=force)
    console = result_console()
    for path in restored if not quiet else ():
        console.print(Text(f"restored {path}"))
    if not restored:
        console.print(Text(f"{target}: nothing was patched; nothing to restore"))
    return EXIT_OK
