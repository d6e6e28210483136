"""`repro inspect BUNDLE --gpu ARCH` and `repro pack --gpu/--require-gpu`, through the real
CLI on real bundles: a workspace whose venv holds, per entry of the arch table, a real
distribution with a shared object PyPI's nvcc built for it (tests/support/nvcc.py),
installed by pip from a real wheel, packed by the real pack. Every verdict is asserted
against NVIDIA's rules as the table below spells them (CUDA C Programming Guide, "Binary
Compatibility"; the CUDA 12.9 notes on `a` and `f` targets), not as repro computes them.
"""

from __future__ import annotations

import json
import shutil
import tarfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest

from repro.bundle.manifesttree import write_manifest
from tests.snapshot.conftest import PYTHON_311, make_venv, pip
from tests.support.bundles import member_names
from tests.support.doubles.nvidia_smi import fake_nvidia_smi
from tests.support.nvcc import kernel_wheel
from tests.support.run import run_repro

pytestmark = pytest.mark.slow

# distribution -> the arch list its shared object was built for
ARCHS = {
    "k-sm90a": ("sm_90a",),
    "k-sm100f": ("sm_100f",),
    "k-sm103a": ("sm_103a",),
    "k-sm120": ("sm_120",),
    "k-compute120": ("compute_120",),
    "k-sm100a": ("sm_100a",),
    "k-compute90": ("compute_90",),
    # vLLM's `7.5 8.0 8.6 9.0 10.0 12.0+PTX`
    "k-mixed": ("sm_75", "sm_80", "sm_86", "sm_90", "sm_100", "sm_120", "compute_120"),
}
GPUS = ("9.0", "10.0", "10.3", "12.0", "12.1", "8.6")
N, P, X = "native", "PTX JIT (slow first start)", "none"
# NVIDIA's rules: SASS sm_XY runs on X.Y' with Y' >= Y, same major; sm_XYa on X.Y only;
# sm_XYf on the family X with minor >= Y; PTX compute_XY JIT-compiles for any >= X.Y.
EXPECTED = {
    #                9.0 10.0 10.3 12.0 12.1 8.6
    "k-sm90a":      (N,  X,   X,   X,   X,   X),
    "k-sm100f":     (X,  N,   N,   X,   X,   X),
    "k-sm103a":     (X,  X,   N,   X,   X,   X),
    "k-sm120":      (X,  X,   X,   N,   N,   X),
    "k-compute120": (X,  X,   X,   P,   P,   X),
    "k-sm100a":     (X,  N,   X,   X,   X,   X),
    "k-compute90":  (P,  P,   P,   P,   P,   X),
    "k-mixed":      (N,  N,   N,   N,   N,   N),
}  # fmt: skip
PRODUCTS = {"B300": "10.3", "B200": "10.0", "H200": "9.0", "H100": "9.0", "RTX PRO 6000": "12.0"}
# the small bundle of the exit codes: one distribution, sm_90 SASS and compute_120 PTX
PLAN = {"k-plan": ("sm_90", "compute_120")}
PLAN_EXIT = {"9.0": 0, "12.0": 1, "12.1": 1, "10.3": 4, "8.6": 4}


def _object(name: str) -> str:
    return f"{name.replace('-', '_')}/_ops.so"


def _workspace(base: Path, dists: Mapping[str, Sequence[str]]) -> Path:
    wheels = [
        kernel_wheel(base / "wheels", name, "1.0", {_object(name): archs})
        for name, archs in dists.items()
    ]
    venv = make_venv(PYTHON_311, base / "ws" / "venv")
    pip(venv, "install", "-q", "--no-index", "--no-deps", *map(str, wheels))
    return base / "ws"


def _repro(*argv: str) -> tuple[int, str, str]:
    result = run_repro(*argv, env={"VIRTUAL_ENV": None})
    return result.returncode, result.stdout.decode(), result.stderr.decode()


@pytest.fixture(scope="module")
def table_bundle(tmp_path_factory: pytest.TempPathFactory) -> Path:
    base = tmp_path_factory.mktemp("gpu-table")
    bundle = base / "table.tar"
    code, _, err = _repro("pack", str(_workspace(base, ARCHS)), "-o", str(bundle), "--offline")
    assert code == 0, err
    return bundle


