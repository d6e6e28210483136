"""The rungs that run a script inside the target: python, torch, triton, nccl, engine."""

from __future__ import annotations

import json
import math
import socket
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from repro.gpu.arch import Verdict, arch_compatible
from repro.ladder.common import facts_of, failed, script_problem, skipped
from repro.ladder.interp import ScriptRun, run_script
from repro.ladder.types import ENGINES, LadderSpec, RungContext, RungResult, RungStatus

BF16_TOLERANCE = 1e-2
FLOAT32_TOLERANCE = 1e-4


def _passed(
    name: str,
    run: ScriptRun,
    summary: str,
    facts: Mapping[str, Any],
    warnings: tuple[str, ...] = (),
) -> RungResult:
    return RungResult(name, RungStatus.PASS, run.duration_s, summary, facts, warnings)


def python_rung(spec: LadderSpec, context: RungContext) -> RungResult:
    if not spec.python.exists():
        return RungResult(
            context.name,
            RungStatus.FAIL,
            0.0,
            f"{spec.python} does not exist",
            hint="pass the venv's directory with --venv or its interpreter with --python",
        )
    run = run_script(spec.python, context.script.file, timeout=context.timeout)
    problem = script_problem(context.name, run, context.timeout)
    if problem is not None:
        return failed(
            context.name,
            run,
            problem.summary,
            "the interpreter does not start; a venv moved or copied from another path "
            "keeps a broken bin/python link and absolute paths",
        )
    facts = facts_of(run)
    version = str(facts.get("version", "?"))
    expected = spec.expected_python
    if expected:
        if version.split(".")[:2] != expected.split(".")[:2]:
            return failed(
                context.name,
                run,
                f"Python {version}, but the bundle was packed with {expected}",
                f"create the environment with Python {'.'.join(expected.split('.')[:2])}",
                facts,
            )
        if version != expected:
            warning = f"Python {version}; the bundle was packed with {expected}"
            return _passed(context.name, run, f"Python {version}", facts, (warning,))
    return _passed(context.name, run, f"Python {version}", facts)


def _torch_hint(facts: Mapping[str, Any]) -> str:
    if not facts.get("cuda"):
        return (
            f"this torch ({facts.get('torch_version')}) is a CPU-only build: install the CUDA "
            "build from the bundle's index, or pass --cpu to check a CPU-only environment"
        )
    return (
        f"torch is built for CUDA {facts.get('cuda')}: check that nvidia-smi sees the GPUs, that "
        "the driver supports this CUDA version, and that CUDA_VISIBLE_DEVICES does not hide "
        "them; pass --cpu to check a CPU-only environment"
    )


def check_arch(facts: Mapping[str, Any]) -> tuple[list[str], list[str], list[dict[str, Any]]]:
    errors: list[str] = []
    warnings: list[str] = []
    verdicts: list[dict[str, Any]] = []
    arch_list = [str(a) for a in facts.get("arch_list", [])]
    for device in facts.get("devices", []):
        major, minor = (int(v) for v in device["capability"])
        verdict = arch_compatible((major, minor), arch_list)
        verdicts.append(
            {"device": device["index"], "verdict": verdict.verdict.value, "match": verdict.matched}
        )
        text = f"GPU {device['index']} ({device['name']}) {verdict.message}"
        if verdict.verdict is Verdict.FAIL:
            errors.append(text)
        elif verdict.verdict is Verdict.WARN:
            warnings.append(text)
    return errors, warnings, verdicts


def check_matmul(facts: Mapping[str, Any], cpu: bool) -> tuple[list[str], list[str]]:
    errors: list[str] = []
    notes: list[str] = []
    tolerance = FLOAT32_TOLERANCE if cpu else BF16_TOLERANCE
    for entry in facts.get("matmul", []):
        device = entry.get("device")
        if "error" in entry:
            errors.append(f"matmul on {device} failed: {entry['error']}")
            continue
        raw = entry.get("rel_err")
        rel_err = raw if isinstance(raw, (int, float)) else math.nan
        if not entry.get("finite", False) or not rel_err <= tolerance:
            errors.append(
                f"matmul on {device} ({entry.get('dtype')}): relative error {raw} "
                f"(allowed {tolerance:g}), finite={entry.get('finite')}"
            )
            continue
        tflops = entry.get("tflops")
        shown = f"{tflops:.1f}" if isinstance(tflops, (int, float)) and tflops >= 1 else tflops
        if isinstance(tflops, float) and tflops < 1:
            shown = f"{tflops:.3f}"
        notes.append(f"{device} {entry.get('dtype')} {shown} TFLOP/s err {rel_err:.1e}")
    return errors, notes


