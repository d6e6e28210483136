"""Command-line interface. The only package that imports click or prints.

Each command lives in its own module, parses options, calls one library
function, renders its result and maps ReproError to an exit code.

Commands are loaded when they are run: importing every command module (and the
library behind it) at each start cost more than `repro check` of a small bundle takes
to hash it (bench/README.md, "Design choices and their measurements").
"""

from __future__ import annotations

import importlib

import click

from repro import __version__
from repro.cli._common import COLOR_KEY, COLOR_MODES, run_guarded

# command name -> "module:attribute" of its click command; add a command here.
COMMANDS: dict[str, str] = {
    "check": "repro.cli.check:check_command",
    "demo": "repro.cli.demo:demo_command",
    "diff": "repro.cli.diff:diff_command",
    "init": "repro.cli.init:init_command",
    "inspect": "repro.cli.inspection:inspect_command",
    "pack": "repro.cli.pack:pack_command",
    "rollback": "repro.cli.rollback:rollback_command",
    "sbom": "repro.cli.sbom:sbom_command",
    "scan": "repro.cli.scan:scan_command",
    "smoke": "repro.cli.smoke:smoke_command",
    "unpack": "repro.cli.unpack:unpack_command",
    "unpatch": "repro.cli.unpack:unpatch_command",
    "verify": "repro.cli.verify:verify_command",
}


def load_command(name: str) -> click.Command:
    """Import the module of command `name` and return its click command."""
    module_name, _, attribute = COMMANDS[name].partition(":")
    command = getattr(importlib.import_module(module_name), attribute)
    if not isinstance(command, click.Command):
        raise TypeError(f"{COMMANDS[name]} is not a click command")
    return command


class LazyGroup(click.Group):
    """A group whose commands are imported only when run (or listed by --help)."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*COMMANDS, *super().list_commands(ctx)})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name in COMMANDS:
            return load_command(cmd_name)
        return super().get_command(ctx, cmd_name)


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="repro")
@click.option(
    "--color",
    type=click.Choice(COLOR_MODES),
    default="auto",
    show_default=True,
    help="Styles (colour, bold, dim) in the output; auto: on a terminal, unless NO_COLOR is set.",
)
@click.pass_context
def cli(ctx: click.Context, color: str) -> None:
    """Pack a GPU model-serving environment into a verified bundle and rebuild it elsewhere."""
    ctx.meta[COLOR_KEY] = color


def main() -> None:
    run_guarded(cli)