@pytest.fixture(scope="module")
def plan_pack(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, str]:
    """The plan's workspace, and its bundle packed with --gpu 12.0 --require-gpu 9.0
    (its stderr: the warning)."""
    base = tmp_path_factory.mktemp("gpu-plan")
    workspace = _workspace(base, PLAN)
    bundle = base / "plan.tar"
    argv = ("pack", str(workspace), "-o", str(bundle), "--offline")
    code, _, err = _repro(*argv, "--gpu", "12.0", "--require-gpu", "9.0", "--gpu", "H200")
    assert code == 0, err
    return workspace, bundle, err


def _plan(bundle: Path, *gpus: str) -> tuple[int, dict[str, Any]]:
    argv = [arg for gpu in gpus for arg in ("--gpu", gpu)]
    code, out, err = _repro("inspect", str(bundle), "--json", *argv)
    assert code in (0, 1, 4), err
    document = json.loads(out)
    assert document["verified"] is True
    plan: dict[str, Any] = document["gpu_plan"]
    return code, plan


@pytest.mark.parametrize("gpu", GPUS)
def test_each_verdict_follows_nvidias_rules(table_bundle: Path, gpu: str) -> None:
    code, plan = _plan(table_bundle, gpu)
    found = {j["name"]: j for j in plan["judgements"]}
    column = GPUS.index(gpu)
    assert {name: j["words"] for name, j in found.items()} == {
        name: row[column] for name, row in EXPECTED.items()
    }
    for name, judgement in found.items():
        assert judgement["deciding"] == _object(name)
        assert judgement["capability"] == gpu
        assert judgement["rebuildable"] is False
    # some distribution has no code on every GPU of the table
    assert code == 4 and plan["verdict"] == "fail"


@pytest.mark.parametrize(("product", "gpu"), sorted(PRODUCTS.items()))
def test_a_product_name_is_its_capability(table_bundle: Path, product: str, gpu: str) -> None:
    _, by_product = _plan(table_bundle, product)
    _, by_number = _plan(table_bundle, gpu)
    words = [(j["name"], j["words"]) for j in by_product["judgements"]]
    assert words == [(j["name"], j["words"]) for j in by_number["judgements"]]
    assert by_product["gpus"] == [{"given": product, "capability": gpu}]


def test_the_table_names_the_object_and_the_verdict(table_bundle: Path) -> None:
    code, out, err = _repro("inspect", str(table_bundle), "--gpu", "B300", "--gpu", "sm_120")
    assert code == 4, err
    assert "B300 (10.3)" in out and "sm_120 (12.0)" in out
    assert "k-sm103a 1.0" in out and "k_sm103a/_ops.so" in out
    assert "PTX JIT (slow first start)" in out and "manifest: verifies" in out


@pytest.mark.parametrize(("gpu", "code"), sorted(PLAN_EXIT.items()))
def test_exit_codes_native_ptx_none(plan_pack: tuple[Path, Path, str], gpu: str, code: int) -> None:
    got, plan = _plan(plan_pack[1], gpu)
    assert got == code
    assert plan["verdict"] == {0: "pass", 1: "warn", 4: "fail"}[code]


def test_the_worst_gpu_decides_the_exit_code(plan_pack: tuple[Path, Path, str]) -> None:
    assert _plan(plan_pack[1], "9.0", "12.0")[0] == 1
    assert _plan(plan_pack[1], "12.0", "9.0", "sm_103")[0] == 4


def test_pack_writes_the_audit_into_the_manifest(plan_pack: tuple[Path, Path, str]) -> None:
    bundle = plan_pack[1]
    names = member_names(bundle)
    (top,) = {n.split("/")[0] for n in names}
    assert f"{top}/env/kernels.toml" in names
    with tarfile.open(bundle) as archive:
        manifest = archive.extractfile(f"{top}/MANIFEST.sha256")
        assert manifest is not None
        assert "  env/kernels.toml\n" in manifest.read().decode()
        toml = archive.extractfile(f"{top}/env/kernels.toml")
        assert toml is not None
        text = toml.read().decode()
    assert 'name = "k-plan"' in text and 'path = "k_plan/_ops.so"' in text
    assert '"compute_120"' in text and '"sm_90"' in text


