"""`repro check TARGET` (filled in by the foundation work)."""

from __future__ import annotations

import click


@click.command("check")
@click.argument("target")
def check_command(target: str) -> None:
    """Verify a bundle or a MANIFEST.sha256."""
    raise click.UsageError("not yet available")
