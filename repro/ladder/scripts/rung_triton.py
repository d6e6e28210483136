"""Rung 'triton': build a C extension the way Triton builds its launcher, then
compile and run a small kernel written to a temporary .py file.

Triton JIT-compiles a small C launcher with the interpreter's headers
(Python.h); a fresh cache directory makes sure that step really runs.  The
compiler's own message is captured and reported.  With --cpu the kernel runs
in Triton's interpreter (TRITON_INTERPRET=1).
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import json
import os
import shutil
import sys
import sysconfig
import tempfile
import traceback
from collections.abc import Iterator
from pathlib import Path
from typing import Any

MARKER = "@@repro-rung-result@@"

KERNEL_SOURCE = """
import triton
import triton.language as tl


@triton.jit
def add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    pid = tl.program_id(axis=0)
    offsets = pid * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    x = tl.load(x_ptr + offsets, mask=mask)
    y = tl.load(y_ptr + offsets, mask=mask)
    tl.store(out_ptr + offsets, x * 2.0 + y, mask=mask)
"""

EXTENSION_SOURCE = """
#include <Python.h>
static struct PyModuleDef repro_probe = {PyModuleDef_HEAD_INIT, "repro_probe", NULL, -1, NULL};
PyMODINIT_FUNC PyInit_repro_probe(void) { return PyModule_Create(&repro_probe); }
"""


def emit(document: dict[str, Any]) -> None:
    print(MARKER, json.dumps(document), flush=True)


@contextlib.contextmanager
def captured_stderr(sink: Path) -> Iterator[None]:
    """Send file descriptor 2 (where the C compiler writes) to a file."""
    sys.stderr.flush()
    saved = os.dup(2)
    with sink.open("wb") as handle:
        os.dup2(handle.fileno(), 2)
        try:
            yield
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)


def failure(stage: str, exc: BaseException, compiler_output: str) -> dict[str, Any]:
    return {
        "stage": stage,
        "error": f"{type(exc).__name__}: {exc}",
        "compiler_output": compiler_output[-4000:],
        "traceback": traceback.format_exc()[-4000:],
    }


def read_text(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--cpu", action="store_true")
    args = parser.parse_args()
    workdir = Path(tempfile.mkdtemp(prefix="repro-triton-"))
    try:
        run(args.cpu, workdir)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


def run(cpu: bool, workdir: Path) -> None:
    facts: dict[str, Any] = {}
    os.environ["TRITON_CACHE_DIR"] = str(workdir / "cache")
    if cpu:
        os.environ["TRITON_INTERPRET"] = "1"
    if importlib.util.find_spec("triton") is None:
        emit({"skip": "triton is not installed in this environment", "facts": facts})
        return

    try:
        import triton
    except Exception as exc:
        facts["failure"] = failure("import", exc, "")
        emit({"facts": facts})
        return

    include = sysconfig.get_paths()["include"]
    facts.update(
        {
            "triton_version": triton.__version__,
            "python_include": include,
            "python_h_present": os.path.exists(os.path.join(include, "Python.h")),
            "cc": os.environ.get("CC"),
            "interpreter": bool(cpu),
        }
    )

    stderr_log = workdir / "stderr.txt"
    build = getattr(getattr(triton, "runtime", None), "build", None)
    compile_module = getattr(build, "compile_module_from_src", None)
    if compile_module is not None:
        try:
            with captured_stderr(stderr_log):
                compile_module(EXTENSION_SOURCE, "repro_probe")
            facts["launcher_build"] = "ok"
        except Exception as exc:
            facts["failure"] = failure("launcher build", exc, read_text(stderr_log))
            emit({"facts": facts})
            return

    kernel_file = workdir / "repro_triton_kernel.py"
    kernel_file.write_text(KERNEL_SOURCE)
    try:
        with captured_stderr(stderr_log):
            import torch

            spec = importlib.util.spec_from_file_location("repro_triton_kernel", kernel_file)
            assert spec is not None and spec.loader is not None
            module = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(module)
            device = "cpu" if cpu else "cuda"
            n = 4099
            x = torch.arange(n, dtype=torch.float32, device=device)
            y = torch.ones(n, dtype=torch.float32, device=device)
            out = torch.empty_like(x)
            block = 1024
            grid = ((n + block - 1) // block,)
            module.add_kernel[grid](x, y, out, n, BLOCK=block)
            expected = x * 2.0 + y
            max_err = float((out - expected).abs().max())
            facts["kernel"] = {"device": device, "n": n, "max_abs_err": max_err}
    except Exception as exc:
        facts["failure"] = failure("kernel", exc, read_text(stderr_log))
    emit({"facts": facts})


if __name__ == "__main__":
    main()
