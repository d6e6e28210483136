"""Compile caches through the real CLI: `pack --caches` carries them with their keys,
`inspect` shows them, `unpack` restores one where its key holds (the rendered unit and
the server rung's launch read TARGET/cache/caches.env) and leaves any other out with the
line that names the part of the key that differs, and `verify` does not call the
engine's writes into a restored cache drift.

The TorchInductor cache is real (torch.compile on the CPU, tests/support/caches.py) and,
in the torch round trip, really hit by the rebuilt venv's torch at the new place. The
Triton cache is laid out as Triton writes one (no GPU here to compile one). Another GPU
is the `nvidia-smi` TEST DOUBLE of tests/support/doubles/ (this machine has no GPU);
another torch is a bundle whose env/caches.toml says the cache was packed with torch
2.12.0 (its manifest written again): this machine has one torch wheel, and a target's
torch is always the lock's.
"""

from __future__ import annotations

import json
import shlex
import shutil
import tarfile
from dataclasses import dataclass
from pathlib import Path

import pytest

from repro.bundle.manifesttree import write_manifest
from tests.snapshot.conftest import PYTHON_311, make_venv, pip
from tests.support.bundles import archive_tree, member_names, read_member
from tests.support.caches import (
    COMPILE_SCRIPT,
    compile_once,
    copy_cache,
    inductor_cache,
    make_triton_cache,
)
from tests.support.doubles.nvidia_smi import fake_nvidia_smi
from tests.support.freshbox import fresh_box
from tests.support.run import run_repro

pytestmark = pytest.mark.slow  # real venvs, the real torch, a real compile


@dataclass(frozen=True)
class Packed:
    workspace: Path
    inductor: Path
    triton: Path
    bundle: Path
    stderr: str


def _workspace(base: Path, inductor: Path, triton: Path, venv: Path | None = None) -> Path:
    workspace = base / "ws"
    (workspace / "services").mkdir(parents=True)
    # the two kinds made here: this machine's own defaults (a ~/.cache/vllm another
    # test left) stay out of the bundles
    config = '[caches]\nkinds = ["triton", "inductor"]\n'
    if venv is None:
        pip(make_venv(PYTHON_311, workspace / "venv"), "install", "-q", "idna")
        config += '\n[env]\nvenv = "venv"\n'
    else:
        config += f'\n[env]\nvenv = "{venv}"\n'
    (workspace / "repro.toml").write_text(config)
    (base / "serve.env").write_text(f"TRITON_CACHE_DIR={triton}\n")
    (workspace / "services" / "serve.service").write_text(
        "[Unit]\nDescription=model server\n\n[Service]\n"
        f"Environment=TORCHINDUCTOR_CACHE_DIR={inductor}\n"
        f"EnvironmentFile={base / 'serve.env'}\n"
        "ExecStart=/usr/bin/true\n\n[Install]\nWantedBy=multi-user.target\n"
    )
    return workspace


def _pack(workspace: Path, out: Path, *extra: str) -> tuple[Path, str]:
    result = run_repro(
        "pack", str(workspace), "-o", f"{out}/", "--wheels", "all", "--version", "1", *extra
    )
    assert result.returncode == 0, result.stderr.decode()
    return Path(result.stdout.decode().strip().splitlines()[-1]), result.stderr.decode()


@pytest.fixture(scope="module")
def packed(tmp_path_factory: pytest.TempPathFactory, torch_cpu_python: Path) -> Packed:
    base = tmp_path_factory.mktemp("caches")
    inductor = copy_cache(inductor_cache(torch_cpu_python), base / "inductor")
    (inductor / ".env").write_text("HF_TOKEN=\n")  # a credential's name: never carried
    triton = make_triton_cache(base / "triton", arch=90, version=None)
    workspace = _workspace(base, inductor, triton)
    bundle, stderr = _pack(workspace, base / "out", "--caches")
    return Packed(workspace, inductor, triton, bundle, stderr)


