"""The kernels step's decisions and build environment (repro.install.kernels.rebuild)."""

from __future__ import annotations

import json
from pathlib import Path

from repro.bundle.kernels import (
    ARCH_ENV,
    KernelAudit,
    KernelDistribution,
    KernelObject,
    KernelSource,
)
from repro.install.kernels.rebuild import (
    JOURNAL,
    arch_variables,
    build_environment,
    decide_rebuilds,
    fill_command,
    recover_replacement,
)

H200, B300 = (9, 0), (10, 3)


def _source(name: str, **kw: object) -> KernelSource:
    return KernelSource(name, "1.0", "tree", "/src", 1, 1, **kw)  # type: ignore[arg-type]


def _audit() -> KernelAudit:
    return KernelAudit(
        (
            KernelDistribution("for-80", "1.0", (KernelObject("a/lib.so", ("sm_80",)),)),
            KernelDistribution("for-90", "1.0", (KernelObject("b/lib.so", ("sm_90",)),)),
            KernelDistribution("ptx", "1.0", (KernelObject("c/lib.so", ("compute_80",)),)),
            KernelDistribution("not-carried", "1.0", (KernelObject("d.so", ("sm_80",)),)),
        ),
        (_source("for-80"), _source("for-90"), _source("ptx"), _source("cpu-only")),
    )


def test_the_arch_variables_of_a_box() -> None:
    values = arch_variables([B300, H200, H200], (*ARCH_ENV, "MY_ARCHS"))
    assert values == {
        "TORCH_CUDA_ARCH_LIST": "9.0;10.3",
        "CUDAARCHS": "90;103",
        "CMAKE_CUDA_ARCHITECTURES": "90;103",
        "FLASHINFER_CUDA_ARCH_LIST": "9.0 10.3",
        "MY_ARCHS": "9.0;10.3",
    }


def test_auto_rebuilds_what_has_no_code_here_and_is_carried() -> None:
    audit = _audit()
    assert [r.source.name for r in decide_rebuilds(audit, [H200], "auto")] == ["for-80"]
    # PTX JIT runs (a warning, not a rebuild); sm_90 SASS does not run on 10.3
    assert [r.source.name for r in decide_rebuilds(audit, [B300], "auto")] == ["for-80", "for-90"]
    assert [r.source.name for r in decide_rebuilds(audit, [(8, 6)], "auto")] == ["for-90"]
    assert decide_rebuilds(audit, [H200], "never") == ()
    assert [r.source.name for r in decide_rebuilds(audit, [H200], "always")] == [
        "cpu-only",
        "for-80",
        "for-90",
        "ptx",
    ]
    assert decide_rebuilds(None, [H200], "always") == ()
    assert "sm_90" in decide_rebuilds(audit, [H200], "auto")[0].reason


def test_the_build_environment_is_offline_and_arch_set(tmp_path: Path) -> None:
    base = {
        "PATH": "/usr/bin",
        "https_proxy": "http://p",
        "PIP_INDEX_URL": "https://x",
        "CUDA_HOME": "/opt/cuda",
        "PYTHONPATH": "/x",
        "HOME": "/root",
    }
    source = _source("k", env=(("MAX_JOBS", "2"), ("CUDAARCHS", "ignored")))
    env = build_environment(tmp_path / "venv", source, [H200], base)
    assert env["PATH"].split(":") == [str(tmp_path / "venv" / "bin"), "/usr/bin", "/opt/cuda/bin"]
    assert "https_proxy" not in env and "PIP_INDEX_URL" not in env and "PYTHONPATH" not in env
    assert env["PIP_NO_INDEX"] == "1" and env["MAX_JOBS"] == "2" and env["HOME"] == "/root"
    assert env["CUDAARCHS"] == "90"  # this box decides the archs


def test_placeholders_filled() -> None:
    argv = fill_command(
        ["{python}", "-m", "pip", "wheel", "-w", "{out}", "{source}"],
        python=Path("/v/bin/python"),
        source=Path("/s"),
        out=Path("/o"),
    )
    assert argv == ["/v/bin/python", "-m", "pip", "wheel", "-w", "/o", "/s"]


def test_a_cut_short_replacement_is_undone(tmp_path: Path) -> None:
    venv = tmp_path / "venv"
    (venv / "pkg").mkdir(parents=True)
    moved_old, kept_old = venv / "pkg" / "a.py", venv / "pkg" / "b.py"
    kept_old.write_text("old b")
    home = tmp_path / "home"
    (home / "old").mkdir(parents=True)
    (home / "old" / "0").write_text("old a")  # moved aside, then the new wheel wrote a.py
    moved_old.write_text("new a")
    new_only = venv / "pkg" / "c.py"
    new_only.write_text("new c")
    journal = {
        "moved": [
            [str(moved_old), str(home / "old" / "0")],
            [str(kept_old), str(home / "old" / "1")],
        ],
        "new": [str(moved_old), str(kept_old), str(new_only)],
    }
    (home / JOURNAL).write_text(json.dumps(journal))
    assert recover_replacement(home)
    assert moved_old.read_text() == "old a"
    assert kept_old.read_text() == "old b"  # never moved: the old file, left alone
    assert not new_only.exists() and not (home / JOURNAL).exists()
    assert not recover_replacement(home)
