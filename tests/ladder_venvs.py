"""Session fixtures: real target environments for the ladder tests (cached on disk)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests._venvs import VenvRecipe, cached_venv, find_python, python_without_headers, venv_python

TORCH = "torch==2.13.0"  # the CPU wheel on this machine's disk, found through pip's find-links
TRITON = "triton==3.6.0"


@pytest.fixture(scope="session")
def torch_cpu_python() -> Path:
    return venv_python(cached_venv(VenvRecipe("torch-cpu", find_python("3.11"), (TORCH, "numpy"))))


@pytest.fixture(scope="session")
def torch_triton_python() -> Path:
    recipe = VenvRecipe("torch-triton", find_python("3.11"), (TORCH, "numpy", TRITON))
    return venv_python(cached_venv(recipe))


@pytest.fixture(scope="session")
def triton_no_headers_python() -> Path:
    recipe = VenvRecipe("triton-noheaders", python_without_headers("3.11"), (TRITON, "numpy"))
    return venv_python(cached_venv(recipe))
