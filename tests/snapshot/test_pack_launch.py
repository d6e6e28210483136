"""`repro pack` of a workspace whose units run servers, and no repro.toml: the launch
commands come from the units' ExecStart=, model paths become references.

The workspace is real (a Python 3.11 venv, unit files, a drafter directory, a model
directory outside the workspace); the bundle is read back with GNU tar and by the
bundle's own loader and the ladder's reader.
"""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from repro.bundle.info import LaunchCommand, load_bundle_info
from repro.ladder.spec import spec_from_bundle_dir
from repro.snapshot.pack import PackOptions, pack
from tests.snapshot.conftest import PYTHON_311, make_venv

pytestmark = pytest.mark.slow

TOKEN = "hf_unitLaunchTestToken0123456789"


@dataclass(frozen=True)
class Workspace:
    root: Path
    target_model: Path


def make_workspace(base: Path) -> Workspace:
    """/.../dflash with venv/, drafter/, four units; the target model in /.../models."""
    root = base / "dflash"
    make_venv(PYTHON_311, root / "venv")
    target_model = base / "models" / "Qwen3-8B"
    target_model.mkdir(parents=True)
    (target_model / "config.json").write_text('{"architectures": ["Qwen3ForCausalLM"]}\n')
    (target_model / "model.safetensors").write_bytes(b"\0" * 4096)
    drafter = root / "drafter"
    drafter.mkdir()
    (drafter / "config.json").write_text('{"architectures": ["LlamaForCausalLM"]}\n')
    services = root / "services"
    services.mkdir()
    (services / "sglang-dflash.service").write_text(
        "[Unit]\nDescription=SGLang with the DFlash drafter\n\n[Service]\n"
        f"WorkingDirectory={root}\n"
        f"Environment=HF_TOKEN={TOKEN} SGLANG_ENABLE_TORCH_COMPILE=0\n"
        f"ExecStart=-{root}/venv/bin/python -m sglang.launch_server \\\n"
        f"    --model-path {target_model} \\\n"
        f"    --speculative-draft-model-path {root}/drafter \\\n"
        '    --served-model-name "qwen3 8b" --port 30001\n'
        "Restart=on-failure\n\n[Install]\nWantedBy=multi-user.target\n"
    )
    (services / "vllm.service").write_text(
        "[Service]\nEnvironment=VLLM_CPU_KVCACHE_SPACE=1\n"
        f"ExecStart={root}/venv/bin/vllm serve Qwen/Qwen3-8B --max-model-len 256\n"
    )
    (services / "bench.service").write_text(
        f"[Service]\nType=oneshot\nExecStart={root}/venv/bin/python {root}/bench/run.py\n"
    )
    (services / "bench.timer").write_text("[Timer]\nOnCalendar=daily\n")
    return Workspace(root, target_model)


def pack_and_extract(workspace: Path, out: Path) -> Path:
    result = pack(
        PackOptions(
            source=workspace,
            output=out,
            version="1",
            wheels="none",
            download=False,
            tool_wheels=False,
            cache_dir=out / "cache",
        )
    )
    assert result.path is not None
    tree = out / "x"
    tree.mkdir()
    subprocess.run(["tar", "-xf", str(result.path), "-C", str(tree)], check=True, timeout=120)
    (top,) = tree.iterdir()
    return top


@pytest.fixture(scope="module")
def packed(tmp_path_factory: pytest.TempPathFactory) -> tuple[Workspace, Path]:
    base = tmp_path_factory.mktemp("units")
    workspace = make_workspace(base)
    out = base / "out"
    out.mkdir()
    return workspace, pack_and_extract(workspace.root, out)


def test_units_give_the_launch_commands(packed: tuple[Workspace, Path]) -> None:
    _, tree = packed
    info = load_bundle_info((tree / "bundle.toml").read_bytes(), source="bundle.toml")
    assert info.launch.commands == (
        LaunchCommand(
            name="sglang-dflash",
            port=30001,
            engine="sglang",
            argv=(
                "${REPRO_VENV}/bin/python",
                "-m",
                "sglang.launch_server",
                "--model-path",
                "${REPRO_MODELS}/Qwen3-8B",
                "--speculative-draft-model-path",
                "${REPRO_HOME}/drafter",
                "--served-model-name",
                "qwen3 8b",
                "--port",
                "30001",
            ),
            env={"SGLANG_ENABLE_TORCH_COMPILE": "0"},
            cwd="${REPRO_HOME}",
            unit="sglang-dflash.service",
        ),
        LaunchCommand(
            name="vllm",
            port=8000,
            engine="vllm",
            argv=("${REPRO_VENV}/bin/vllm", "serve", "Qwen/Qwen3-8B", "--max-model-len", "256"),
            env={"VLLM_CPU_KVCACHE_SPACE": "1"},
            unit="vllm.service",
        ),
    )
    assert TOKEN not in (tree / "bundle.toml").read_text()
    report = json.loads((tree / "env" / "pack-report.json").read_text())
    assert (
        "sglang-dflash.service: Environment=HF_TOKEN looks like a credential (its name); "
        "taken out of the unit: set it on the target in "
        "services/sglang-dflash.service.d/repro-secrets.env"
    ) in report["warnings"]
    assert TOKEN not in (tree / "services" / "sglang-dflash.service").read_text()


