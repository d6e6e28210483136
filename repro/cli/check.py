"""`repro check TARGET`: verify a bundle directory or a MANIFEST.sha256."""

from __future__ import annotations

from pathlib import Path

import click
from rich.console import Console
from rich.text import Text

from repro.bundle.manifest import printable_path
from repro.bundle.manifestcheck import CheckReport
from repro.bundle.signing import SignaturePolicy
from repro.cli._common import (
    diagnostic_console,
    echo_json,
    jobs_option,
    progress_wanted,
    result_console,
    signature_options,
    verbosity_options,
)
from repro.cli._progress import hash_progress
from repro.errors import EXIT_INVALID, EXIT_OK
from repro.verbs.check import CheckOptions, check_target


@click.command("check", short_help="Verify a bundle (file, URL, directory) or a manifest.")
@click.argument("target")
@click.option("--strict", is_flag=True, help="Fail on malformed manifest lines.")
@click.option(
    "--ignore-missing",
    is_flag=True,
    help="Missing files are not failures (but something must verify), as in sha256sum.",
)
@click.option(
    "--base",
    metavar="OLD",
    help="For a delta bundle: check the members it takes from OLD (its base: an "
    "archive, URL or directory) against its manifest too.",
)
@click.option("--json", "as_json", is_flag=True, help="Print one JSON document on stdout.")
@jobs_option
@signature_options
@verbosity_options
def check_command(
    target: str,
    strict: bool,
    ignore_missing: bool,
    base: str | None,
    as_json: bool,
    jobs: int | None,
    quiet: bool,
    verbose: bool,
    allowed_signers: Path | None,
    identity: str | None,
    require_signature: bool,
) -> int:
    """Verify a bundle archive (streamed; - for stdin, or an http(s) URL), directory or
    MANIFEST.sha256.

    Reports every mismatched, missing, unlisted and unreadable file and every
    malformed manifest line at once, on stdout (-q: only the problems; -v: every
    file that verified too); the progress bar goes to stderr. Exit 0: everything
    listed verified and nothing is unlisted; 1: the bundle is invalid; 2: usage
    error or unreadable input, or --base is not the delta's base.

    A delta bundle (`repro pack --base`) passes with the members it takes from its
    base absent; the summary names the base it needs. With --base OLD those members
    are read from OLD and checked as well.
    """
    with hash_progress(diagnostic_console(), enabled=progress_wanted(quiet)) as bar:
        report = check_target(
            target,
            CheckOptions(
                jobs=jobs,
                progress=bar,
                signature=SignaturePolicy(allowed_signers, identity, require_signature),
                base=base,
            ),
        )
    passed = report.passed(ignore_missing=ignore_missing, strict=strict)
    if as_json:
        document = report.to_json()
        document.update(
            {"target": target, "passed": passed, "strict": strict, "ignore_missing": ignore_missing}
        )
        echo_json(document)
    else:
        _render(
            result_console(),
            report,
            passed=passed,
            strict=strict,
            ignore_missing=ignore_missing,
            quiet=quiet,
            verbose=verbose,
        )
    return EXIT_OK if passed else EXIT_INVALID


def _shown(path: str) -> str:
    """A path on one line: names with control characters are shown quoted and escaped."""
    text = printable_path(path)
    if text.isprintable() and text == path:
        return text
    return repr(text)


def _render(
    console: Console,
    report: CheckReport,
    *,
    passed: bool,
    strict: bool,
    ignore_missing: bool,
    quiet: bool,
    verbose: bool,
) -> None:
    def say(style: str, label: str, message: str) -> None:
        line = Text(f"{label:<10} ", style=style)
        line.append(message)
        console.print(line)

    source = report.source
    if verbose and not quiet:
        for path in report.verified:
            say("green", "OK", _shown(path))
    for mismatch in report.mismatched:
        say(
            "bold red",
            "MISMATCH",
            f"{_shown(mismatch.path)}\n{'':<11}expected {mismatch.expected}\n"
            f"{'':<11}actual   {mismatch.actual}",
        )
    if not (ignore_missing and quiet):
        for path in report.missing:
            say("yellow" if ignore_missing else "bold red", "MISSING", _shown(path))
    for unlisted in report.unlisted:
        kind = "" if unlisted.kind == "file" else f" ({unlisted.kind})"
        say("bold red", "UNLISTED", f"{_shown(unlisted.path)}{kind}")
    for unreadable in report.unreadable:
        say("bold red", "UNREADABLE", f"{_shown(unreadable.path)}: {unreadable.reason}")
    for rejected in report.rejected:
        say(
            "bold red",
            "REJECTED",
            f"{source}:{rejected.lineno}: {_shown(rejected.path)}: {rejected.reason}",
        )
    if not (quiet and not strict):
        for line in report.malformed:
            say(
                "bold red" if strict else "yellow",
                "MALFORMED",
                f"{source}:{line.lineno}: {line.reason}: {line.text!r}",
            )
    if quiet and passed:
        return
    console.print(Text(_summary(report, passed=passed, ignore_missing=ignore_missing)))
    if report.base is not None:
        console.print(Text(_delta_line(report)))


def _delta_line(report: CheckReport) -> str:
    """What a delta needs: its base, and how many members come from it."""
    assert report.base is not None
    count = len(report.from_base)
    if report.base_checked is not None:
        how = f"checked in {report.base_checked}"
    else:
        how = "not checked here (pass --base OLD to check them too)"
    return f"delta: needs base {report.base.describe()}; {count} member(s) come from it, {how}"


def _summary(report: CheckReport, *, passed: bool, ignore_missing: bool) -> str:
    counts = [f"{len(report.verified)} verified"]
    for label, items in (
        ("mismatched", report.mismatched),
        ("missing" + (" (ignored)" if ignore_missing else ""), report.missing),
        ("unlisted", report.unlisted),
        ("unreadable", report.unreadable),
        ("rejected", report.rejected),
        ("malformed lines", report.malformed),
    ):
        if items:
            counts.append(f"{len(items)} {label}")
    verdict = "OK" if passed else "FAILED"
    if not passed and not report.verified:
        verdict = "FAILED (no file was verified)"
    return f"{report.source}: {verdict}: {', '.join(counts)}"
