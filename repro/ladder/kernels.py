"""The kernels rung: each kernel source's check command, run in the target.

A distribution whose source the bundle carries (env/kernels.toml's `[[sources]]`, from
repro.toml's `[kernels.<dist>]`) may name a check (`check = ["{python}", "check_op.py"]`):
a command that calls its kernels on the GPU and exits 0 when they compute what they
should. It runs in the deployed workspace (${REPRO_HOME}, where the workspace's files
land), with the target venv's bin/ first on PATH, in a process group of its own, killed
with all it started when it ends or runs past `Timeouts.kernel_check`.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from repro.bundle.kernels import fill_placeholders
from repro.ladder.common import skipped
from repro.ladder.interp import ScriptRun, run_command
from repro.ladder.types import KernelCheck, LadderSpec, RungContext, RungResult, RungStatus

TAIL = 20  # lines of a failed check's output kept in the result

HINT = (
    "a kernel that does not load or computes wrong values on this GPU: the output names "
    "it; a rebuilt distribution's build log is TARGET/.repro/kernels/<dist>/build.log; "
    "`repro smoke --bundle TARGET/.repro/bundle --venv TARGET/venv --rungs kernels` "
    "runs the checks again"
)


def check_argv(check: KernelCheck, python: Path) -> tuple[str, ...]:
    """The check's command with `{python}` replaced by the target's interpreter."""
    return tuple(fill_placeholders(check.argv, {"{python}": str(python)}))


def check_environment(python: Path, environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """This environment with the target venv's bin/ first on PATH (and VIRTUAL_ENV set
    when the interpreter is a venv's bin/python), as an activated venv has it."""
    env = dict(os.environ if environ is None else environ)
    bin_dir = python.parent
    env["PATH"] = os.pathsep.join(p for p in (str(bin_dir), env.get("PATH", "")) if p)
    if bin_dir.name == "bin" and (bin_dir.parent / "pyvenv.cfg").is_file():
        env["VIRTUAL_ENV"] = str(bin_dir.parent)
    env.pop("PYTHONHOME", None)
    return env


def _outcome(check: KernelCheck, argv: tuple[str, ...], run: ScriptRun) -> dict[str, Any]:
    return {
        "dist": check.dist,
        "argv": list(argv),
        "returncode": run.returncode,
        "timed_out": run.timed_out,
        "duration_s": round(run.duration_s, 3),
        "passed": run.returncode == 0,
    }


def _failure_text(check: KernelCheck, run: ScriptRun, timeout: float) -> str:
    if run.timed_out:
        return f"{check.dist}: its check timed out after {timeout:g} s"
    last = run.output_tail[-1].strip() if run.output_tail else "(no output)"
    return f"{check.dist}: its check exited {run.returncode}: {last}"


def kernels_rung(spec: LadderSpec, context: RungContext) -> RungResult:
    checks = [check for check in spec.kernels if check.argv]
    if not spec.kernels:
        return skipped(context.name, "no kernel source in the bundle (env/kernels.toml)")
    if not checks:
        names = ", ".join(check.dist for check in spec.kernels)
        return skipped(context.name, f"no check command for {names} ([kernels.<dist>] check)")
    if spec.cpu:
        return skipped(context.name, "--cpu: the kernel checks need a GPU")
    if spec.home is not None and not spec.home.is_dir():
        return RungResult(
            context.name,
            RungStatus.FAIL,
            0.0,
            f"{spec.home}: the checks' directory does not exist",
            hint="pass the deployed workspace with --home",
        )
    timeout = spec.timeouts.kernel_check
    env = check_environment(spec.python)
    outcomes: list[dict[str, Any]] = []
    failures: list[str] = []
    tail: list[str] = []
    duration = 0.0
    for check in checks:
        argv = check_argv(check, spec.python)
        run = run_command(argv, timeout=timeout, env=env, cwd=spec.home)
        duration += run.duration_s
        outcomes.append(_outcome(check, argv, run))
        if run.returncode != 0:
            failures.append(_failure_text(check, run, timeout))
            tail += [f"[{check.dist}] {line}" for line in run.output_tail[-TAIL:]]
    facts = {"checks": outcomes, "cwd": str(spec.home or Path.cwd())}
    if failures:
        return RungResult(
            context.name,
            RungStatus.FAIL,
            duration,
            "; ".join(failures),
            facts,
            hint=HINT,
            output_tail=tuple(tail),
        )
    names = ", ".join(check.dist for check in checks)
    summary = f"{len(checks)} kernel check(s) passed: {names}"
    unchecked = tuple(
        f"{check.dist}: no check command ([kernels.{check.dist}] check)"
        for check in spec.kernels
        if not check.argv
    )
    return RungResult(context.name, RungStatus.PASS, duration, summary, facts, unchecked)
