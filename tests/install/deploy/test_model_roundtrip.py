"""The seed-shaped workspace and the vLLM-shaped one, packed and unpacked on this box
through the real CLI: every model a unit names is a reference, the absent target with
its inferred identity, and each unit rendered at the place where its model was found.

The seed's unit runs `python -m sglang.launch_server --model-path <absent>/Kimi-K2.6
--speculative-draft-model-path <workspace>/models/drafter`; the drafter's card says
`base_model: moonshotai/Kimi-K2.6`. The vLLM unit names a model outside the workspace
that exists: without --models it is found at its recorded path, and the rendered unit
names that path (not TARGET/models).
"""

from __future__ import annotations

import json
import shutil
import tarfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from repro._toml import loads as toml_loads
from tests.install.test_unpack import build_workspace
from tests.support.run import run_repro
from tests.support.venvs import find_python

pytestmark = pytest.mark.slow

SGLANG = """[Service]
WorkingDirectory={home}
ExecStart={venv}/bin/python -m sglang.launch_server --model-path {absent} \
--speculative-draft-model-path {home}/models/drafter --port 30000
"""
VLLM = """[Service]
ExecStart={venv}/bin/vllm serve {outside} --port 8000
"""
CARD = "---\nbase_model: moonshotai/Kimi-K2.6\nlicense: other\n---\n# EAGLE drafter\n"


@dataclass(frozen=True)
class Packed:
    root: Path
    workspace: Path
    outside: Path
    absent: Path
    bundle: Path
    stderr: str


def _member(bundle: Path, name: str) -> bytes:
    with tarfile.open(bundle) as archive:
        stream = archive.extractfile(f"seed-1/{name}")
        assert stream is not None
        return stream.read()


@pytest.fixture(scope="module")
def packed(tmp_path_factory: pytest.TempPathFactory) -> Packed:
    root = tmp_path_factory.mktemp("seed")
    workspace = build_workspace(root / "seed", find_python("3.11"), ["six==1.16.0"])
    drafter = workspace / "models" / "drafter"
    drafter.mkdir(parents=True)
    (drafter / "README.md").write_text(CARD)
    (drafter / "config.json").write_text(json.dumps({"model_type": "deepseek_v3"}))
    outside = root / "elsewhere" / "tiny"
    outside.mkdir(parents=True)
    (outside / "config.json").write_text(json.dumps({"model_type": "llama"}))
    absent = root / "no-models-here" / "Kimi-K2.6"
    (workspace / "services").mkdir()
    venv = workspace / ".venv"
    (workspace / "services" / "sglang.service").write_text(
        SGLANG.format(home=workspace, venv=venv, absent=absent)
    )
    (workspace / "services" / "vllm.service").write_text(VLLM.format(venv=venv, outside=outside))
    out = root / "seed-1.tar"
    result = run_repro(
        "pack",
        str(workspace),
        "-o",
        str(out),
        "--name",
        "seed",
        "--version",
        "1",
        "--sbom",
        cwd=root,
    )
    assert result.returncode == 0, result.stderr.decode()
    return Packed(root, workspace, outside, absent, out, result.stderr.decode())


def test_pack_records_the_absent_target_with_its_identity(packed: Packed) -> None:
    info = toml_loads(_member(packed.bundle, "bundle.toml").decode())
    models = {m["name"]: m for m in info["models"]}
    assert sorted(models) == ["Kimi-K2.6", "drafter", "tiny"]
    kimi = models["Kimi-K2.6"]
    assert kimi["present"] is False
    assert kimi["local_path"] == str(packed.absent)
    assert kimi["repo_id"] == "moonshotai/Kimi-K2.6"
    assert models["drafter"]["local_path"] == "models/drafter"
    assert "present" not in models["tiny"]
    assert "'Kimi-K2.6' (target): a unit names it at" in packed.stderr
    assert "not present when packed" in packed.stderr
    reproduce = _member(packed.bundle, "REPRODUCE.md").decode()
    assert "**Kimi-K2.6** (target): moonshotai/Kimi-K2.6" in reproduce
    assert "hf download moonshotai/Kimi-K2.6 --local-dir TARGET/models/Kimi-K2.6" in reproduce
    sbom = json.loads(_member(packed.bundle, "env/sbom.cdx.json"))
    kinds = {c["name"]: c["type"] for c in sbom["components"]}
    assert kinds["Kimi-K2.6"] == kinds["drafter"] == "machine-learning-model"


@pytest.fixture(scope="module")
def unpacked(packed: Packed, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Any]:
    target = tmp_path_factory.mktemp("box") / "srv" / "seed"
    result = run_repro(
        "unpack", str(packed.bundle), "--target", str(target), "--cpu", "--no-smoke", "--json"
    )
    assert result.returncode == 0, result.stderr.decode()
    return target, json.loads(result.stdout)


def test_the_report_says_the_target_is_missing_and_how_to_fetch_it(
    unpacked: tuple[Path, Any],
) -> None:
    target, report = unpacked
    models = {m["name"]: m for m in report["models"]}
    kimi = models["Kimi-K2.6"]
    dest = target / "models" / "Kimi-K2.6"
    assert (kimi["status"], kimi["path"], kimi["present_when_packed"]) == (
        "missing",
        str(dest),
        False,
    )
    assert kimi["fetch"] == f"hf download moonshotai/Kimi-K2.6 --local-dir {dest}"
    assert f"put it at {dest}" in kimi["detail"]


