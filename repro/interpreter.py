"""The target's interpreter: what `--python` names, and the one way repro runs it.

`resolve_python` turns what a verb's `--python` names into an interpreter file.
`run_target_script` runs one of the target-side scripts of `repro/probe/` with it: every
fact repro learns from a target interpreter comes through it, so the isolation, the
environment, the timeout and the error raised are decided here, once.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path

from repro.errors import ProbeError, ReproError, UsageError

HINT = "give an interpreter (venv/bin/python) or a virtual environment's directory"

# The target-side scripts: stdlib only, Python >= 3.8, nothing of repro imported. They
# are package data of the wheel too (pyproject.toml), so a file path works installed.
PROBE_DIR = Path(__file__).resolve().parent / "probe"

# What a stdlib script needs of our environment: where programs are, and the dynamic
# loader's path (an interpreter built with a shared libpython outside the system's
# directories does not start without it). The locale is fixed: UTF-8, whatever ours is.
_KEPT = ("PATH", "LD_LIBRARY_PATH")
LOCALE = "C.UTF-8"


def resolve_python(path: Path, *, option: str = "--python") -> Path:
    """The interpreter `path` names: the file itself, or a venv directory's bin/python.

    Raises UsageError naming the path when there is no executable interpreter there."""
    if path.is_dir():
        candidate = path / "bin" / "python"
        if not candidate.exists():
            raise UsageError(
                f"{option} {path}: a directory without bin/python, not a virtual environment",
                hint=HINT,
            )
        path = candidate
    elif not path.exists():
        raise UsageError(f"{option} {path}: no such interpreter", hint=HINT)
    if not path.is_file() or not os.access(path, os.X_OK):
        raise UsageError(f"{option} {path}: not an executable file", hint=HINT)
    return path


def probe_script(name: str) -> Path:
    """The file of the target-side script `name` ("environment.py") in repro/probe/."""
    path = PROBE_DIR / name
    if path.parent != PROBE_DIR or not path.is_file():
        raise ValueError(f"no target-side script {name!r} in {PROBE_DIR}")
    return path


def target_env(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """The minimal environment of a target script: PATH (os.defpath without one) and
    LD_LIBRARY_PATH from `environ` (ours by default), LC_ALL=C.UTF-8, nothing else."""
    source = os.environ if environ is None else environ
    env = {key: source[key] for key in _KEPT if source.get(key)}
    env.setdefault("PATH", os.defpath)
    env["LC_ALL"] = LOCALE
    return env


def run_target_script(
    python: Path,
    script: str,
    args: Sequence[str] = (),
    *,
    timeout: float,
    site: bool = False,
    env: Mapping[str, str] | None = None,
    input: str | None = None,
    error: type[ReproError] = ProbeError,
    timeout_hint: str | None = None,
) -> subprocess.CompletedProcess[str]:
    """Run `repro/probe/<script> args...` with `python`; its output as UTF-8 text.

    The policy, for every call:
    - isolated (`-I`): no PYTHON* variable, no user site-packages, not the script's
      directory on sys.path;
    - without site processing (`-S`) unless `site=True`. Python runs the `.pth` files of
      its site-packages (and a `sitecustomize`) whenever `site` runs, `-I` included, and a
      bundle can put such a file there; a script that only asks the interpreter about
      itself needs none of it. `site=True` is for the scripts that read what is installed
      through the interpreter's own sys.path (the probe, pip freeze) or that need the
      venv's `sys.prefix`, which site.py sets from pyvenv.cfg;
    - the environment is `target_env()` unless `env` is given (then exactly `env`): for
      the scripts whose result depends on the caller's environment (the probe reports it
      and imports the target's modules with it; pip reads its configuration from it);
    - stdin is `input`, or nothing;
    - past `timeout` seconds the child is killed, and `error` is raised naming the
      interpreter and the script (with `timeout_hint`); so is an interpreter that cannot
      be started (missing, not executable).
    A non-zero exit is the caller's to judge: the result is returned as it came."""
    argv = [str(python), "-I", *(() if site else ("-S",)), str(probe_script(script)), *args]
    try:
        return subprocess.run(
            argv,
            input=input,
            stdin=subprocess.DEVNULL if input is None else None,
            capture_output=True,
            text=True,
            encoding="utf-8",
            errors="replace",
            timeout=timeout,
            env=dict(target_env() if env is None else env),
            check=False,
        )
    except subprocess.TimeoutExpired as exc:
        raise error(
            f"{python} {script}: did not finish within {timeout:g}s", hint=timeout_hint
        ) from exc
    except OSError as exc:
        raise error(f"cannot run {python} {script}: {exc.strerror or exc}") from exc
