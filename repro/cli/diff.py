"""`repro diff A [B]`: what changed between two bundles, or a bundle and a live env."""

from __future__ import annotations

from pathlib import Path

import click
from rich.markup import escape

from repro.cli._common import (
    PYTHON,
    diagnostic_console,
    echo_json,
    result_console,
    verbosity_options,
)
from repro.cli._terminal import echo, echo_content
from repro.errors import EXIT_INVALID, EXIT_OK
from repro.snapshot.facts.modulefiles import probed_by_import
from repro.verbs.diff import DiffReport, FactChange, TextChange, diff_views
from repro.verbs.view import load_bundle, load_environment


@click.command("diff", short_help="Compare two bundles, or a bundle and a live environment.")
@click.argument("a")
@click.argument("b", required=False)
@click.option(
    "--python",
    type=PYTHON,
    help="Compare A with the live environment of this interpreter (or venv) instead of B.",
)
@click.option("--json", "as_json", is_flag=True, help="Print one JSON document on stdout.")
@click.option(
    "-j", "--jobs", type=click.IntRange(min=1), help="Files hashed in parallel for --python."
)
@click.option(
    "--import-modules/--no-import-modules",
    default=None,
    help="With --python: import torch & co. in the live environment, or read them from "
    "files (default: the way bundle A was packed).",
)
@verbosity_options
def diff_command(
    a: str,
    b: str | None,
    python: Path | None,
    as_json: bool,
    jobs: int | None,
    import_modules: bool | None,
    quiet: bool,
    verbose: bool,
) -> int:
    """Compare bundle A with bundle B (archives, '-', http(s) URLs or directories), or with
    --python. The differences go to stdout.

    Reports distributions added, removed, upgraded and downgraded, vault wheels,
    patches (with the diff between the two patched versions), units, environment
    facts, model references and carried files. Exit 0: identical; 1: different;
    2: an input cannot be read.
    """
    if (b is None) == (python is None):
        raise click.UsageError("give either a second bundle B or --python PATH")
    if a == "-" and b == "-":
        raise click.UsageError("only one of A and B can be '-'")
    view_a = load_bundle(a, jobs=jobs)
    if python is not None:
        if import_modules is None:  # like for like: probe the way A's facts were gathered
            import_modules = probed_by_import(view_a.facts)
        view_b = load_environment(python, jobs=jobs, import_modules=import_modules)
    else:
        assert b is not None  # one of them, checked above
        view_b = load_bundle(b, jobs=jobs)
    report = diff_views(view_a, view_b)
    if as_json:
        echo_json(report.to_json())
    else:
        _render(report, quiet=quiet)
    return EXIT_OK if report.identical else EXIT_INVALID


def _say(text: str) -> None:
    echo(text)


def _render(report: DiffReport, *, quiet: bool) -> None:
    console = result_console()
    console.print(f"[bold]--- {escape(report.a_label)}[/] ({escape(report.a)})")
    console.print(f"[bold]+++ {escape(report.b_label)}[/] ({escape(report.b)})")
    if report.identical:
        console.print("[green]identical[/]")
    for change in report.distributions:
        _say(f"distribution {change.name}: {change.change} {_arrow(change.old, change.new)}")
    for wheel in report.vault:
        _say(f"vault {wheel.name}: {wheel.change} {_arrow(wheel.old, wheel.new)}")
    for patch in report.patches:
        kinds = _arrow(patch.old_kind, patch.new_kind)
        _say(f"patch {patch.dist}: {patch.path}: {patch.change} ({kinds})")
        if patch.diff:
            echo_content(patch.diff, nl=not patch.diff.endswith("\n"))
    _texts("unit", report.units)
    for fact in report.environment:
        _say(f"environment {fact.key}: {_arrow(fact.old, fact.new)}")
    for model in report.models:
        _say(f"model {model.name}: {model.change}")
        _facts("  ", model.fields)
        _texts("  file", model.files)
    _texts("file", report.files)
    if report.not_compared and not quiet:
        skipped = escape(", ".join(report.not_compared))
        diagnostic_console().print(f"[dim]not compared with a live environment: {skipped}[/]")


def _arrow(old: str | None, new: str | None) -> str:
    return f"{old if old is not None else '(none)'} -> {new if new is not None else '(none)'}"


def _facts(indent: str, facts: tuple[FactChange, ...]) -> None:
    for fact in facts:
        _say(f"{indent}{fact.key}: {_arrow(fact.old, fact.new)}")


def _texts(label: str, changes: tuple[TextChange, ...]) -> None:
    for change in changes:
        _say(f"{label} {change.path}: {change.change}")
        if change.diff:
            echo_content(change.diff, nl=not change.diff.endswith("\n"))