def torch_rung(spec: LadderSpec, context: RungContext) -> RungResult:
    args = ["--cpu"] if spec.cpu else []
    run = run_script(spec.python, context.script.file, args, timeout=context.timeout)
    problem = script_problem(context.name, run, context.timeout)
    if problem is not None:
        return problem
    if run.document is not None and "skip" in run.document:
        return skipped(context.name, str(run.document["skip"]))
    facts = facts_of(run)
    if not spec.cpu and not facts.get("cuda_available"):
        return failed(
            context.name, run, "CUDA is not available to torch", _torch_hint(facts), facts
        )
    errors, warnings, verdicts = ([], [], []) if spec.cpu else check_arch(facts)
    facts["arch_verdicts"] = verdicts
    if errors:
        return failed(
            context.name,
            run,
            "; ".join(errors),
            f"torch {facts.get('torch_version')} has no kernels for this GPU architecture: "
            "install a torch build whose arch list covers it (Blackwell needs CUDA 12.8 or "
            "newer builds)",
            facts,
        )
    matmul_errors, notes = check_matmul(facts, spec.cpu)
    if matmul_errors:
        return failed(
            context.name,
            run,
            "; ".join(matmul_errors),
            "a wrong or failing matrix product: 'no kernel image' means a missing "
            "architecture; NaN or a large error points at a broken GPU, driver or cuBLAS",
            facts,
        )
    where = "CPU" if spec.cpu else f"{facts.get('device_count')} GPU(s), CUDA {facts.get('cuda')}"
    summary = f"torch {facts.get('torch_version')} on {where}: " + "; ".join(notes)
    return _passed(context.name, run, summary, facts, tuple(warnings))


def _triton_failure_text(failure: Mapping[str, Any]) -> tuple[str, str | None]:
    compiler = str(failure.get("compiler_output", ""))
    error = str(failure.get("error", ""))
    stage = failure.get("stage")
    if "Python.h" in compiler and ("No such file" in compiler or "not found" in compiler):
        return (
            f"Python.h is missing: Triton cannot compile its launcher ({stage})",
            "install the development headers of the target's Python (Debian/Ubuntu: "
            "apt install python3.X-dev; RHEL: python3-devel), or build the venv from a "
            "Python that ships them",
        )
    if "Failed to find C compiler" in error:
        return (
            "no C compiler: Triton needs one to build its launcher",
            "install gcc (or clang), or set CC",
        )
    if "active drivers" in error or "not compiled with CUDA" in error:
        return (
            f"Triton found no GPU driver: {error}",
            "run on a machine with a GPU, or pass --cpu to run the kernel in Triton's interpreter",
        )
    if compiler.strip():
        return (f"the C compiler failed in Triton's {stage}: {error}", None)
    return (f"Triton {stage} failed: {error}", None)


def triton_rung(spec: LadderSpec, context: RungContext) -> RungResult:
    args = ["--cpu"] if spec.cpu else []
    run = run_script(spec.python, context.script.file, args, timeout=context.timeout)
    problem = script_problem(context.name, run, context.timeout)
    if problem is not None:
        return problem
    document = run.document or {}
    facts = facts_of(run)
    if "skip" in document:
        return skipped(context.name, str(document["skip"]), facts)
    failure = facts.get("failure")
    if isinstance(failure, dict):
        summary, hint = _triton_failure_text(failure)
        compiler = tuple(str(failure.get("compiler_output", "")).splitlines())
        return failed(context.name, run, summary, hint, facts, extra_tail=compiler[-20:])
    kernel = facts.get("kernel", {})
    error = kernel.get("max_abs_err")
    if not isinstance(error, (int, float)) or not error <= 1e-6:
        return failed(
            context.name, run, f"the kernel computed wrong values (max error {error})", None
        )
    mode = " (interpreter)" if spec.cpu else ""
    summary = f"triton {facts.get('triton_version')}: kernel ran on {kernel.get('device')}{mode}"
    return _passed(context.name, run, summary, facts)


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def gpu_count(spec: LadderSpec, context: RungContext) -> int:
    """The torch rung's device count; when it did not run, torch's script is asked."""
    if "device_count" in context.known:
        return int(context.known["device_count"])
    torch = context.scripts["torch"]
    run = run_script(spec.python, torch.file, ["--describe-only"], timeout=torch.timeout_s)
    return int(facts_of(run).get("device_count", 0))


