"""`repro demo` end to end through the CLI: every step asserted, not only the exit code."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import run_repro


@pytest.mark.slow
def test_demo_round_trip(tmp_path: Path) -> None:
    result = run_repro("demo", "--json", "--workdir", str(tmp_path), timeout=1800)
    assert result.returncode == 0, result.stderr.decode()[-3000:]
    report = json.loads(result.stdout)
    steps = {step["name"]: step for step in report["steps"]}
    assert list(steps) == ["workspace", "pack", "check", "tamper", "unpack"]
    assert all(step["ok"] for step in steps.values())
    assert "2 patched files found against RECORD" in steps["pack"]["proved"]
    assert "reports it mismatched" in steps["tamper"]["proved"]
    assert "smoke rungs passed: python" in steps["unpack"]["proved"]
    bundle = Path(report["bundle"])
    target = Path(report["target"])
    assert bundle.is_file() and bundle.name == "dflash-demo-1.tar"
    # The rebuild is relocatable: another path than the workspace, with the patch applied.
    site = next(target.glob("lib/python3*/site-packages"))
    assert "normalize_host" in (site / "idna" / "__init__.py").read_text()
    assert (site / "idna" / "serving_policy.py").is_file()
    unit = (target / "services" / "dflash-demo.service").read_text()
    assert f"ExecStart={target}/bin/python" in unit
    env_file = next((target / "services").glob("dflash-demo.service.d/*"))
    assert "hf_demo_not_a_real_token" not in env_file.read_text()
    assert (target / ".repro" / "unpack-report.json").is_file()
    # The stdout of the demo is one JSON document; the steps went to stderr.
    assert b"ok   pack" in result.stderr
