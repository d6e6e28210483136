"""Key modules read from installed files: torch/version.py (parsed by
repro.gpu.torchversion, tests/gpu/test_torchversion.py), the arch
list from the kernels in torch/lib/libtorch_cuda.so, and `repro pack` importing nothing of
the target unless asked to (`--import-modules`).

The CUDA torch of these tests is a TEST DOUBLE: this machine has no GPU and a real CUDA torch
wheel is gigabytes, so a venv gets a `torch` package made here: a version.py as torch
writes it, a dist-info with a RECORD, a libtorch_cuda.so built by the real nvcc with real
kernels for six architectures, and an `__init__.py` that writes a marker file when imported.
The CPU torch is the real wheel (torch 2.13.0+cpu from the machine's disk).
"""

from __future__ import annotations

import base64
import hashlib
import json
import shutil
import subprocess
import sys
import tarfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from repro import _toml
from repro.bundle.environment import facts_from_dict
from repro.snapshot.facts.environment import probe_environment
from repro.snapshot.facts.modulefiles import (
    arch_sort_key,
    module_facts_from_files,
    probe_target,
    sorted_archs,
)
from tests.snapshot.conftest import PYTHON_311
from tests.support.run import run, run_repro

TORCH_VERSION = "2.14.1+cu130"
GIT_VERSION = "0123456789abcdef0123456789abcdef01234567"
VERSION_PY = f"""\
from typing import Optional

__all__ = ['__version__', 'debug', 'cuda', 'git_version', 'hip', 'rocm', 'xpu']
__version__ = '{TORCH_VERSION}'
debug = False
cuda: Optional[str] = '13.0'
git_version = '{GIT_VERSION}'
hip: Optional[str] = None
rocm: Optional[str] = None
xpu: Optional[str] = None
"""
KERNEL = """
__global__ void add(float* x) { x[threadIdx.x] += 1.0f; }
extern "C" void launch(float* x) { add<<<1, 32>>>(x); }
"""
GENCODES = (
    "arch=compute_120,code=sm_120",
    "arch=compute_80,code=sm_80",
    "arch=compute_100f,code=sm_100f",
    "arch=compute_75,code=sm_75",
    "arch=compute_90a,code=sm_90a",
    "arch=compute_120,code=compute_120",
)
ARCHS = ("sm_75", "sm_80", "sm_90a", "sm_100f", "sm_120", "compute_120")


def test_arch_lists_sort_by_number_then_suffix() -> None:
    found = {"sm_120a", "sm_90", "sm_100", "compute_90", "sm_75", "sm_90a", "sm_103f", "gfx942"}
    assert sorted_archs(found) == (
        "sm_75",
        "sm_90",
        "compute_90",
        "sm_90a",
        "sm_100",
        "sm_103f",
        "sm_120a",
        "gfx942",
    )
    assert arch_sort_key("sm_80") < arch_sort_key("sm_100")


# --- environment.json carries how the facts were gathered --------------------------------


def _document(modules: list[dict[str, Any]]) -> dict[str, Any]:
    facts = probe_environment(Path(sys.executable), imports=False)
    document: dict[str, Any] = json.loads(facts.to_json())
    document["modules"] = modules
    return document


def test_documents_without_probed_read_as_imported() -> None:
    """Bundles packed before files-only probing always imported the key modules."""
    old = {"module": "torch", "distribution": "torch", "distribution_version": "2.9.0",
           "version": "2.9.0", "file": None, "error": None,
           "torch": {"cuda": "12.8", "arch_list": ["sm_90"], "cuda_available": False}}  # fmt: skip
    (module,) = facts_from_dict(_document([old])).modules
    assert module.probed == "import"
    assert module.torch is not None and module.torch.arch_list == ("sm_90",)
    with pytest.raises(ValueError, match="probed 'guessed'"):
        facts_from_dict(_document([{**old, "probed": "guessed"}]))


# --- the real CPU torch --------------------------------------------------------------------


