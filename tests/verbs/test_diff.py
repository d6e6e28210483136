"""`repro diff` between two real bundles, and between a bundle and a live venv."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.support.bundles import ENV_VALUE, ENV_VAR, BundlePair, run_cli

pytestmark = pytest.mark.slow


def _diff(*args: str, env_extra: dict[str, str] | None = None) -> tuple[int, dict[str, Any]]:
    result = run_cli("diff", "--json", *args, env_extra=env_extra)
    assert result.returncode in (0, 1), result.stderr.decode()
    document: dict[str, Any] = json.loads(result.stdout)
    return result.returncode, document


def _by(rows: list[dict[str, Any]], key: str) -> dict[str, dict[str, Any]]:
    return {row[key]: row for row in rows}


@pytest.fixture(scope="module")
def a_to_b(bundle_pair: BundlePair) -> tuple[int, dict[str, Any]]:
    return _diff(str(bundle_pair.a), str(bundle_pair.b))


def test_distributions(a_to_b: tuple[int, dict[str, Any]]) -> None:
    code, doc = a_to_b
    assert code == 1 and doc["identical"] is False
    dists = {(d["name"], d["change"], d["old"], d["new"]) for d in doc["distributions"]}
    assert dists == {
        ("six", "upgraded", "1.16.0", "1.17.0"),
        ("attrs", "downgraded", "23.2.0", "23.1.0"),
        ("iniconfig", "added", None, "2.0.0"),
        ("tomli", "removed", "2.0.1", None),
        ("vaultpkg", "upgraded", "1.0+local", "1.1+local"),
    }


def test_vault(a_to_b: tuple[int, dict[str, Any]]) -> None:
    (wheel,) = a_to_b[1]["vault"]
    assert (wheel["name"], wheel["change"]) == ("vaultpkg", "upgraded")
    assert wheel["old"] == "vaultpkg-1.0+local-py3-none-any.whl"
    assert wheel["new"] == "vaultpkg-1.1+local-py3-none-any.whl"
    assert wheel["old_sha256"] != wheel["new_sha256"]


def test_patches(a_to_b: tuple[int, dict[str, Any]]) -> None:
    patches = _by(a_to_b[1]["patches"], "path")
    assert set(patches) == {"idna/core.py", "six.py", "tomli/_parser.py"}
    assert patches["six.py"]["change"] == "added"
    assert patches["tomli/_parser.py"]["change"] == "removed"
    core = patches["idna/core.py"]
    assert (core["change"], core["old_kind"], core["new_kind"]) == (
        "changed",
        "modified",
        "modified",
    )
    diff = core["diff"].splitlines()
    assert diff[:2] == ["--- a/idna/core.py", "+++ b/idna/core.py"]
    assert "-# local tweak A" in diff and "+# local tweak B" in diff
    changed = [line for line in diff[2:] if line[:1] in "+-"]
    assert changed == ["-# local tweak A", "+# local tweak B"]


def test_units(a_to_b: tuple[int, dict[str, Any]]) -> None:
    (unit,) = a_to_b[1]["units"]
    assert (unit["path"], unit["change"]) == ("services/model.service", "changed")
    assert "-ExecStart=${REPRO_VENV}/bin/python -m http.server 30000" in unit["diff"]
    assert "+ExecStart=${REPRO_VENV}/bin/python -m http.server 30001" in unit["diff"]


def test_environment(a_to_b: tuple[int, dict[str, Any]]) -> None:
    facts = _by(a_to_b[1]["environment"], "key")
    assert facts == {f"env.{ENV_VAR}": {"key": f"env.{ENV_VAR}", "old": None, "new": ENV_VALUE}}


def test_models_and_files(a_to_b: tuple[int, dict[str, Any]]) -> None:
    doc = a_to_b[1]
    (model,) = doc["models"]
    assert (model["name"], model["change"]) == ("drafter", "changed")
    fields = _by(model["fields"], "key")
    assert set(fields) == {"total_bytes"}
    assert int(fields["total_bytes"]["new"]) == int(fields["total_bytes"]["old"]) + 1
    (config,) = model["files"]
    assert (config["path"], config["change"]) == ("models/drafter/config.json", "changed")
    assert '+{"architectures": ["LlamaForCausalLM"], "hidden_size": 128}' in config["diff"]
    (results,) = doc["files"]
    assert results["path"] == "files/bench/results.json"
    assert '+{"tokens_per_s": 140}' in results["diff"]


def test_human_output(bundle_pair: BundlePair) -> None:
    result = run_cli("diff", str(bundle_pair.a), str(bundle_pair.b))
    assert result.returncode == 1
    out = result.stdout.decode()
    for expected in (
        "distribution six: upgraded 1.16.0 -> 1.17.0",
        "distribution tomli: removed 2.0.1 -> (none)",
        "vault vaultpkg: upgraded",
        "patch idna: idna/core.py: changed (modified -> modified)",
        "+# local tweak B",
        "unit services/model.service: changed",
        f"environment env.{ENV_VAR}: (none) -> {ENV_VALUE}",
        "model drafter: changed",
        "file files/bench/results.json: changed",
    ):
        assert expected in out, expected
    assert "demo 1" in out and "demo 2" in out  # the headers are part of the result


def test_identical_bundles(bundle_pair: BundlePair) -> None:
    code, doc = _diff(str(bundle_pair.a), str(bundle_pair.a_dir))
    assert code == 0 and doc["identical"] is True
    assert doc["distributions"] == doc["patches"] == doc["environment"] == []
    piped = run_cli("diff", "-", str(bundle_pair.a), input=bundle_pair.a.read_bytes())
    assert piped.returncode == 0
    assert "identical" in piped.stdout.decode()


def test_reversed_pair_mirrors(bundle_pair: BundlePair, a_to_b: tuple[int, dict[str, Any]]) -> None:
    code, doc = _diff(str(bundle_pair.b_dir), str(bundle_pair.a))
    assert code == 1
    forward = {(d["name"], d["old"], d["new"]) for d in a_to_b[1]["distributions"]}
    backward = {(d["name"], d["new"], d["old"]) for d in doc["distributions"]}
    assert forward == backward
    assert _by(doc["distributions"], "name")["six"]["change"] == "downgraded"


def test_live_environment_matches_its_bundle(bundle_pair: BundlePair) -> None:
    """The venv was left as bundle B packed it; with the same NCCL_DEBUG it is identical."""
    venv = bundle_pair.venv_python.parent.parent
    code, doc = _diff(str(bundle_pair.b), "--python", str(venv), env_extra={ENV_VAR: ENV_VALUE})
    assert code == 0, doc
    assert doc["not_compared"] == ["vault", "units", "models", "files"]
    code, doc = _diff(str(bundle_pair.b), "--python", str(bundle_pair.venv_python))
    assert code == 1
    assert doc["distributions"] == doc["patches"] == []
    assert doc["environment"] == [{"key": f"env.{ENV_VAR}", "old": ENV_VALUE, "new": None}]


def test_live_environment_against_older_bundle(bundle_pair: BundlePair) -> None:
    code, doc = _diff(str(bundle_pair.a), "--python", str(bundle_pair.venv_python))
    assert code == 1
    assert _by(doc["distributions"], "name")["six"]["change"] == "upgraded"
    patches = _by(doc["patches"], "path")
    assert patches["six.py"]["change"] == "added"
    assert "+# local tweak B" in patches["idna/core.py"]["diff"]


def test_live_patch_edit_shows_up(bundle_pair: BundlePair, tmp_path: Path) -> None:
    """A venv copied from the pair's, then patched once more, differs from bundle B."""
    venv = tmp_path / "venv"
    subprocess.run(["cp", "-a", str(bundle_pair.venv_python.parent.parent), str(venv)], check=True)
    (site,) = venv.glob("lib/python3.*/site-packages")
    (site / "idna" / "extra.py").write_text("EXTRA = 1\n")
    env = {ENV_VAR: ENV_VALUE}
    code, doc = _diff(str(bundle_pair.b), "--python", str(venv / "bin" / "python"), env_extra=env)
    assert code == 1
    assert [(p["path"], p["change"], p["new_kind"]) for p in doc["patches"]] == [
        ("idna/extra.py", "added", "added")
    ]


@pytest.mark.parametrize(
    "args",
    [("only-one.tar",), ("a.tar", "b.tar", "--python", "/usr/bin/python3"), ("-", "-")],
)
def test_usage_errors_are_exit_2(args: tuple[str, ...]) -> None:
    result = run_cli("diff", *args)
    assert result.returncode == 2
    assert result.stdout == b""


def test_unreadable_bundle_is_exit_2(bundle_pair: BundlePair, tmp_path: Path) -> None:
    result = run_cli("diff", str(bundle_pair.a), str(tmp_path / "absent.tar"))
    assert result.returncode == 2
    assert "absent.tar: no such file" in result.stderr.decode()
