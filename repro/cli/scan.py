"""`repro scan`: a debsums for pip. Exit 0 when clean, 1 when patches are found."""

from __future__ import annotations

import os
from dataclasses import asdict
from pathlib import Path

import click
from rich.console import Console
from rich.table import Table

from repro.cli._common import echo_json
from repro.errors import EXIT_INVALID, EXIT_OK, UsageError
from repro.snapshot.environment import probe_environment
from repro.snapshot.scan import ScanReport, scan_environment


@click.command("scan")
@click.option(
    "--python",
    "python",
    type=click.Path(path_type=Path),
    help="Interpreter of the environment to scan.",
)
@click.option(
    "--venv", type=click.Path(path_type=Path), help="Environment directory (uses its bin/python)."
)
@click.option("--json", "as_json", is_flag=True, help="Print one JSON document on stdout.")
@click.option(
    "--ignore", multiple=True, metavar="GLOB", help="Paths to ignore (repeatable), e.g. '*.orig'."
)
@click.argument("packages", nargs=-1)
def scan_command(
    python: Path | None,
    venv: Path | None,
    as_json: bool,
    ignore: tuple[str, ...],
    packages: tuple[str, ...],
) -> int:
    """Compare installed files with their RECORD hashes and list modified, added and deleted
    files per distribution (all distributions, or the PACKAGES named).

    Exit status: 0 clean, 1 patches found, 2 usage error.
    """
    interpreter = _interpreter(python, venv)
    facts = probe_environment(interpreter)
    console = Console(stderr=True)
    with console.status("hashing installed files"):
        report = scan_environment(facts, packages=packages or None, ignore=ignore)
    if as_json:
        echo_json(_report_document(report, interpreter))
    else:
        _render(console, report)
    return EXIT_OK if report.clean else EXIT_INVALID


def _interpreter(python: Path | None, venv: Path | None) -> Path:
    if python is not None and venv is not None:
        raise UsageError("give --python or --venv, not both")
    if venv is not None:
        return venv / "bin" / "python"
    if python is not None:
        return python
    virtual_env = os.environ.get("VIRTUAL_ENV")
    if virtual_env:
        return Path(virtual_env) / "bin" / "python"
    raise UsageError(
        "no environment to scan", hint="pass --python PATH or --venv DIR, or activate a venv"
    )


def _report_document(report: ScanReport, interpreter: Path) -> dict[str, object]:
    return {
        "python": str(interpreter),
        "clean": report.clean,
        "dists_scanned": list(report.dists_scanned),
        "dists_skipped": dict(report.dists_skipped),
        "files_checked": report.files_checked,
        "bytes_checked": report.bytes_checked,
        "patched": [asdict(p) for p in report.patched],
        "unreadable": [asdict(u) for u in report.unreadable],
        "ambiguous_added": list(report.ambiguous_added),
    }


def _render(console: Console, report: ScanReport) -> None:
    if report.patched:
        table = Table(title="patched files")
        for column in ("distribution", "kind", "path"):
            table.add_column(column)
        for item in report.patched:
            table.add_row(f"{item.dist} {item.version}", item.kind, item.path)
        console.print(table)
    for bad in report.unreadable:
        console.print(f"[yellow]unreadable[/] {bad.dist}: {bad.path}: {bad.error}")
    for name, why in sorted(report.dists_skipped.items()):
        console.print(f"[dim]skipped {name}: {why}[/]")
    for path in report.ambiguous_added:
        console.print(f"[yellow]unattributed[/] {path} (directory shared by several dists)")
    mib = report.bytes_checked / (1 << 20)
    verdict = "clean" if report.clean else f"{len(report.patched)} patched file(s)"
    console.print(
        f"{len(report.dists_scanned)} distributions, {report.files_checked} files, "
        f"{mib:.1f} MiB checked: {verdict}"
    )
