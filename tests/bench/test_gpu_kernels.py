"""bench/gpu/kernels.sh (run on the GPU host only) parses, and the extension source it
builds is what it expects: a setup.py with one CUDAExtension `reprokernel._C` from
csrc/add_one.cu, a package whose `add_one` calls it, and the check the rung runs."""

from __future__ import annotations

import ast
import json
import subprocess
from pathlib import Path

from bench.gpu import kernels_summary
from tests.bench.test_gpu_scripts import shellcheck

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "bench" / "gpu" / "kernels.sh"
EXT = ROOT / "bench" / "gpu" / "kernelext"


def test_the_script_parses_with_bash() -> None:
    result = subprocess.run(["bash", "-n", str(SCRIPT)], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr


def test_shellcheck_finds_nothing() -> None:
    result = subprocess.run([shellcheck(), str(SCRIPT)], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout


def _calls(tree: ast.AST, name: str) -> list[ast.Call]:
    return [
        node
        for node in ast.walk(tree)
        if isinstance(node, ast.Call)
        and (getattr(node.func, "id", None) == name or getattr(node.func, "attr", None) == name)
    ]


def test_setup_py_builds_one_cuda_extension_of_the_script_s_paths() -> None:
    tree = ast.parse((EXT / "setup.py").read_text())
    (setup,) = _calls(tree, "setup")
    keywords = {k.arg: k.value for k in setup.keywords}
    assert ast.literal_eval(keywords["name"]) == "reprokernel"
    assert ast.literal_eval(keywords["version"]) == "0.1.0"  # the script reads its dist-info
    assert ast.literal_eval(keywords["packages"]) == ["reprokernel"]
    (extension,) = _calls(tree, "CUDAExtension")
    name, sources = (ast.literal_eval(arg) for arg in extension.args)
    assert name == "reprokernel._C"
    assert all((EXT / source).is_file() for source in sources)
    script = SCRIPT.read_text()
    for expected in ("TORCH_CUDA_ARCH_LIST=8.0", "reprokernel-0.1.0.dist-info", "_C*.so"):
        assert expected in script


def test_the_op_the_check_calls_is_the_one_the_extension_defines() -> None:
    cuda = (EXT / "csrc" / "add_one.cu").read_text()
    assert 'm.def("add_one"' in cuda and "PYBIND11_MODULE(TORCH_EXTENSION_NAME" in cuda
    package = ast.parse((EXT / "reprokernel" / "__init__.py").read_text())
    assert "add_one" in {n.name for n in package.body if isinstance(n, ast.FunctionDef)}
    check = (EXT / "check_op.py").read_text()
    ast.parse(check)
    assert "reprokernel.add_one(" in check and 'torch.device("cuda:0")' in check
    assert '["{python}", "check_op.py"]' in SCRIPT.read_text()


def test_the_summary_of_an_empty_run_says_what_is_missing(tmp_path: Path) -> None:
    (tmp_path / "nosource.txt").write_text("")
    lines = kernels_summary.summary(tmp_path, {})
    assert lines[0].startswith("[NOT AS EXPECTED] the sm_80 build fails")
    assert sum("NOT AS EXPECTED" in line for line in lines) == 10
    assert kernels_summary.main(["kernels_summary.py"]) == 2


def test_the_summary_of_a_run_as_expected(tmp_path: Path) -> None:
    times = {
        "ms": {"unpack": 95000, "build_wheel": 41000},
        "exit": {"check_before": 2, "inspect": 4, "unpack": 0, "verify": 0,
                 "inspect_nosource": 4, "unpack_nosource": 1},
    }  # fmt: skip
    (tmp_path / "times.json").write_text(json.dumps(times))
    rung = {"name": "kernels", "status": "pass", "summary": "1 kernel check(s) passed",
            "facts": {}, "output_tail": []}  # fmt: skip
    report = {"steps": [], "smoke": {"ladder": {"rungs": [rung]}}}
    (tmp_path / "unpack-report.json").write_text(json.dumps(report))
    (tmp_path / "nosource.txt").write_text("preflight: reprokernel has no code for 9.0\n")
    environ = {"INSPECT_LINES": "reprokernel 0.1.0  H200 (9.0): none", "ARCHS_NEW": "('sm_90',)"}
    lines = kernels_summary.summary(tmp_path, environ)
    assert not [line for line in lines if "NOT AS EXPECTED" in line]
    assert "  unpack               95.00   exit 0" in lines
