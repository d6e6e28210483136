"""repro/probe/markers.py: the PEP 508 marker variables, as packaging computes them."""

from __future__ import annotations

import json
from pathlib import Path

from repro.interpreter import run_target_script
from tests.probe.conftest import asked_natively


def test_the_markers_are_packagings_default_environment(python: Path) -> None:
    proc = run_target_script(python, "markers.py", timeout=60)
    assert proc.returncode == 0, proc.stderr
    ours = json.loads(proc.stdout)
    reference = asked_natively(
        python,
        "import json; from packaging.markers import default_environment; "
        "print(json.dumps(default_environment()))",
        with_packaging=True,
    )
    assert ours == reference