def _unpack(bundle: Path, target: Path, *extra: str, path: str | None = None) -> str:
    env = {"PATH": path} if path is not None else None
    result = run_repro(
        "unpack", str(bundle), "--target", str(target), "--offline", "--no-smoke", "-v",
        *extra, env=env,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr.decode()
    return result.stderr.decode()


def _files(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in root.rglob("*") if p.is_file()}


def test_pack_carries_each_cache_with_its_key(packed: Packed) -> None:
    names = member_names(packed.bundle)
    top = names[0].split("/")[0]
    carried = {n.split("/", 3)[3] for n in names if n.startswith(f"{top}/caches/inductor/")}
    expected = set(_files(packed.inductor)) - {".env"}
    assert carried == expected and any(rel.startswith("fxgraph/") for rel in carried)
    assert sum(n.startswith(f"{top}/caches/triton/") for n in names) == 12
    caches = read_member(packed.bundle, f"{top}/env/caches.toml").decode()
    assert 'kind = "triton"' in caches and 'capability = [\n    "9.0",\n]' in caches
    assert f'source = "{packed.inductor}"' in caches
    report = json.loads(read_member(packed.bundle, f"{top}/env/pack-report.json"))
    assert {"path": f"{packed.inductor}/.env", "kind": "secret"}.items() <= next(
        item for item in report["left_out"] if item["path"].endswith("/.env")
    ).items()
    assert f"carrying inductor: {len(expected)} file(s)" in packed.stderr


def test_inspect_shows_the_caches_and_their_keys(packed: Packed) -> None:
    result = run_repro("inspect", str(packed.bundle), "--json")
    assert result.returncode == 0, result.stderr.decode()
    caches = {c["kind"]: c for c in json.loads(result.stdout)["caches"]}
    assert caches["triton"]["key"]["capability"] == ["9.0"]
    assert caches["triton"]["from_metadata"] == ["capability"]
    assert caches["triton"]["variable"] == "TRITON_CACHE_DIR"
    assert caches["inductor"]["key_described"] == (
        "capability none, torch none, triton none, cuda none"
    )
    shown = run_repro("inspect", str(packed.bundle)).stdout.decode()
    assert "compile caches" in shown and "inductor:" in shown


def test_unpack_on_a_cpu_box_restores_inductor_and_leaves_triton_out(
    packed: Packed, tmp_path: Path
) -> None:
    target = tmp_path / "t"
    said = _unpack(packed.bundle, target, "--cpu")
    assert "triton: left out: capability none here, packed for 9.0" in said
    restored = target / "cache" / "inductor"
    source = _files(packed.inductor)
    del source[".env"]
    assert _files(restored) == source
    assert not (target / "cache" / "triton").exists()
    assert (target / "cache" / "caches.env").read_text().splitlines()[1:] == [
        f"TORCHINDUCTOR_CACHE_DIR={restored}"
    ]
    unit = (target / "services" / "serve.service").read_text()
    assert f"EnvironmentFile={target}/cache/caches.env\n\n[Install]" in unit
    # the engine writes into its cache as it runs: no drift
    (restored / "fxgraph" / "new-entry").write_bytes(b"compiled later")
    next(p for p in restored.rglob("*.py")).write_text("# recompiled\n")
    verify = run_repro("verify", str(target))
    assert verify.returncode == 0, verify.stdout.decode() + verify.stderr.decode()


def test_unpack_on_another_gpu_restores_triton_and_leaves_inductor_out(
    packed: Packed, tmp_path: Path
) -> None:
    path = fake_nvidia_smi(tmp_path / "smi", "9.0", "13.0")["PATH"]  # the test double
    target = tmp_path / "t"
    said = _unpack(packed.bundle, target, path=path)
    assert "inductor: left out: capability 9.0 here, packed for none" in said
    triton = target / "cache" / "triton"
    assert set(_files(triton)) == set(_files(packed.triton))
    for group in triton.rglob("__grp__*.json"):
        children = json.loads(group.read_text())["child_paths"]
        assert len(children) == 5
        assert all(Path(p).is_file() and Path(p).is_relative_to(triton) for p in children.values())
    assert (target / "cache" / "caches.env").read_text().splitlines()[1:] == [
        f"TRITON_CACHE_DIR={triton}"
    ]


def test_caches_max_size_leaves_out_what_passes_it(packed: Packed, tmp_path: Path) -> None:
    bundle, stderr = _pack(packed.workspace, tmp_path, "--caches-max-size", "16K")
    names = member_names(bundle)
    assert any("/caches/triton/" in n for n in names)
    assert not any("/caches/inductor/" in n for n in names)
    assert "would pass the caches' bound of 16.0 KiB" in stderr
    report = json.loads(read_member(bundle, f"{names[0].split('/')[0]}/env/pack-report.json"))
    assert any(i["kind"] == "size" and "inductor" in i["reason"] for i in report["left_out"])
    refused = run_repro("pack", str(packed.workspace), "--caches-max-size", "lots")
    assert refused.returncode == 2 and b"is not a size" in refused.stderr


def test_without_caches_nothing_is_carried(packed: Packed, tmp_path: Path) -> None:
    bundle, _ = _pack(packed.workspace, tmp_path)
    assert not any("/caches/" in n or n.endswith("caches.toml") for n in member_names(bundle))


# --- the real torch: the restored cache hit at the new place, or another torch's left out


def _rewritten(bundle: Path, out: Path, old: str, new: str) -> Path:
    """`bundle` with env/caches.toml's `old` replaced by `new`, its manifest written again:
    a bundle whose cache was packed with another torch."""
    tree = out / "tree"
    with tarfile.open(bundle) as archive:
        archive.extractall(tree, filter="data")
    (top,) = tree.iterdir()
    caches = top / "env" / "caches.toml"
    caches.write_text(caches.read_text().replace(old, new))
    (top / "MANIFEST.sha256").unlink()
    write_manifest(top)
    return archive_tree(top, out / "other-torch.tar")


def test_torch_round_trip_hits_the_restored_cache(tmp_path: Path, torch_cpu_python: Path) -> None:
    inductor = copy_cache(inductor_cache(torch_cpu_python), tmp_path / "inductor")
    triton = make_triton_cache(tmp_path / "triton", version=None)
    venv = torch_cpu_python.parent.parent
    workspace = _workspace(tmp_path, inductor, triton, venv=venv)
    bundle, _ = _pack(workspace, tmp_path / "out", "--caches")
    assert 'torch = "2.13.0+cpu"' in read_member(bundle, "ws-1/env/caches.toml").decode()
    shutil.rmtree(inductor)  # the source's cache is gone: only the restored one can hit
    target = tmp_path / "t"
    _unpack(bundle, target, "--cpu")
    warm = compile_once(target / "venv" / "bin" / "python", target / "cache" / "inductor")
    counters = warm["inductor"]
    assert isinstance(counters, dict)
    assert counters.get("fxgraph_cache_hit") == 1 and "fxgraph_cache_miss" not in counters

    other = _rewritten(bundle, tmp_path / "other", 'torch = "2.13.0+cpu"', 'torch = "2.12.0"')
    said = _unpack(other, tmp_path / "t2", "--cpu")
    assert "inductor: left out: torch 2.13.0+cpu here, packed for 2.12.0" in said
    assert not (tmp_path / "t2" / "cache" / "inductor").exists()


def test_a_restored_cache_is_hit_on_a_bare_box(tmp_path: Path, torch_cpu_python: Path) -> None:
    """The fresh box: the bundle alone in an isolated root (the source's paths absent, no
    network, Debian's own Python 3.11 where the source venv is pyenv's), setup_env.sh
    then the caches step at another path; the rebuilt venv's torch hits the restored
    TorchInductor cache there, as the rendered unit points it."""
    inductor = copy_cache(inductor_cache(torch_cpu_python), tmp_path / "inductor")
    triton = make_triton_cache(tmp_path / "triton", version=None)
    workspace = _workspace(tmp_path, inductor, triton, venv=torch_cpu_python.parent.parent)
    bundle, _ = _pack(workspace, tmp_path / "out", "--caches")
    shutil.rmtree(inductor)  # only the restored cache can hit
    box = fresh_box(tmp_path / "box", python="debian-3.11", binds={bundle: "/in/ws-1.tar"})
    for source_path in (workspace, tmp_path / "inductor", torch_cpu_python):
        assert box.run(f"test -e {shlex.quote(str(source_path))}").returncode != 0
    assert box.run("tar xf /in/ws-1.tar", cwd="/box").returncode == 0
    setup = box.run(
        ["bash", "/box/ws-1/setup_env.sh", "--target", "/box/srv/ws", "--offline", "--cpu",
         "--no-smoke", "-v"],
        timeout=1800,
    )  # fmt: skip
    assert setup.returncode == 0, setup.stderr[-3000:]
    assert "inductor: restored" in setup.stderr
    assert "triton: left out" in setup.stderr  # a GPU cache on a CPU box
    env_file = box.host("/box/srv/ws/cache/caches.env").read_text()
    assert "TORCHINDUCTOR_CACHE_DIR=/box/srv/ws/cache/inductor" in env_file
    unit = box.host("/box/srv/ws/services/serve.service").read_text()
    assert "EnvironmentFile=/box/srv/ws/cache/caches.env" in unit
    warm = box.run(
        ["/box/srv/ws/venv/bin/python", "-c", COMPILE_SCRIPT],
        env={"TORCHINDUCTOR_CACHE_DIR": "/box/srv/ws/cache/inductor"},
        timeout=900,
    )
    assert warm.returncode == 0, warm.stderr[-3000:]
    counters = json.loads(warm.stdout.strip().splitlines()[-1])["inductor"]
    assert counters.get("fxgraph_cache_hit") == 1 and "fxgraph_cache_miss" not in counters
