"""`repro pack SOURCE`: snapshot a workspace into one versioned bundle."""

from __future__ import annotations

import sys
from pathlib import Path

import click
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from repro.bundle.caches import parse_size
from repro.cli._common import (
    JOBS_DEFAULT,
    PYTHON,
    diagnostic_console,
    echo_json,
    progress_wanted,
    result_console,
    verbosity_options,
)
from repro.cli._progress import hash_progress
from repro.cli._terminal import echo
from repro.errors import EXIT_OK
from repro.gpu.targets import parse_gpus
from repro.snapshot.pack import PackOptions, PackResult, pack

PACK_EPILOG = """\b
Example:
  repro pack /srv/dflash                  # ./dflash-<next version>.tar
  repro pack /srv/dflash -o bundles/      # bundles/dflash-<next version>.tar
  repro pack /srv/dflash -o b.tar.zst     # that file, zstd-compressed
  repro pack /srv/dflash --base dflash-3.tar -o dflash-4.tar   # a delta

\b
Exit codes:
  0  packed
  1  the environment cannot be packed as it is (see the message); --require-gpu:
     a distribution has no code for that GPU (nothing written)
  2  usage error, unreadable input, an -o repro cannot write; --base: a base of
     another name
"""


@click.command(
    "pack", short_help="Snapshot a workspace into one versioned bundle.", epilog=PACK_EPILOG
)
@click.argument("source", type=click.Path(path_type=Path))
@click.option(
    "-o",
    "--output",
    help="Bundle file (ending .tar, .tar.gz, .tgz, .tar.zst, .tzst) or directory to write "
    "<name>-<version>.tar into; '-' streams to stdout [default: the current directory].",
)
@click.option("--python", type=PYTHON, help="Interpreter (or venv directory) to pack.")
@click.option("--name", help="Bundle name (default: repro.toml, else SOURCE's name).")
@click.option("--version", "version", help="Bundle version (default: next after the newest).")
@click.option(
    "--compress",
    type=click.Choice(["none", "gz", "zst"]),
    help="Compression (default: from the output's suffix, else none).",
)
@click.option(
    "--wheels",
    type=click.Choice(["auto", "all", "none"]),
    default="auto",
    show_default=True,
    help="auto: wheels no index can serve; all: every wheel (air-gapped); none: no wheels.",
)
@click.option("--check-index", is_flag=True, help="Ask the indexes which pins they serve.")
@click.option(
    "--pristine",
    type=click.Path(exists=True, path_type=Path),
    help="Wheel or tree with original files, for patch diffs.",
)
@click.option("--unit", "units", multiple=True, help="Systemd unit to carry (repeatable).")
@click.option(
    "-j",
    "--jobs",
    type=click.IntRange(min=1),
    help=f"Files hashed in parallel [default: {JOBS_DEFAULT}].",
)
@click.option("--offline", is_flag=True, help="Never download (pristine wheels, vault).")
@click.option(
    "--rehash",
    is_flag=True,
    help="Read every installed file; do not trust the scan cache of files unchanged "
    "(same inode, size, mtime and ctime) since the last pack.",
)
@click.option(
    "--no-hash-weights",
    is_flag=True,
    help="Pin model weight files by size and safetensors header only: read none to hash "
    "(a Hugging Face cache blob is pinned by its name anyway); recorded in bundle.toml.",
)
@click.option(
    "--sign",
    type=click.Path(path_type=Path),
    help="Private SSH key: sign MANIFEST.sha256 (ssh-keygen -Y sign, namespace repro-bundle).",
)
@click.option(
    "--import-modules/--no-import-modules",
    default=None,
    help="Import torch, sglang, vllm... in the target for runtime facts (CUDA devices, "
    "torch.cuda.get_arch_list()); default: read them from installed files, import nothing "
    "(repro.toml [env] import_modules).",
)
@click.option(
    "--sbom",
    is_flag=True,
    help="Write a CycloneDX SBOM of the bundle into it as env/sbom.cdx.json (`repro sbom`).",
)
@click.option(
    "--gpu",
    "gpus",
    multiple=True,
    metavar="ARCH",
    help="A GPU the bundle is meant for (sm_103, 10.3, B300; repeatable): warn for each "
    "distribution with no native code for it (docs/kernels.md).",
)
@click.option(
    "--require-gpu",
    "require_gpus",
    multiple=True,
    metavar="ARCH",
    help="As --gpu, but fail before writing when a distribution has no code at all for "
    "it and the bundle does not carry its source (repeatable).",
)
@click.option(
    "--base",
    metavar="OLD",
    help="Write a delta bundle: only the members whose digest differs from those of OLD "
    "(an earlier bundle of this name: an archive, an http(s) or file:// URL, or a "
    "directory), with the full manifest and OLD's identity (docs/upgrade.md).",
)
@click.option(
    "--caches",
    is_flag=True,
    help="Carry the engine's compile caches (Triton, TorchInductor, vLLM, FlashInfer, PTX) "
    "under caches/<kind>/, each with the key it is valid for (docs/caches.md; repro.toml "
    "[caches]).",
)
@click.option(
    "--caches-max-size",
    metavar="SIZE",
    help="Bound the caches together (bytes, 500M, 2GiB): a cache that would pass it is left "
    "out with a line. Implies --caches.",
)
@click.option("--json", "as_json", is_flag=True, help="Print the summary as JSON on stdout.")
@verbosity_options
def pack_command(
    source: Path,
    output: str | None,
    python: Path | None,
    name: str | None,
    version: str | None,
    compress: str | None,
    wheels: str,
    check_index: bool,
    pristine: Path | None,
    units: tuple[str, ...],
    jobs: int | None,
    offline: bool,
    rehash: bool,
    no_hash_weights: bool,
    sign: Path | None,
    import_modules: bool | None,
    sbom: bool,
    gpus: tuple[str, ...],
    require_gpus: tuple[str, ...],
    base: str | None,
    caches: bool,
    caches_max_size: str | None,
    as_json: bool,
    quiet: bool,
    verbose: bool,
) -> int:
    """Snapshot SOURCE (a workspace with a venv) into <name>-<version>.tar.

    Without -o the bundle is written into the current directory. Progress and
    warnings go to stderr; the summary to stdout on a terminal, else the bundle's
    path alone (for `b=$(repro pack ws)`); -v lists what was left out.
    """
    console = diagnostic_console()
    to_stdout = output == "-"
    if to_stdout and as_json:
        raise click.UsageError("--json and -o - both want stdout")
    max_size = None
    if caches_max_size is not None:
        max_size = parse_size(caches_max_size)
        if max_size is None:
            raise click.UsageError(
                f"--caches-max-size {caches_max_size!r} is not a size (bytes, 500M, 2GiB)"
            )
    options = PackOptions(
        source=source,
        python=python,
        output=None if output in (None, "-") else Path(output),
        to_stdout=to_stdout,
        name=name,
        version=version,
        compression=compress,  # type: ignore[arg-type]
        wheels=wheels,  # type: ignore[arg-type]
        check_index=check_index,
        pristine=pristine,
        units=units,
        jobs=jobs,
        download=not offline,
        rehash=rehash,
        hash_weights=not no_hash_weights,
        sign=sign,
        import_modules=import_modules,
        sbom=sbom,
        base=base,
        gpus=parse_gpus(gpus),
        require_gpus=parse_gpus(require_gpus),
        caches=caches or max_size is not None,
        caches_max_size=max_size,
    )

    def progress(message: str) -> None:
        if not quiet:
            console.print(f"[dim]pack:[/] {escape(message)}")

    # the bar follows the writing of the archive, at once: pack is a long verb
    with hash_progress(
        console, enabled=progress_wanted(quiet), description="writing", delay=0
    ) as bar:
        result = pack(options, progress=progress, writing=bar)
    if as_json:
        echo_json(result.to_json())
    else:
        # stdout is the archive with -o -, or a script's $(...): the table goes to stderr
        table_console = result_console() if sys.stdout.isatty() else console
        _summary(table_console, console, result, quiet=quiet, verbose=verbose)
    return EXIT_OK