@pytest.mark.slow
def test_cpu_torch_from_files_matches_import_torch(torch_cpu_python: Path) -> None:
    imported = run(
        [str(torch_cpu_python), "-I", "-c",
         "import json, torch; print(json.dumps([torch.__version__, torch.version.cuda,"
         " torch.version.git_version, torch.__file__]))"]
    )  # fmt: skip
    version, cuda, git_version, file = json.loads(imported)
    facts = probe_target(torch_cpu_python)
    (torch,) = [m for m in facts.modules if m.module == "torch"]
    assert torch.probed == "files"
    assert (torch.version, torch.distribution_version, torch.file) == (version, version, file)
    assert torch.torch is not None
    assert torch.torch.cuda is None and cuda is None
    assert torch.torch.git_version == git_version
    assert torch.torch.arch_list == ()
    assert torch.torch.error is None
    # the same facts as the import reports, where files can say them
    by_import = probe_target(torch_cpu_python, import_modules=True)
    (imported_torch,) = [m for m in by_import.modules if m.module == "torch"]
    assert imported_torch.probed == "import"
    assert imported_torch.version == torch.version
    assert imported_torch.torch is not None
    assert imported_torch.torch.cuda == torch.torch.cuda
    assert imported_torch.torch.arch_list == torch.torch.arch_list
    assert facts_from_dict(json.loads(facts.to_json())) == facts


# --- a CUDA torch test double, packed through the real CLI ---------------------------------


@dataclass(frozen=True)
class CudaTorchWorkspace:
    root: Path
    python: Path
    site: Path
    marker: Path


def _record_line(site: Path, path: Path) -> str:
    data = path.read_bytes()
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{path.relative_to(site).as_posix()},sha256={digest},{len(data)}"


def _build_library(target: Path) -> None:
    nvcc = shutil.which("nvcc")
    if nvcc is None:
        pytest.fail("nvcc is expected on this machine (CUDA 13 toolkit at /usr/local/cuda-13.0)")
    source = target.parent / "kernel.cu"
    source.write_text(KERNEL)
    argv = [nvcc, "-shared", "-Xcompiler", "-fPIC", "-o", str(target), str(source)]
    for gencode in GENCODES:
        argv += ["-gencode", gencode]
    subprocess.run(argv, check=True, capture_output=True, timeout=600)
    source.unlink()


@pytest.fixture(scope="module")
def cuda_torch(tmp_path_factory: pytest.TempPathFactory) -> CudaTorchWorkspace:
    root = tmp_path_factory.mktemp("cuda-torch") / "serving"
    root.mkdir()
    marker = root.parent / "torch-was-imported"
    venv = root / "venv"
    run([str(PYTHON_311), "-m", "venv", "--without-pip", str(venv)])
    python = venv / "bin" / "python"
    site = Path(
        run(
            [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"]
        ).strip()
    )
    package = site / "torch"
    (package / "lib").mkdir(parents=True)
    (package / "version.py").write_text(VERSION_PY)
    # TEST DOUBLE of torch's __init__: tells the test that something imported it
    (package / "__init__.py").write_text(
        f"open({str(marker)!r}, 'a').write('imported\\n')\n"
        "from torch import version\n"
        "from torch.version import __version__\n"
    )
    _build_library(package / "lib" / "libtorch_cuda.so")
    info = site / f"torch-{TORCH_VERSION}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(
        f"Metadata-Version: 2.1\nName: torch\nVersion: {TORCH_VERSION}\n"
    )
    (info / "INSTALLER").write_text("pip\n")
    (info / "top_level.txt").write_text("torch\n")
    files = sorted(p for p in [*package.rglob("*"), *info.iterdir()] if p.is_file())
    lines = [_record_line(site, p) for p in files]
    (info / "RECORD").write_text("\n".join([*lines, f"{info.name}/RECORD,,"]) + "\n")
    return CudaTorchWorkspace(root, python, site, marker)


