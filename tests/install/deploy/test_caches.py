"""The caches step's work on real files: a cache restored where its key holds, Triton's
group files pointing at the copy (and nowhere else), TARGET/cache/caches.env as systemd
reads it, a mismatch left out with its line, and no write through a planted link."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from repro.bundle import layout
from repro.bundle.caches import CacheKey, CarriedCache, dump_caches
from repro.errors import InstallError
from repro.install.deploy.caches import (
    TargetFacts,
    cache_environment,
    carried_caches,
    restore_caches,
)
from tests.support.caches import make_triton_cache

SOURCE = "/home/serve/.triton/cache"
HERE = TargetFacts(capability=("9.0",), driver="580.65.06", versions={"triton": "3.6.0"}, cuda=None)


def _bundle(tmp_path: Path) -> tuple[Path, CarriedCache]:
    bundle = tmp_path / "bundle"
    made = make_triton_cache(tmp_path / "made", kernels=1)
    cache_dir = layout.at(bundle, layout.cache_file("triton"))
    cache_dir.parent.mkdir(parents=True)
    made.rename(cache_dir)
    for group in cache_dir.rglob("__grp__*.json"):  # as packed: the source's paths
        children = json.loads(group.read_text())["child_paths"]
        moved = {k: v.replace(str(made), SOURCE) for k, v in children.items()}
        moved["stray.cubin"] = "/etc/passwd"  # a path outside the cache
        group.write_text(json.dumps({"child_paths": moved}))
    files = sum(1 for p in cache_dir.rglob("*") if p.is_file())
    cache = CarriedCache("triton", SOURCE, files, 1, CacheKey(("9.0",), triton="3.6.0"))
    layout.at(bundle, layout.CACHES_TOML).parent.mkdir(parents=True, exist_ok=True)
    layout.at(bundle, layout.CACHES_TOML).write_bytes(dump_caches([cache]))
    return bundle, cache


def test_restored_where_the_key_holds(tmp_path: Path) -> None:
    bundle, cache = _bundle(tmp_path)
    assert carried_caches(bundle) == (cache,)
    target = tmp_path / "my target"
    (outcome,) = restore_caches(bundle, target, HERE, [cache])
    restored = target / "cache" / "triton"
    assert outcome.restored and outcome.directory == restored and outcome.files == cache.files
    for group in restored.rglob("__grp__*.json"):
        children = json.loads(group.read_text())["child_paths"]
        assert "stray.cubin" not in children and len(children) == 5
        assert all(
            Path(p).is_file() and Path(p).is_relative_to(restored) for p in children.values()
        )
    assert cache_environment(target) == {"TRITON_CACHE_DIR": str(restored)}
    # a rerun (a step cut short) writes the same files again
    (again,) = restore_caches(bundle, target, HERE, [cache])
    assert again.restored and not list(restored.rglob("*.repro-partial"))


@pytest.mark.parametrize(
    "here,line",
    [
        (
            TargetFacts((), None, {"triton": "3.6.0"}, None),
            "triton: left out: capability none here, packed for 9.0",
        ),
        (
            TargetFacts(("9.0", "12.0"), None, {"triton": "3.5.1"}, "13.0"),
            "triton: left out: capability 9.0,12.0 here, packed for 9.0; "
            "triton 3.5.1 here, packed for 3.6.0; cuda 13.0 here, packed for none",
        ),
    ],
)
def test_left_out_with_the_parts_that_differ(tmp_path: Path, here: TargetFacts, line: str) -> None:
    bundle, cache = _bundle(tmp_path)
    target = tmp_path / "t"
    (target / "cache").mkdir(parents=True)
    (target / "cache" / "caches.env").write_text("TRITON_CACHE_DIR=/old\n")
    (outcome,) = restore_caches(bundle, target, here, [cache])
    assert not outcome.restored and outcome.line == line
    assert not (target / "cache" / "triton").exists()
    assert cache_environment(target) == {}  # nothing restored: no variable left set


def test_never_written_through_a_planted_link(tmp_path: Path) -> None:
    bundle, cache = _bundle(tmp_path)
    target = tmp_path / "t"
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (target / "cache").mkdir(parents=True)
    (target / "cache" / "triton").symlink_to(elsewhere)
    with pytest.raises(InstallError, match="is a symbolic link"):
        restore_caches(bundle, target, HERE, [cache])
    assert list(elsewhere.iterdir()) == []


def _deep_gemm_bundle(tmp_path: Path, key: CacheKey) -> tuple[Path, CarriedCache]:
    """A bundle carrying a DeepGEMM JIT cache laid out as DeepGEMM writes one: a
    directory per kernel holding the generated source and the cubin nvcc made of it."""
    bundle = tmp_path / "bundle"
    kernel = layout.at(bundle, layout.cache_file("deep_gemm")) / "cache" / "kernel.fp8_gemm.1a2b"
    kernel.mkdir(parents=True)
    (kernel / "kernel.cu").write_text("// fp8 gemm, sm_90a\n")
    (kernel / "kernel.cubin").write_bytes(b"\x7fELF" + bytes(60))
    cache = CarriedCache("deep_gemm", "/home/serve/.cache/sglang/deep_gemm", 2, 80, key)
    layout.at(bundle, layout.CACHES_TOML).parent.mkdir(parents=True, exist_ok=True)
    layout.at(bundle, layout.CACHES_TOML).write_bytes(dump_caches([cache]))
    return bundle, cache


def test_deep_gemm_restored_under_both_of_its_variables(tmp_path: Path) -> None:
    """SGLang reads SGLANG_DG_CACHE_DIR and DeepGEMM DG_JIT_CACHE_DIR: caches.env sets
    both to the restored copy, and a sgl-kernel of another version leaves it out."""
    key = CacheKey(("9.0",), cuda="13.0", engine="sgl-kernel 0.3.21")
    bundle, cache = _deep_gemm_bundle(tmp_path, key)
    assert carried_caches(bundle) == (cache,)
    here = TargetFacts(("9.0",), "580.65.06", {"sgl-kernel": "0.3.21"}, "13.0")
    target = tmp_path / "target"
    (outcome,) = restore_caches(bundle, target, here, [cache])
    restored = target / "cache" / "deep_gemm"
    assert outcome.restored and outcome.files == 2
    assert (restored / "cache" / "kernel.fp8_gemm.1a2b" / "kernel.cubin").is_file()
    assert cache_environment(target) == {
        "SGLANG_DG_CACHE_DIR": str(restored),
        "DG_JIT_CACHE_DIR": str(restored),
    }
    assert "SGLANG_DG_CACHE_DIR, DG_JIT_CACHE_DIR in" in outcome.line

    other = TargetFacts(("9.0",), "580.65.06", {"sgl-kernel": "0.3.22"}, "13.0")
    (left,) = restore_caches(bundle, tmp_path / "t2", other, [cache])
    assert not left.restored
    assert left.line == (
        "deep_gemm: left out: engine sgl-kernel 0.3.22 here, packed for sgl-kernel 0.3.21"
    )