def _summary(
    console: Console, diagnostics: Console, result: PackResult, *, quiet: bool, verbose: bool
) -> None:
    table = Table(title=escape(f"{result.name} {result.version}"), show_header=False)
    table.add_row("bundle", escape(str(result.path)) if result.path else "stdout")
    if result.path is not None:
        table.add_row("size", f"{result.bundle_bytes / 2**20:.1f} MiB, {result.members} files")
    if result.delta is not None:
        delta = result.delta
        table.add_row(
            "delta",
            escape(
                f"against {delta.base.name} {delta.base.version}: carried "
                f"{delta.carried_members} files ({_size(delta.carried_bytes)}), "
                f"{delta.base_members} from the base ({_size(delta.base_bytes)})"
            ),
        )
    table.add_row("distributions", str(result.distributions))
    table.add_row("vault wheels", escape(", ".join(result.vault_wheels)) or "none")
    table.add_row("patched files", escape("\n".join(result.patched_files)) or "none")
    table.add_row("units", escape(", ".join(result.units)) or "none")
    table.add_row("models", escape(", ".join(result.models)) or "none")
    table.add_row("files", str(len(result.files)))
    if result.kernel_sources:
        table.add_row("kernel sources", escape("\n".join(result.kernel_sources)))
    if result.caches:
        table.add_row("compile caches", escape("\n".join(result.caches)))
    if not quiet:
        console.print(table)
    for warning in result.warnings:
        # escaped: a requirement's extras (`uvicorn[standard]`) are not markup
        diagnostics.print(f"[yellow]warning:[/] {escape(warning)}", soft_wrap=True)
    for item in result.left_out if (verbose or not quiet) else ():
        diagnostics.print(f"left out: {escape(item)}", highlight=False, soft_wrap=True)
    if result.path is not None and not sys.stdout.isatty():
        echo(str(result.path))


def _size(nbytes: int) -> str:
    return f"{nbytes / 2**20:.1f} MiB" if nbytes >= 2**20 else f"{nbytes / 2**10:.1f} KiB"