def nccl_rung(spec: LadderSpec, context: RungContext) -> RungResult:
    if spec.cpu:
        return skipped(context.name, "--cpu: no GPUs to connect")
    count = gpu_count(spec, context)
    if count < 2:
        return skipped(context.name, f"{count} GPU(s): NCCL needs two or more")
    with tempfile.TemporaryDirectory(prefix="repro-nccl-") as tmp:
        args = ["--world", str(count), "--port", str(free_port())]
        args += ["--result", str(Path(tmp) / "result.json")]
        run = run_script(spec.python, context.script.file, args, timeout=context.timeout)
    nccl_hint = (
        "NCCL could not run: rerun with NCCL_DEBUG=INFO; check /dev/shm size (docker "
        "--shm-size), NCCL_P2P_DISABLE / NCCL_SOCKET_IFNAME, and that every GPU is visible"
    )
    problem = script_problem(context.name, run, context.timeout)
    if problem is not None:
        return failed(context.name, run, problem.summary, nccl_hint)
    facts = facts_of(run)
    if not facts.get("correct"):
        summary = f"all-reduce gave {facts.get('value')}, expected {facts.get('expected')}"
        return failed(context.name, run, summary, nccl_hint, facts)
    summary = (
        f"all-reduce on {count} GPUs, bus bandwidth {float(facts.get('busbw_gbps', 0)):.1f} GB/s"
    )
    return _passed(context.name, run, summary, facts)


def _engine_errors(facts: Mapping[str, Any]) -> list[str]:
    errors: list[str] = []
    for engine in facts.get("engines", []):
        if "error" in engine:
            errors.append(str(engine["error"]))
        elif engine.get("version_match") is False:
            errors.append(
                f"{engine['name']}.__version__ is {engine.get('module_version')} but the "
                f"installed distribution {engine.get('distribution')} is "
                f"{engine.get('dist_version')} (imported from {engine.get('location')})"
            )
    for entry in facts.get("patched", []):
        if not entry.get("ok"):
            errors.append(f"{entry['dist']}:{entry['path']}: {entry.get('error')}")
    for entry in facts.get("imports", []):
        if not entry.get("ok"):
            errors.append(f"import {entry['module']}: {entry.get('error')}")
    return errors


def engine_rung(spec: LadderSpec, context: RungContext) -> RungResult:
    auto = spec.engines is None
    engines = list(ENGINES if spec.engines is None else spec.engines)
    if not engines and not spec.patched_files:
        return skipped(context.name, "no serving engine in the bundle")
    request = {
        "engines": engines,
        "auto": auto,
        "patched": [
            {"dist": p.dist, "path": p.path, "kind": p.kind, "sha256": p.sha256}
            for p in spec.patched_files
        ],
    }
    with tempfile.TemporaryDirectory(prefix="repro-engine-") as tmp:
        request_file = Path(tmp) / "request.json"
        request_file.write_text(json.dumps(request), encoding="utf-8")
        run = run_script(
            spec.python, context.script.file, [str(request_file)], timeout=context.timeout
        )
    problem = script_problem(context.name, run, context.timeout)
    if problem is not None:
        return problem
    facts = facts_of(run)
    if not facts.get("engines") and not facts.get("patched"):
        return skipped(context.name, "no serving engine (sglang, vllm) is installed", facts)
    errors = _engine_errors(facts)
    tracebacks = tuple(
        line
        for item in [*facts.get("engines", []), *facts.get("imports", [])]
        for line in str(item.get("traceback", "")).splitlines()[-15:]
    )
    if errors:
        return failed(
            context.name,
            run,
            "; ".join(errors),
            "an engine that does not import or a patched file that differs: the traceback "
            "names the module; a version mismatch means another copy on sys.path "
            "(PYTHONPATH, a source checkout); a hash mismatch means the patch is not applied",
            facts,
            extra_tail=tracebacks,
        )
    parts = [
        f"{e['name']} {e.get('module_version') or e.get('dist_version')}"
        for e in facts.get("engines", [])
    ]
    patched = len(facts.get("patched", []))
    if patched:
        parts.append(f"{patched} patched file(s) verified")
    summary = "; ".join(parts)
    return _passed(context.name, run, summary, facts)
