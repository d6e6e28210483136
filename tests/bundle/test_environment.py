"""Tests of repro.bundle.environment: the probe's facts as frozen dataclasses."""

from __future__ import annotations

import copy
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from repro.bundle.environment import PROBE_SCHEMA, EnvironmentFacts, facts_from_dict
from repro.redaction import REDACTED

PROBE = Path(__file__).resolve().parents[2] / "repro" / "probe" / "environment.py"
TOKEN = "ghp_" + "x" * 36


@pytest.fixture(scope="module")
def document() -> dict[str, Any]:
    """What the real probe script says of this interpreter, without imports."""
    done = subprocess.run(
        [sys.executable, str(PROBE), "--no-imports"], capture_output=True, check=True, text=True
    )
    parsed: dict[str, Any] = json.loads(done.stdout)
    return parsed


def test_the_real_probe_document_is_read(document: dict[str, Any]) -> None:
    facts = facts_from_dict(document)
    assert facts.schema == PROBE_SCHEMA
    assert facts.python.executable == document["python"]["executable"]
    assert facts.python.version == document["python"]["version"]
    assert facts.python.sys_path == tuple(document["python"]["sys_path"])
    assert len(facts.distributions) == len(document["distributions"])


def test_to_json_reads_back_as_the_same_facts(document: dict[str, Any]) -> None:
    facts = facts_from_dict(document)
    assert facts_from_dict(json.loads(facts.to_json())) == facts
    assert facts.to_json().endswith("}\n")


def test_distribution_by_any_spelling_of_its_name(document: dict[str, Any]) -> None:
    facts = facts_from_dict(document)
    dist = facts.distributions[0]
    upper = dist.normalized_name.upper().replace("-", "_")
    assert facts.distribution(upper) == dist
    assert facts.distribution("no-such-distribution-here") is None


def test_secrets_are_scrubbed_from_every_string(document: dict[str, Any]) -> None:
    changed = copy.deepcopy(document)
    changed["env"] = {"NOTE": f"use {TOKEN}"}
    url = f"https://x-access-token:{TOKEN}@github.com/o/r"
    changed["distributions"][0]["direct_url"] = {"url": url}
    facts = facts_from_dict(changed)
    assert facts.env == {"NOTE": f"use {REDACTED}"}
    assert facts.distributions[0].direct_url == {"url": "https://github.com/o/r"}
    assert TOKEN not in facts.to_json()


def test_torch_facts_and_their_error_order(document: dict[str, Any]) -> None:
    changed = copy.deepcopy(document)
    torch = {
        "cuda": "13.0",
        "arch_list": ["sm_90", "sm_100"],
        "cuda_available": 1,
        "device_count": None,
        "devices": [{"index": "0", "name": "H200", "capability": "9.0", "memory_bytes": "1"}],
        "arch_list_error": "second",
        "error": "third",
    }
    changed["modules"] = [{"module": "torch", "torch": torch, "probed": "files"}]
    module = facts_from_dict(changed).modules[0]
    assert module.probed == "files"
    assert module.torch is not None
    assert (module.torch.arch_list, module.torch.cuda_available, module.torch.device_count) == (
        ("sm_90", "sm_100"),
        True,
        0,
    )
    assert module.torch.devices[0].index == 0 and module.torch.devices[0].memory_bytes == 1
    assert module.torch.error == "second"
    torch["cuda_error"] = "first"
    assert facts_from_dict(changed).modules[0].torch.error == "first"  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"schema": 2}, "probe schema 2, expected 1"),
        ({"schema": "1"}, "probe schema '1', expected 1"),
        (
            {"modules": [{"module": "m", "probed": "guess"}]},
            "module 'm': probed 'guess', expected files or import",
        ),
    ],
)
def test_documents_that_are_refused(
    document: dict[str, Any], change: dict[str, Any], message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        facts_from_dict({**document, **change})


def test_optional_sections_may_be_absent(document: dict[str, Any]) -> None:
    minimal = {"schema": 1, "python": document["python"], "platform": None}
    facts = facts_from_dict(minimal)
    assert isinstance(facts, EnvironmentFacts)
    assert (facts.distributions, facts.modules, facts.env, dict(facts.errors)) == ((), (), {}, {})
    assert not facts.nvidia_smi.present and facts.platform.system == ""
