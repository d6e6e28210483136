"""Shared CLI plumbing: error mapping, output helpers."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click

from repro.errors import EXIT_INVALID, EXIT_USAGE, ReproError


def run_guarded(group: click.Group) -> None:
    """Run the click group; expected failures become a message and an exit code."""
    try:
        result = group.main(standalone_mode=False)
    except ReproError as exc:
        click.echo(f"repro: error: {exc}", err=True)
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
        click.echo(f"repro: error: {exc.strerror or exc}{where}", err=True)
        sys.exit(EXIT_INVALID)
    except KeyboardInterrupt:
        click.echo("repro: interrupted", err=True)
        sys.exit(130)
    sys.exit(result if isinstance(result, int) else 0)


def echo_json(document: Any) -> None:
    click.echo(json.dumps(document, indent=2, sort_keys=True, ensure_ascii=False))


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
    """-j/--jobs, shared by check and scan: files hashed in parallel."""
    return click.option(
        "-j",
        "--jobs",
        type=click.IntRange(min=1),
        default=None,
        help=f"Files hashed in parallel [default: {JOBS_DEFAULT}].",
    )(command)
