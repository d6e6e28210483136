"""Facts about a target environment, gathered by running the probe with its own interpreter.

repro never imports the target's packages: `probe_environment` runs the stdlib-only script
`repro/probe/environment.py` with the target's python and parses its JSON into frozen
dataclasses (repro.bundle.environment, the format of env/environment.json).
`find_interpreter` finds that python for a workspace or a scan.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path

from repro.bundle.environment import EnvironmentFacts, facts_from_dict
from repro.errors import ProbeError, UsageError
from repro.interpreter import resolve_python, run_target_script

VENV_DIRS = ("venv", ".venv", "env")


def probe_environment(
    python: Path,
    *,
    timeout: float = 120,
    env: Mapping[str, str] | None = None,
    imports: bool = True,
) -> EnvironmentFacts:
    """Run the probe with `python` and return what it found.

    `imports=False` leaves out the key modules' import reports (facts.modules is empty):
    importing torch in the target costs seconds and hundreds of MB, and callers that only
    look at installed files (scan) do not need it."""
    if not python.exists():
        raise ProbeError(
            f"interpreter {python} does not exist",
            hint="pass --python PATH to the environment's python",
        )
    if not os.access(python, os.X_OK) or python.is_dir():
        raise ProbeError(f"interpreter {python} is not an executable file")
    # site on and our environment: it lists what is installed and imports the key modules
    # as the target runs them, and it reports the environment's variables
    proc = run_target_script(
        python,
        "environment.py",
        () if imports else ("--no-imports",),
        timeout=timeout,
        site=True,
        env=os.environ if env is None else env,
        timeout_hint="an import in the target may hang; set REPRO_PROBE_IMPORT_TIMEOUT lower",
    )
    if proc.returncode != 0:
        tail = proc.stderr.strip().splitlines()[-3:]
        raise ProbeError(
            f"probe with {python} failed (exit {proc.returncode}): {' | '.join(tail)}",
            hint="is it a Python >= 3.8 interpreter?",
        )
    try:
        document = json.loads(proc.stdout)
    except json.JSONDecodeError as exc:
        raise ProbeError(f"probe with {python} printed no valid JSON: {exc}") from exc
    try:
        return facts_from_dict(document)
    except (KeyError, TypeError, ValueError) as exc:
        raise ProbeError(f"probe with {python} returned an unexpected document: {exc!r}") from exc


def find_interpreter(
    source: Path | None,
    explicit: Path | None,
    *,
    venv: Path | None = None,
    environ: Mapping[str, str] | None = None,
) -> Path:
    """The python of the environment to pack or scan: the one asked for (--python, or
    repro.toml's env; --venv, a venv directory), else a venv inside SOURCE (pack; scan
    passes None), else $VIRTUAL_ENV."""
    if explicit is not None and venv is not None:
        raise UsageError("give --python or --venv, not both")
    if explicit is not None:
        path = explicit / "bin" / "python" if explicit.is_dir() else explicit
        if not path.exists():
            raise UsageError(f"--python {explicit}: no such interpreter")
        return path
    if venv is not None:
        return resolve_python(venv, option="--venv")
    virtual_env = (os.environ if environ is None else environ).get("VIRTUAL_ENV")
    if source is None:
        if virtual_env:
            return resolve_python(Path(virtual_env), option="VIRTUAL_ENV")
        raise UsageError(
            "no environment to scan", hint="pass --python PATH or --venv DIR, or activate a venv"
        )
    if source.is_dir():
        for name in VENV_DIRS:
            candidate = source / name / "bin" / "python"
            if (source / name / "pyvenv.cfg").is_file() and candidate.exists():
                return candidate
    if virtual_env:
        candidate = Path(virtual_env) / "bin" / "python"
        if candidate.exists():
            return candidate
        raise UsageError(f"VIRTUAL_ENV={virtual_env} has no bin/python")
    raise UsageError(
        f"no environment found for {source}: no venv/, .venv/ or env/ inside it, "
        "no --python given and no VIRTUAL_ENV active",
        hint="pass --python /path/to/venv/bin/python",
    )
