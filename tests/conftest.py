"""Shared fixtures."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests._bundles import bundle_pair  # noqa: F401 - the inspect and diff tests share it

REPO_ROOT = Path(__file__).resolve().parent.parent


def run_repro(
    *args: str, input: bytes | None = None, cwd: Path | None = None, timeout: float = 600
) -> subprocess.CompletedProcess[bytes]:
    """Run the real CLI in a subprocess, as a user would."""
    env = dict(os.environ)
    env["PYTHONPATH"] = str(REPO_ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    return subprocess.run(
        [sys.executable, "-m", "repro", *args],
        input=input,
        capture_output=True,
        cwd=cwd,
        env=env,
        timeout=timeout,
        check=False,
    )
