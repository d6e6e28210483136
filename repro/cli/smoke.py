"""`repro smoke`: climb the smoke-test ladder in a target environment."""

from __future__ import annotations

import contextlib
import math
from dataclasses import replace
from pathlib import Path

import click
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from repro.bundle.info import MAX_TIMEOUT_S
from repro.cli._common import (
    PYTHON,
    diagnostic_console,
    echo_json,
    result_console,
    verbosity_options,
)
from repro.errors import EXIT_OK, EXIT_SMOKE
from repro.ladder import (
    RUNG_NAMES,
    LadderReport,
    RungResult,
    RungStatus,
    parse_rungs,
    run_ladder,
)
from repro.ladder.options import SmokeOptions, spec_from_options

STYLE = {RungStatus.PASS: "green", RungStatus.FAIL: "bold red", RungStatus.SKIP: "yellow"}
TAIL_SHOWN = 15


def _render_rung(console: Console, result: RungResult) -> None:
    style = STYLE[result.status]
    console.print(
        f"[{style}]{result.status.value:4}[/{style}] {result.name:7} "
        f"{result.duration_s:7.1f} s  {escape(result.summary)}",
        highlight=False,
        markup=True,
        soft_wrap=True,
    )
    for warning in result.warnings:
        console.print(f"             warning: {warning}", highlight=False, markup=False)
    if result.status is RungStatus.FAIL:
        if result.hint:
            console.print(f"             hint: {result.hint}", highlight=False, markup=False)
        log = result.facts.get("log")
        if log:
            console.print(f"             log: {log}", highlight=False, markup=False)
        for line in result.output_tail[-TAIL_SHOWN:]:
            console.print(f"             | {line}", highlight=False, markup=False)


def _render_table(console: Console, report: LadderReport) -> None:
    table = Table(title=escape(f"smoke ladder: {report.python}"))
    for column in ("rung", "status", "time", "result"):
        table.add_column(column)
    for r in report.results:
        style = STYLE[r.status]
        table.add_row(
            r.name,
            f"[{style}]{r.status.value}[/{style}]",
            f"{r.duration_s:.1f} s",
            escape(r.summary),
        )
    console.print(table)


@click.command("smoke", short_help="Climb the smoke-test ladder in an environment.")
@click.option("--venv", type=click.Path(path_type=Path, file_okay=False), help="Target venv.")
@click.option("--python", "python", type=PYTHON, help="Target interpreter (or venv directory).")
@click.option(
    "--bundle",
    metavar="BUNDLE",
    help="Bundle (unpacked directory, archive file, or http(s) URL; an archive is "
    "extracted, verified and removed afterwards): python version, launch command, "
    "patched files, ladder settings.",
)
@click.option("--rungs", help=f"Comma-separated: {','.join(RUNG_NAMES)}.")
@click.option("--cpu", is_flag=True, help="No GPU: float32 matmul on the CPU, skip nccl.")
@click.option("--keep-going", is_flag=True, help="Run the remaining rungs after a failure.")
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON on stdout.")
@click.option("--launch", help="Server command to launch for the server rung.")
@click.option("--service", help="Take the launch command from this systemd unit's ExecStart.")
@click.option("--port", type=click.IntRange(1, 65535), help="Port the server listens on.")
@click.option("--engine", type=click.Choice(["sglang", "vllm", "openai"]), help="Server API.")
@click.option(
    "--timeout",
    type=click.FloatRange(min=1, max=MAX_TIMEOUT_S),
    callback=lambda _ctx, _param, value: _finite(value),
    help="Server readiness timeout (s).",
)
@click.option("--log-dir", type=click.Path(path_type=Path, file_okay=False), help="Server logs.")
@click.option(
    "--home",
    type=click.Path(path_type=Path, file_okay=False),
    help="${REPRO_HOME} in the bundle's launch: the deployed workspace "
    "(default: TARGET for a bundle in TARGET/.repro/bundle).",
)
@click.option(
    "--models",
    type=click.Path(path_type=Path, file_okay=False),
    help="${REPRO_MODELS} in the bundle's launch: where the model weights are.",
)
@verbosity_options
def smoke_command(
    venv: Path | None,
    python: Path | None,
    bundle: str | None,
    rungs: str | None,
    cpu: bool,
    keep_going: bool,
    as_json: bool,
    launch: str | None,
    service: str | None,
    port: int | None,
    engine: str | None,
    timeout: float | None,
    log_dir: Path | None,
    home: Path | None,
    models: Path | None,
    quiet: bool,
    verbose: bool,
) -> int:
    """Check that an environment really works, from python to a served generation.

    Each rung is reported on stderr as it runs; the table of results goes to stdout
    (--json: the report instead). Exit 0: every rung run passed; 1: --bundle does not
    verify; 2: usage error or unreadable bundle; 5: a rung failed, or every selected
    rung was skipped (nothing was checked)."""
    with contextlib.ExitStack() as stack:
        bundle_dir = None
        if bundle is not None:
            # the unpack side (archive reader, fetch) is loaded only for a bundle
            from repro.install.read.bundle import opened_bundle

            bundle_dir = stack.enter_context(opened_bundle(bundle))
        options = SmokeOptions(
            venv=venv,
            python=python,
            bundle=bundle_dir,
            rungs=parse_rungs(rungs) if rungs is not None else None,
            cpu=cpu,
            keep_going=keep_going,
            launch=launch,
            service=service,
            port=port,
            engine=engine,
            timeout=timeout,
            log_dir=log_dir,
            home=home,
            models=models,
        )
        spec = spec_from_options(options)
        restored_home = home or _kept_home(bundle)
        if spec.launch is not None and restored_home is not None:
            # the restored compile caches, as the rendered units read them
            from repro.install.smoke import with_cache_environment

            spec = replace(spec, launch=with_cache_environment(spec.launch, restored_home))
        console = diagnostic_console()
        report = run_ladder(
            spec, on_rung=lambda result: None if quiet else _render_rung(console, result)
        )
    if as_json:
        echo_json(report.to_json())
    else:
        _render_table(result_console(), report)
    if not report.ok and not quiet and all(r.status is RungStatus.SKIP for r in report.results):
        diagnostic_console().print(
            "smoke: nothing was checked: every selected rung was skipped", markup=False
        )
    return EXIT_OK if report.ok else EXIT_SMOKE


def _kept_home(bundle: str | None) -> Path | None:
    """TARGET for a bundle given as TARGET/.repro/bundle (the one unpack keeps)."""
    if bundle is None:
        return None
    path = Path(bundle)
    if path.name == "bundle" and path.parent.name == ".repro" and path.is_dir():
        return path.parent.parent.absolute()
    return None


def _finite(value: float | None) -> float | None:
    """--timeout nan passes FloatRange (nan compares false with both ends)."""
    if value is not None and not math.isfinite(value):
        raise click.BadParameter(f"{value!r} is not a finite number of seconds")
    return value
