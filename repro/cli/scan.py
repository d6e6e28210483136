"""`repro scan`: a debsums for pip. Exit 0 when clean, 1 when patches are found."""

from __future__ import annotations

from pathlib import Path

import click
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from repro.cli._common import (
    PYTHON,
    diagnostic_console,
    echo_json,
    jobs_option,
    progress_wanted,
    result_console,
    verbosity_options,
)
from repro.cli._terminal import echo, echo_content
from repro.errors import EXIT_INVALID, EXIT_OK
from repro.snapshot.scan.compare import ScanReport
from repro.snapshot.scan.run import ScanRequest, scan_target


@click.command("scan", short_help="List the files of installed packages that differ from RECORD.")
@click.option(
    "--python",
    "python",
    type=PYTHON,
    help="Interpreter (or venv directory) of the environment to scan.",
)
@click.option(
    "--venv", type=click.Path(path_type=Path), help="Environment directory (uses its bin/python)."
)
@click.option("--json", "as_json", is_flag=True, help="Print one JSON document on stdout.")
@click.option(
    "--ignore", multiple=True, metavar="GLOB", help="Paths to ignore (repeatable), e.g. '*.orig'."
)
@click.option(
    "--diff", "show_diff", is_flag=True, help="Show a unified diff of each modified file."
)
@click.option(
    "--pristine",
    type=click.Path(exists=True, path_type=Path),
    help="Wheel or unpacked tree holding the original files (else pip's cache or a download).",
)
@jobs_option
@verbosity_options
@click.argument("packages", nargs=-1)
def scan_command(
    python: Path | None,
    venv: Path | None,
    as_json: bool,
    ignore: tuple[str, ...],
    show_diff: bool,
    pristine: Path | None,
    jobs: int | None,
    quiet: bool,
    verbose: bool,
    packages: tuple[str, ...],
) -> int:
    """Compare installed files with their RECORD hashes and list modified, added and deleted
    files per distribution (all distributions, or the PACKAGES named).

    The table and the verdict go to stdout (-q: the table only when something is
    patched; -v: the distributions skipped too), what could not be read to stderr.
    Exit status: 0 clean, 1 patches found, 2 usage error.
    """
    diagnostics = diagnostic_console()
    request = ScanRequest(
        python=python,
        venv=venv,
        packages=packages or None,
        ignore=ignore,
        jobs=jobs,
        diffs=show_diff,
        pristine=pristine,
    )
    hashing = diagnostics.status("hashing installed files") if progress_wanted(quiet) else None
    result = scan_target(request, hashing=hashing)
    if as_json:
        echo_json(result.to_json())
    else:
        _render(result_console(), diagnostics, result.report, quiet=quiet, verbose=verbose)
        for path, diff in (result.diffs or {}).items():
            if diff is None:
                echo(f"# {path}: pristine file not available")
            else:
                echo_content(diff)
    return EXIT_OK if result.report.clean else EXIT_INVALID


def _render(
    console: Console, diagnostics: Console, report: ScanReport, *, quiet: bool, verbose: bool
) -> None:
    if report.patched:
        table = Table(title="patched files")
        for column in ("distribution", "kind", "path"):
            table.add_column(column)
        for item in report.patched:
            table.add_row(escape(f"{item.dist} {item.version}"), item.kind, escape(item.path))
        console.print(table)
    for skipped in report.skipped_files:
        diagnostics.print(f"[yellow]not read[/] {escape(skipped.describe())}")
    for bad in report.unreadable:
        diagnostics.print(
            f"[yellow]unreadable[/] {escape(bad.dist)}: {escape(bad.path)}: {escape(bad.error)}"
        )
    if verbose:
        for name, why in sorted(report.dists_skipped.items()):
            diagnostics.print(f"[dim]skipped {escape(name)}: {escape(why)}[/]")
    for path in report.ambiguous_added:
        console.print(f"[yellow]unattributed[/] {escape(path)} (directory shared by several dists)")
    if quiet and report.clean:
        return
    mib = report.bytes_checked / (1 << 20)
    verdict = "clean" if report.clean else f"{len(report.patched)} patched file(s)"
    console.print(
        f"{len(report.dists_scanned)} distributions, {report.files_checked} files, "
        f"{mib:.1f} MiB checked: {verdict}"
    )