def test_a_model_outside_the_workspace_is_rendered_at_its_recorded_path(
    packed: Packed, unpacked: tuple[Path, Any]
) -> None:
    target, report = unpacked
    tiny = next(m for m in report["models"] if m["name"] == "tiny")
    assert (tiny["status"], tiny["path"]) == ("found", str(packed.outside))
    unit = (target / "services" / "vllm.service").read_text()
    assert f"vllm serve {packed.outside} --port 8000" in unit
    seed = (target / "services" / "sglang.service").read_text()
    assert f"--model-path {target}/models/Kimi-K2.6 " in seed  # found nowhere
    state = toml_loads((target / ".repro" / "state.toml").read_text())
    assert state["facts"]["models"]["found"]["tiny"] == str(packed.outside)
    assert state["facts"]["models"]["status"]["Kimi-K2.6"] == "missing"


def test_verify_applies_the_same_rule(packed: Packed, unpacked: tuple[Path, Any]) -> None:
    target, _ = unpacked
    assert run_repro("verify", str(target)).returncode == 0
    moved = packed.outside.with_name("tiny-moved")
    packed.outside.rename(moved)
    try:
        result = run_repro("verify", str(target))
        assert result.returncode != 0
        assert "model tiny: expected " + str(packed.outside) in result.stdout.decode()
    finally:
        moved.rename(packed.outside)


def test_the_source_renamed_away_the_models_found_under_models(
    packed: Packed, tmp_path: Path
) -> None:
    """The source's model paths gone (as on a fresh box): --models DIR holding the
    absent target and the outside model, and each unit names DIR's copy."""
    weights = tmp_path / "weights"
    (weights / "Kimi-K2.6").mkdir(parents=True)
    (weights / "Kimi-K2.6" / "config.json").write_text("{}")
    shutil.copytree(packed.outside, weights / "tiny")
    moved = packed.outside.with_name("tiny-away")
    packed.outside.rename(moved)
    try:
        target = tmp_path / "target"
        result = run_repro(
            "unpack",
            str(packed.bundle),
            "--target",
            str(target),
            "--models",
            str(weights),
            "--cpu",
            "--no-smoke",
            "--json",
        )
        assert result.returncode == 0, result.stderr.decode()
        models = {m["name"]: m for m in json.loads(result.stdout)["models"]}
    finally:
        moved.rename(packed.outside)
    assert models["Kimi-K2.6"]["status"] == models["tiny"]["status"] == "found"
    assert models["tiny"]["path"] == str(weights / "tiny")
    seed = (target / "services" / "sglang.service").read_text()
    assert f"--model-path {weights}/Kimi-K2.6 " in seed


def test_the_ladder_does_not_launch_a_server_whose_model_is_missing(tmp_path: Path) -> None:
    """A unit whose model was packed from outside the workspace, gone at unpack: the
    server rung fails at once with the models step's reason and fetch command, and no
    launch is tried."""
    workspace = build_workspace(tmp_path / "ws", find_python("3.11"), ["six==1.16.0"])
    model = tmp_path / "weights" / "tiny"
    model.mkdir(parents=True)
    (model / "config.json").write_text(json.dumps({"_name_or_path": "org/tiny"}))
    venv = workspace / ".venv"
    (workspace / "services").mkdir()
    (workspace / "services" / "vllm.service").write_text(VLLM.format(venv=venv, outside=model))
    (workspace / "repro.toml").write_text('[ladder]\nrungs = ["python", "server"]\n')
    bundle = tmp_path / "tiny-1.tar"
    packed = run_repro(
        "pack", str(workspace), "-o", str(bundle), "--name", "tiny", "--version", "1"
    )
    assert packed.returncode == 0, packed.stderr.decode()
    shutil.rmtree(model)
    target = tmp_path / "box" / "tiny"
    result = run_repro("unpack", str(bundle), "--target", str(target), "--cpu")
    assert result.returncode == 5, result.stderr.decode()
    place = target / "models" / "tiny"  # the unit names it there: found nowhere
    assert "not launched: model tiny is missing" in result.stderr.decode()
    report = json.loads((target / ".repro" / "unpack-report.json").read_text())
    (tiny,) = report["models"]
    assert (tiny["status"], tiny["path"]) == ("missing", str(place))
    server = next(r for r in report["smoke"]["ladder"]["rungs"] if r["name"] == "server")
    assert server["status"] == "fail"
    assert server["summary"].startswith("vllm: not launched: model tiny is missing")
    assert server["hint"] == f"hf download org/tiny --local-dir {place}, then run unpack again"
    assert "cannot start" not in result.stderr.decode()  # no launch was tried
    # the model put where the step said: the same command gets past the refusal and
    # launches (the venv has no vllm installed: the launch itself now fails, naming it)
    place.mkdir(parents=True)
    (place / "config.json").write_text(json.dumps({"_name_or_path": "org/tiny"}))
    again = run_repro("unpack", str(bundle), "--target", str(target), "--cpu", timeout=180)
    err = again.stderr.decode()
    assert again.returncode == 5, err
    assert "not launched" not in err
    assert f"cannot start {target}/.venv/bin/vllm" in err
