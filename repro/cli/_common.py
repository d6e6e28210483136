"""Shared CLI plumbing: error mapping, consoles, options every verb shares.

Results go to stdout (`result_console`, `echo_json`), progress, warnings and events to
stderr (`diagnostic_console`). Text from users and paths are printed as rich Text or
escaped (rich.markup.escape): `w[b]x` is a path, not markup. Every way out escapes
control characters for the terminal (`_terminal`): consoles made here, `echo`,
`echo_json`.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click
from rich.console import Console

from repro.cli._terminal import TerminalSafeHook, echo
from repro.cli._terminal import echo_json as echo_json
from repro.errors import EXIT_INVALID, EXIT_USAGE, ReproError


def run_guarded(group: click.Group) -> None:
    """Run the click group; expected failures become a message and an exit code."""
    try:
        result = group.main(standalone_mode=False)
    except ReproError as exc:
        echo(f"repro: error: {exc}", err=True)
        sys.exit(exc.exit_code)
    except click.exceptions.Abort:
        click.echo("repro: aborted", err=True)
        sys.exit(130)
    except click.ClickException as exc:
        exc.show()
        sys.exit(EXIT_USAGE if exc.exit_code == 2 else exc.exit_code)
    except click.exceptions.Exit as exc:
        sys.exit(exc.exit_code)
    except BrokenPipeError:
        sys.exit(1)
    except OSError as exc:
        # The machine said no (disk full, permission denied, ...): say so, without a
        # traceback; the operation that failed cleaned up after itself.
        where = f" ({exc.filename})" if exc.filename else ""
        echo(f"repro: error: {exc.strerror or exc}{where}", err=True)
        sys.exit(EXIT_INVALID)
    except KeyboardInterrupt:
        click.echo("repro: interrupted", err=True)
        sys.exit(130)
    sys.exit(result if isinstance(result, int) else 0)


F = TypeVar("F", bound=Callable[..., Any])


def signature_options(command: F) -> F:
    """--allowed-signers, --identity and --require-signature, shared by check and unpack."""
    command = click.option(
        "--require-signature",
        is_flag=True,
        help="Refuse a bundle without a valid signature (implied by --allowed-signers).",
    )(command)
    command = click.option(
        "--identity", help="The signer expected (its principal in the allowed-signers file)."
    )(command)
    return click.option(
        "--allowed-signers",
        type=click.Path(path_type=Path),
        help="ssh-keygen allowed-signers file: verify MANIFEST.sha256.sig before anything else.",
    )(command)


# repro.hashing.MAX_DEFAULT_JOBS, written out: importing hashing here would load it (and
# zlib-ng) for every command at start-up; a test keeps the two the same
JOBS_DEFAULT = "the cores, at most 8"


def jobs_option(command: F) -> F:
    """-j/--jobs, on every verb that hashes: files hashed in parallel."""
    return click.option(
        "-j",
        "--jobs",
        type=click.IntRange(min=1),
        default=None,
        help=f"Files hashed in parallel [default: {JOBS_DEFAULT}].",
    )(command)


# --- consoles ------------------------------------------------------------------------------

COLOR_KEY = "repro.color"
COLOR_MODES = ("auto", "always", "never")


def color_mode() -> str:
    """--color of the root command; NO_COLOR (set and not empty) turns auto into never."""
    context = click.get_current_context(silent=True)
    mode = str(context.meta.get(COLOR_KEY, "auto")) if context is not None else "auto"
    if mode == "auto" and os.environ.get("NO_COLOR"):
        return "never"
    return mode


def _console(*, stderr: bool) -> Console:
    mode = color_mode()
    console = Console(
        stderr=stderr,
        highlight=False,
        soft_wrap=True,
        # no colour system: no styles at all, bold and dim included (rich's no_color
        # drops the colours only)
        color_system=None if mode == "never" else "auto",
        force_terminal=True if mode == "always" else None,
    )
    console.push_render_hook(TerminalSafeHook())
    return console


def progress_wanted(quiet: bool) -> bool:
    """A progress bar: on a terminal (stderr itself, whatever --color says), unless -q."""
    return not quiet and sys.stderr.isatty()


def result_console() -> Console:
    """stdout: what the verb found (tables, lists, verdicts)."""
    return _console(stderr=False)


def diagnostic_console() -> Console:
    """stderr: progress, warnings and events."""
    return _console(stderr=True)


# --- shared options ------------------------------------------------------------------------


def verbosity_options(command: F) -> F:
    """-q/--quiet and -v/--verbose, on every verb."""
    command = click.option(
        "-v", "--verbose", is_flag=True, help="Say more: every step and every file it concerns."
    )(command)
    return click.option(
        "-q", "--quiet", is_flag=True, help="Print only the result and problems: no progress."
    )(command)


class PythonParam(click.ParamType[Path]):
    """--python: an interpreter file or a virtual environment's directory."""

    name = "PYTHON"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Path:
        from repro.interpreter import resolve_python

        option = f"--{param.name}" if param is not None and param.name else "--python"
        return resolve_python(Path(value), option=option)


PYTHON = PythonParam()
