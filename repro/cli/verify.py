"""`repro verify TARGET`: has an unpacked target drifted from its bundle?"""

from __future__ import annotations

from pathlib import Path

import click

from repro.cli._common import (
    diagnostic_console,
    echo_json,
    jobs_option,
    progress_wanted,
    verbosity_options,
)
from repro.cli._progress import hash_progress
from repro.cli._terminal import echo
from repro.errors import EXIT_INVALID, EXIT_OK
from repro.install.drift import describe_rebuilt, target_drift, target_info


@click.command("verify", short_help="Check an unpacked target for drift from its bundle.")
@click.argument("target", type=click.Path(path_type=Path, exists=True, file_okay=False))
@click.option("--json", "as_json", is_flag=True, help="Print the differences as JSON.")
@click.option(
    "--weights",
    is_flag=True,
    help="Check the models' weight files against their pins too: size, safetensors "
    "header and sha256 of each (reads every weight file).",
)
@jobs_option
@verbosity_options
def verify_command(
    target: Path, as_json: bool, weights: bool, jobs: int | None, quiet: bool, verbose: bool
) -> int:
    """Check TARGET, written by `repro unpack`, against the bundle it was unpacked from:
    the installed distributions, the patched files, the restored workspace files and
    the rendered units (--weights: the models' weight files too). Exit 0 when nothing
    drifted, 1 when something did."""
    console = diagnostic_console()
    with hash_progress(
        console,
        enabled=weights and progress_wanted(quiet),
        description="hashing weights",
        delay=0,
    ) as bar:
        drift = target_drift(target.resolve(), jobs=jobs, weights=weights, progress=bar)
    rebuilt = describe_rebuilt(target_info(target.resolve())[0])
    if as_json:
        echo_json(
            {
                "target": str(target),
                "ok": not drift,
                "drift": [d.to_json() for d in drift],
                "rebuilt": rebuilt,
            }
        )
    else:
        for line in rebuilt if not quiet else ():
            echo(line, err=True)
        for item in drift:
            echo(item.describe())
        if quiet:
            return EXIT_INVALID if drift else EXIT_OK
        echo(
            f"{target}: {len(drift)} difference(s) from its bundle"
            if drift
            else f"{target}: matches its bundle",
            err=True,
        )
    return EXIT_INVALID if drift else EXIT_OK