def test_the_ladder_reads_the_first_with_the_targets_paths(packed: tuple[Workspace, Path]) -> None:
    _, tree = packed
    variables = {"REPRO_VENV": "/srv/t/venv", "REPRO_HOME": "/srv/t", "REPRO_MODELS": "/m"}
    spec = spec_from_bundle_dir(tree, Path(sys.executable), variables=variables)
    assert spec.launch is not None
    assert spec.launch.name == "sglang-dflash"
    assert spec.launch.argv is not None
    assert spec.launch.argv[0] == "/srv/t/venv/bin/python"
    assert "/m/Qwen3-8B" in spec.launch.argv and "/srv/t/drafter" in spec.launch.argv
    assert spec.launch.cwd == Path("/srv/t")
    assert spec.launch.env == {"SGLANG_ENABLE_TORCH_COMPILE": "0"}
    assert spec.engines == ("sglang", "vllm")


def test_the_unit_names_the_model_through_a_variable(packed: tuple[Workspace, Path]) -> None:
    workspace, tree = packed
    unit = (tree / "services" / "sglang-dflash.service").read_text()
    assert "--model-path ${REPRO_MODELS}/Qwen3-8B \\\n" in unit
    assert "--speculative-draft-model-path ${REPRO_HOME}/drafter \\\n" in unit
    assert str(workspace.target_model.parent) not in unit


def test_models_named_by_units_are_referenced(packed: tuple[Workspace, Path]) -> None:
    workspace, tree = packed
    info = load_bundle_info((tree / "bundle.toml").read_bytes(), source="bundle.toml")
    by_name = {model.name: model for model in info.models}
    assert sorted(by_name) == ["Qwen3-8B", "drafter"]  # the drafter once, from drafter/
    qwen = by_name["Qwen3-8B"]
    size = sum(path.stat().st_size for path in workspace.target_model.iterdir())
    assert (qwen.role, qwen.file_count, qwen.total_bytes) == ("target", 2, size)
    carried = tree / "models" / "Qwen3-8B" / "config.json"
    assert carried.read_bytes() == (workspace.target_model / "config.json").read_bytes()
    assert not (tree / "models" / "Qwen3-8B" / "model.safetensors").exists()


def test_reproduce_md_lists_the_launch_commands(packed: tuple[Workspace, Path]) -> None:
    _, tree = packed
    text = (tree / "REPRODUCE.md").read_text()
    launch = text.split("## Launch\n", 1)[1].split("\n## ", 1)[0]
    assert "- sglang-dflash (sglang, port 30001; from services/sglang-dflash.service):" in launch
    assert (
        "      ${REPRO_VENV}/bin/python -m sglang.launch_server --model-path "
        "${REPRO_MODELS}/Qwen3-8B --speculative-draft-model-path ${REPRO_HOME}/drafter "
        "--served-model-name 'qwen3 8b' --port 30001"
    ) in launch
    assert "- vllm (vllm, port 8000; from services/vllm.service):" in launch
    assert "bench" not in launch
    assert "No launch command recorded" not in text


def test_a_launch_in_repro_toml_overrides_the_units(tmp_path: Path) -> None:
    workspace = make_workspace(tmp_path)
    (workspace.root / "repro.toml").write_text(
        '[launch]\ncommands = ["python -m sglang.launch_server --model-path /m --port 30005"]\n'
    )
    out = tmp_path / "out"
    out.mkdir()
    tree = pack_and_extract(workspace.root, out)
    info = load_bundle_info((tree / "bundle.toml").read_bytes(), source="bundle.toml")
    (command,) = info.launch.commands
    assert (command.name, command.port, command.unit) == ("launch-1", 30005, None)
    text = (tree / "REPRODUCE.md").read_text()
    assert "- launch-1 (sglang, port 30005; from repro.toml [launch]):" in text
    assert "from services/" not in text
    report = json.loads((tree / "env" / "pack-report.json").read_text())
    assert TOKEN not in json.dumps(report)
