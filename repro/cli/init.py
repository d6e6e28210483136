"""`repro init SOURCE`: write a commented repro.toml from what discovery finds."""

from __future__ import annotations

from pathlib import Path

import click

from repro.cli._common import verbosity_options
from repro.cli._terminal import echo
from repro.config import load_config
from repro.errors import EXIT_OK
from repro.snapshot.workspace.discovery import write_repro_toml


@click.command("init", short_help="Write a commented repro.toml for a workspace.")
@click.argument("source", type=click.Path(path_type=Path))
@click.option("--force", is_flag=True, help="Overwrite an existing repro.toml.")
@verbosity_options
def init_command(source: Path, force: bool, quiet: bool, verbose: bool) -> int:
    """Write SOURCE/repro.toml (venv, units, drafter, files found there) for review."""
    target = write_repro_toml(source, force=force)
    load_config(source)  # what init writes must load
    if not quiet:
        echo(f"wrote {target}", err=True)
    return EXIT_OK