def test_pack_gpu_warns_for_each_distribution_not_native(plan_pack: tuple[Path, Path, str]) -> None:
    err = " ".join(plan_pack[2].split())
    assert "warning: k-plan 1.0 on 12.0: PTX JIT (slow first start) (k_plan/_ops.so:" in err
    assert "on 9.0" not in err and "on H200" not in err  # native there: no warning


def test_require_gpu_fails_before_anything_is_written(
    plan_pack: tuple[Path, Path, str], tmp_path: Path
) -> None:
    workspace = plan_pack[0]
    out = tmp_path / "out"
    out.mkdir()
    bundle = out / "never.tar"
    argv = ("pack", str(workspace), "-o", str(bundle), "--offline")
    code, _, err = _repro(*argv, "--require-gpu", "B300", "--require-gpu", "12.0")
    assert code == 1, err
    message = " ".join(err.split())
    assert "--require-gpu: no code for that GPU" in message
    assert "k-plan 1.0 on B300 (10.3): none (k_plan/_ops.so:" in message
    assert list(out.iterdir()) == []
    # PTX only is not "none": --require-gpu 12.0 alone packs, with the warning
    code, _, err = _repro(*argv, "--require-gpu", "12.0")
    assert code == 0 and bundle.is_file() and "PTX JIT" in err


def test_a_bad_gpu_value_is_a_usage_error(plan_pack: tuple[Path, Path, str]) -> None:
    code, _, err = _repro("inspect", str(plan_pack[1]), "--gpu", "Z900")
    assert code == 2 and "--gpu 'Z900'" in err and "B300" in err
    code, _, err = _repro("pack", str(plan_pack[0]), "--require-gpu", "sm_9")
    assert code == 2 and "--gpu 'sm_9'" in err


def test_a_bundle_without_the_audit_exits_2(
    plan_pack: tuple[Path, Path, str], tmp_path: Path
) -> None:
    with tarfile.open(plan_pack[1]) as archive:
        archive.extractall(tmp_path, filter="data")
    (top,) = tmp_path.iterdir()
    (top / "env" / "kernels.toml").unlink()
    write_manifest(top)
    code, out, _ = _repro("inspect", str(top))
    assert code == 0 and "k-plan" not in out  # the rest of inspect reads it as before
    code, _, err = _repro("inspect", str(top), "--gpu", "9.0")
    assert code == 2
    assert "has no env/kernels.toml: it was packed by a repro older than" in " ".join(err.split())
    shutil.rmtree(top)


@pytest.mark.parametrize(("capability", "code"), [("10.3", 1), ("9.0", 0)])
def test_unpack_preflight_judges_the_audit_on_the_box(
    plan_pack: tuple[Path, Path, str], tmp_path: Path, capability: str, code: int
) -> None:
    """The box's GPU from tests/support/doubles/nvidia_smi.py (a test double: this
    machine has no GPU); the dry run stops after the preflight."""
    env = {"VIRTUAL_ENV": None, **fake_nvidia_smi(tmp_path / "double", capability, "13.0")}
    target = tmp_path / "target"
    argv = ("unpack", str(plan_pack[1]), "--target", str(target), "--dry-run", "--offline")
    result = run_repro(*argv, "--json", env=env)
    err = " ".join(result.stderr.decode().split())
    assert result.returncode == code, err
    if code:
        assert "gpu 0 k-plan: NVIDIA Test Double GPU: k-plan 1.0 on GPU 0: none" in err
        assert "nothing was installed" in err
    else:
        checks = {c["name"]: c for c in json.loads(result.stdout)["preflight"]["checks"]}
        assert checks["gpu 0 kernels"]["status"] == "pass"
        assert checks["gpu 0 kernels"]["detail"].endswith(
            "native code in 1 distribution(s): k-plan"
        )
    assert not target.exists()
