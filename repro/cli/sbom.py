"""`repro sbom BUNDLE`: a CycloneDX SBOM of a verified bundle."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from repro.cli._common import jobs_option, verbosity_options
from repro.errors import EXIT_OK


@click.command("sbom", short_help="Write a CycloneDX SBOM (JSON) of a verified bundle.")
@click.argument("bundle")
@click.option(
    "-o",
    "--output",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Write the SBOM to this file (replaced whole, or left as it was) instead of stdout.",
)
@jobs_option
@verbosity_options
def sbom_command(
    bundle: str, output: Path | None, jobs: int | None, quiet: bool, verbose: bool
) -> int:
    """Write a CycloneDX 1.6 JSON SBOM of BUNDLE (an archive, '-' for stdin, an
    archive's http(s) URL, or a bundle directory): one component per pin of
    env/requirements.lock with its purl and the sha256 of its wheel where known, hand
    patches as each component's pedigree, the source's GPU, driver, CUDA and torch as
    metadata properties.

    The bundle is read once and verified first; one that does not verify gives no
    SBOM (exit 1). The same bundle always gives the same bytes: the same as the
    env/sbom.cdx.json that `repro pack --sbom` writes into it.
    """
    from repro.install.transaction.atomic import atomic_write
    from repro.verbs.sbom import sbom_of_bundle

    document = sbom_of_bundle(bundle, jobs=jobs)
    if output is None:
        sys.stdout.buffer.write(document)
        sys.stdout.buffer.flush()
    else:
        atomic_write(output, document)
    return EXIT_OK