def _pack(ws: CudaTorchWorkspace, out: Path, *args: str) -> Path:
    ws.marker.unlink(missing_ok=True)
    proc = run_repro(
        "pack", str(ws.root), "-o", f"{out}/", "--version", "1", "--wheels", "none",
        "--offline", "--json", *args, env={"VIRTUAL_ENV": None},
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr.decode()
    bundle = Path(json.loads(proc.stdout)["path"])
    with tarfile.open(bundle) as archive:
        archive.extractall(out, filter="data")
    return out / "serving-1"


def _torch_module(tree: Path) -> Mapping[str, Any]:
    document = json.loads((tree / "env" / "environment.json").read_text())
    (torch,) = [m for m in document["modules"] if m["module"] == "torch"]
    return dict(torch)


@pytest.mark.slow
def test_pack_reads_the_cuda_torch_from_files_without_importing_it(
    cuda_torch: CudaTorchWorkspace, tmp_path: Path
) -> None:
    tree = _pack(cuda_torch, tmp_path)
    assert not cuda_torch.marker.exists(), "pack imported torch without --import-modules"
    source = _toml.loads((tree / "bundle.toml").read_text())["source"]
    assert source["torch"] == TORCH_VERSION
    assert source["torch_cuda"] == "13.0"
    assert tuple(source["torch_arch_list"]) == ARCHS
    torch = _torch_module(tree)
    assert torch["probed"] == "files"
    assert torch["version"] == TORCH_VERSION
    assert torch["file"] == str(cuda_torch.site / "torch" / "__init__.py")
    assert torch["torch"]["git_version"] == GIT_VERSION
    assert torch["torch"]["cuda_available"] is False
    reproduce = (tree / "REPRODUCE.md").read_text()
    assert "torch arch list (kernels in torch/lib/libtorch_cuda.so): " + ", ".join(ARCHS) in (
        reproduce
    )
    facts = probe_target(cuda_torch.python)
    assert module_facts_from_files(facts) == facts.modules


@pytest.mark.slow
def test_import_modules_imports_torch_in_the_target(
    cuda_torch: CudaTorchWorkspace, tmp_path: Path
) -> None:
    tree = _pack(cuda_torch, tmp_path, "--import-modules")
    assert cuda_torch.marker.exists(), "--import-modules did not import torch"
    torch = _torch_module(tree)
    assert torch["probed"] == "import"
    assert torch["version"] == TORCH_VERSION
    # the test double has no torch.cuda: the import report says so; no arch list
    assert torch["torch"]["cuda"] == "13.0" and torch["torch"]["arch_list"] == []
    source = _toml.loads((tree / "bundle.toml").read_text())["source"]
    assert source["torch_arch_list"] == []


@pytest.mark.slow
def test_repro_toml_asks_for_imports_and_the_flag_overrides_it(
    cuda_torch: CudaTorchWorkspace, tmp_path: Path
) -> None:
    config = cuda_torch.root / "repro.toml"
    config.write_text("[env]\nimport_modules = true\n")
    try:
        _pack(cuda_torch, tmp_path / "a")
        assert cuda_torch.marker.exists()
        tree = _pack(cuda_torch, tmp_path / "b", "--no-import-modules")
        assert not cuda_torch.marker.exists()
        assert _torch_module(tree)["probed"] == "files"
    finally:
        config.unlink()


@pytest.mark.slow
def test_inspect_and_diff_follow_how_the_bundle_was_probed(
    cuda_torch: CudaTorchWorkspace, tmp_path: Path
) -> None:
    files_tree = _pack(cuda_torch, tmp_path / "files")
    inspected = run_repro("inspect", "--json", str(files_tree))
    assert inspected.returncode == 0, inspected.stderr.decode()
    report = json.loads(inspected.stdout)
    assert report["modules_probed"] == "files"
    assert tuple(report["source"]["torch_arch_list"]) == ARCHS
    shown = run_repro("inspect", str(files_tree))
    assert "read from files" in shown.stdout.decode()  # the report goes to stdout

    live = ["--python", str(cuda_torch.python), "--json"]
    diffed = run_repro("diff", str(files_tree), *live, env={"VIRTUAL_ENV": None})
    assert not cuda_torch.marker.exists(), "diff imported torch for a files-probed bundle"
    keys = {change["key"] for change in json.loads(diffed.stdout)["environment"]}
    assert not keys & {"torch", "torch_cuda", "torch_arch_list"}, diffed.stdout.decode()

    import_tree = _pack(cuda_torch, tmp_path / "import", "--import-modules")
    cuda_torch.marker.unlink()
    diffed = run_repro("diff", str(import_tree), *live, env={"VIRTUAL_ENV": None})
    assert cuda_torch.marker.exists(), "diff did not import torch like the bundle's pack did"
    keys = {change["key"] for change in json.loads(diffed.stdout)["environment"]}
    assert not keys & {"torch", "torch_cuda", "torch_arch_list"}, diffed.stdout.decode()
    # asked for files against an imported bundle: the arch lists differ, and diff says so
    cuda_torch.marker.unlink()
    diffed = run_repro(
        "diff", str(import_tree), *live, "--no-import-modules", env={"VIRTUAL_ENV": None}
    )
    assert not cuda_torch.marker.exists()
    changes = {c["key"]: c for c in json.loads(diffed.stdout)["environment"]}
    assert changes["torch_arch_list"]["new"] == " ".join(ARCHS)
