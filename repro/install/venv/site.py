"""Facts about a rebuilt venv read without running any of the code installed in it.

Python runs the `.pth` files of its site-packages (and a `sitecustomize`) whenever it
starts with site processing, `-I` included. A bundle can put such a file there, as a
hand patch or inside a vault wheel, so every call repro makes into a target
interpreter only to learn a fact (where site-packages is, which distributions are
installed, whether a patched file compiles) starts it with `-I -S`: no site
processing, nothing of site-packages imported (`repro.interpreter.run_target_script`,
without `site=True`). Without `site`, `sys.prefix` is not yet the venv's (site.py sets it
from pyvenv.cfg), so repro/probe/venv_site.py finds the venv's directories from the
interpreter's own location instead.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

from packaging.utils import canonicalize_name

from repro.errors import InputError, InstallError
from repro.interpreter import run_target_script

TIMEOUT = 300

# Module names Python imports by itself at startup when they are on sys.path.
_STARTUP_MODULES = ("sitecustomize", "usercustomize")


def run_no_site(python: Path, args: Sequence[str], *, what: str) -> str:
    """The answer of repro/probe/venv_site.py `args` (`dirs`, `distributions`, `scheme`)."""
    result = run_target_script(python, "venv_site.py", args, timeout=TIMEOUT, error=InstallError)
    if result.returncode != 0:
        raise InstallError(f"{python}: cannot {what}: {result.stderr.strip()[-2000:]}")
    return result.stdout


def site_dirs_of(python: Path) -> tuple[Path, ...]:
    """The venv's purelib and platlib directories (one when they are the same)."""
    out = run_no_site(python, ["dirs"], what="ask for its site-packages")
    try:
        dirs = json.loads(out)
    except ValueError as exc:
        raise InstallError(f"{python}: unreadable site-packages answer: {out[:200]!r}") from exc
    return tuple(Path(d) for d in dirs)


def site_packages_of(python: Path) -> Path:
    """The venv's site-packages (purelib): where patches apply."""
    try:
        return site_dirs_of(python)[0]
    except InstallError as exc:
        raise InputError(exc.message) from exc


def read_installed(interpreter: Path) -> dict[str, str]:
    """Canonical name -> version of each distribution in the venv's site-packages, read
    by the venv's own importlib.metadata from the dist-info on disk."""
    out = run_no_site(interpreter, ["distributions"], what="list its distributions")
    try:
        data = json.loads(out)
    except ValueError as exc:
        raise InstallError(f"{interpreter}: unreadable distribution list") from exc
    return {canonicalize_name(name): str(version) for name, version in data.items()}


def venv_site_dirs(venv: Path) -> list[Path]:
    """The site-packages directories of `venv` as they lie on disk (no interpreter run:
    it may be half made), each once (`python -m venv` links lib64 to lib)."""
    found: dict[Path, Path] = {}
    for pattern in ("lib/python*/site-packages", "lib64/python*/site-packages"):
        for path in sorted(venv.glob(pattern)):
            if path.is_dir():
                found.setdefault(path.resolve(), path)
    return list(found.values())


def startup_files(venv: Path) -> list[str]:
    """What an interpreter of `venv` would run on starting with site processing: each
    `.pth` file and `sitecustomize`/`usercustomize` module in its site-packages, as a
    path relative to `venv`."""
    found: list[str] = []
    for directory in venv_site_dirs(venv):
        for entry in sorted(directory.iterdir()):
            stem = entry.name.partition(".")[0]
            if entry.name.endswith(".pth") or stem in _STARTUP_MODULES:
                found.append(entry.relative_to(venv).as_posix())
    return found
