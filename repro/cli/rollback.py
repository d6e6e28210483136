"""`repro rollback TARGET [VERSION]`: return an upgraded target to a kept release."""

from __future__ import annotations

from pathlib import Path

import click

from repro.cli._common import echo_json, jobs_option, verbosity_options
from repro.cli._terminal import echo
from repro.errors import EXIT_OK
from repro.install.rollback import rollback

ROLLBACK_EPILOG = """\b
Example:
  repro rollback /srv/dflash        # back to the release before the last upgrade
  repro rollback /srv/dflash 3      # back to release 3 (nothing to do if it holds 3)
  repro rollback /srv/dflash 3 --dry-run --json   # what it would undo; nothing written

\b
Exit codes:
  0  rolled back (or a rollback cut short finished, or it already holds VERSION;
     --dry-run: the plan)
  1  the target drifted since it was unpacked (--force throws the drift away)
  2  usage error: not a target, no such release, another run holds its lock
"""


@click.command(
    "rollback", short_help="Return an upgraded target to a kept release.", epilog=ROLLBACK_EPILOG
)
@click.argument("target", type=click.Path(path_type=Path, exists=True, file_okay=False))
@click.argument("version", required=False)
@click.option("--force", is_flag=True, help="Roll back a target that drifted, naming what goes.")
@click.option(
    "--dry-run",
    is_flag=True,
    help="Say what would be undone, refuse as a real run would; write nothing.",
)
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
@jobs_option
@verbosity_options
def rollback_command(
    target: Path,
    version: str | None,
    force: bool,
    dry_run: bool,
    as_json: bool,
    jobs: int | None,
    quiet: bool,
    verbose: bool,
) -> int:
    """Return TARGET, upgraded in place by `repro unpack`, to the release VERSION it kept
    under TARGET/.repro/releases/ (default: the one before the last upgrade), file for
    file as it was. Run it again if it was interrupted."""

    def say(line: str) -> None:
        if not quiet:
            echo(line, err=True)

    result = rollback(target.resolve(), version, force=force, dry_run=dry_run, jobs=jobs, say=say)
    if as_json:
        echo_json(result.to_json())
    elif not quiet:
        undone = ", ".join(result.undone) or "nothing"
        if not dry_run:
            echo(f"{target}: holds {result.version} (undone: {undone})", err=True)
        elif result.finished_interrupted:
            echo(f"dry run: {target}: a run would finish what was cut short first", err=True)
        else:
            echo(
                f"dry run: {target} would hold {result.version} "
                f"(from {result.held}; undone: {undone})",
                err=True,
            )
    return EXIT_OK
