"""Command-line interface. The only package that imports click or prints.

Each command lives in its own module, parses options, calls one library
function, renders its result and maps ReproError to an exit code.
"""

from __future__ import annotations

import click

from repro import __version__
from repro.cli._common import run_guarded
from repro.cli.check import check_command
from repro.cli.demo import demo_command
from repro.cli.diff import diff_command
from repro.cli.init import init_command
from repro.cli.inspect import inspect_command
from repro.cli.pack import pack_command
from repro.cli.scan import scan_command
from repro.cli.smoke import smoke_command
from repro.cli.unpack import unpack_command, unpatch_command

COMMANDS: list[click.Command] = [
    check_command,
    demo_command,
    diff_command,
    init_command,
    inspect_command,
    pack_command,
    scan_command,
    smoke_command,
    unpack_command,
    unpatch_command,
]


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="repro")
def cli() -> None:
    """Pack a GPU model-serving environment into a verified bundle and rebuild it elsewhere."""


for _command in COMMANDS:
    cli.add_command(_command)


def main() -> None:
    run_guarded(cli)
