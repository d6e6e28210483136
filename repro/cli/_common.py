"""Shared CLI plumbing: error mapping, output helpers."""

from __future__ import annotations

import json
import sys
from typing import Any

import click

from repro.errors import EXIT_USAGE, ReproError


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
    except KeyboardInterrupt:
        click.echo("repro: interrupted", err=True)
        sys.exit(130)
    sys.exit(result if isinstance(result, int) else 0)


def echo_json(document: Any) -> None:
    click.echo(json.dumps(document, indent=2, sort_keys=True, ensure_ascii=False))
