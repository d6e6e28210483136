"""repro/probe/environment.py: the probe, run by the one runner with interpreters of
other versions than ours, each section held against what the interpreter and its venv
say of themselves; its document read by the format's own reader
(`repro.bundle.environment.facts_from_dict`)."""

from __future__ import annotations

import json
import os
from pathlib import Path

from repro.bundle.environment import PROBE_SCHEMA, facts_from_dict
from repro.interpreter import run_target_script, target_env
from tests.probe.conftest import asked_natively, bare_venv, purelib


def _probe(python: Path, env: dict[str, str], *args: str) -> dict[str, object]:
    proc = run_target_script(python, "environment.py", args, timeout=120, site=True, env=env)
    assert proc.returncode == 0, proc.stderr
    document: dict[str, object] = json.loads(proc.stdout)
    return document


def test_a_venvs_probe(python: Path, tmp_path: Path) -> None:
    vpython = bare_venv(python, tmp_path / "v")
    site = purelib(vpython)
    info = site / "demo_pkg-1.2.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: Demo_Pkg\nVersion: 1.2\n")
    (info / "INSTALLER").write_text("pip\n")
    (info / "RECORD").write_text("demo_pkg-1.2.dist-info/METADATA,,\n")
    env = target_env(os.environ) | {
        "CUDA_VISIBLE_DEVICES": "0",
        "HF_TOKEN": "hf_secret_value",
        "UNRELATED": "not reported",
    }
    document = _probe(vpython, env, "--no-imports")
    facts = facts_from_dict(document)
    assert facts.schema == PROBE_SCHEMA
    native = asked_natively(
        vpython,
        "import json, sys, platform; print(json.dumps([platform.python_version(), "
        "sys.prefix, sys.base_prefix, platform.machine()]))",
    )
    assert [facts.python.version, facts.python.prefix, facts.python.base_prefix] == native[:3]
    assert facts.python.is_venv and facts.python.purelib == str(site)
    assert facts.platform.machine == native[3] and facts.platform.libc == "glibc"
    dist = facts.distribution("demo-pkg")
    assert dist is not None
    assert (dist.name, dist.version, dist.installer, dist.has_record) == (
        "Demo_Pkg",
        "1.2",
        "pip",
        True,
    )
    assert facts.modules == ()  # --no-imports
    assert facts.env["CUDA_VISIBLE_DEVICES"] == "0"
    assert facts.env["HF_TOKEN"] == "<redacted>"
    assert "UNRELATED" not in facts.env
    assert "hf_secret_value" not in json.dumps(document)
    assert facts.errors == {}


def test_a_key_module_is_imported_in_a_child_and_a_broken_one_reported(
    python: Path, tmp_path: Path
) -> None:
    vpython = bare_venv(python, tmp_path / "v")
    site = purelib(vpython)
    # A distribution named as a key module whose import fails: reported, the probe lives.
    (site / "vllm").mkdir()
    (site / "vllm" / "__init__.py").write_text("raise RuntimeError('broken on purpose')\n")
    info = site / "vllm-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: vllm\nVersion: 0.1\n")
    (site / "triton").mkdir()
    (site / "triton" / "__init__.py").write_text("__version__ = '9.9'\n")
    info = site / "triton-9.9.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: triton\nVersion: 9.9\n")
    facts = facts_from_dict(_probe(vpython, target_env(os.environ)))
    modules = {m.module: m for m in facts.modules}
    assert modules["triton"].version == "9.9" and modules["triton"].error is None
    assert "broken on purpose" in (modules["vllm"].error or "")
