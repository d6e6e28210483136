"""`repro pack` end to end, through the real CLI, on real workspaces built once per session.

The main workspace holds a Python 3.11 venv with real PyPI packages (six, idna, attrs,
packaging), a package installed from a wheel built here whose wheel file is then deleted (so
the vault must rebuild it from the installed files), an editable install, and three hand
patches (idna/core.py edited, a file added inside packaging, idna/codec.py deleted); a
systemd unit pointing into the venv and the workspace with an EnvironmentFile holding a
token; a drafter directory with a fake 2 MB weights file; and bench files named in
repro.toml.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import tarfile
import threading
import time
import zipfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from repro import _toml
from tests.snapshot.conftest import PYTHON_311, PYTHON_312, Venv, make_venv, pip, write_project
from tests.support.run import run, run_repro

pytestmark = pytest.mark.slow

TOKEN = "hf_packTestSecretToken0123456789"
VERSION = "1.0"
PYPI = ("six", "idna", "attrs", "packaging")
LOCAL_DIST = "repro-demo-wheel"
EDITABLE_DIST = "repro-demo-editable"
EXPECTED_PATCHES = {
    ("idna", "idna/core.py", "modified"),
    ("packaging", "packaging/_repro_added.py", "added"),
    ("idna", "idna/codec.py", "deleted"),
}


# --- helpers ---------------------------------------------------------------------------


def pack_env(**extra: str) -> dict[str, str | None]:
    """The environment a pack runs in: this one, with a secret in it, no active venv."""
    env: dict[str, str | None] = {"VIRTUAL_ENV": None, "HF_TOKEN": TOKEN}
    env.update(extra)
    return env


def pack(
    *args: str, env: Mapping[str, str | None] | None = None
) -> subprocess.CompletedProcess[bytes]:
    return run_repro("pack", *args, env=pack_env() if env is None else env)


def packed_ok(*args: str) -> Path:
    """Run a pack that must succeed; return the bundle path it reports."""
    proc = pack(*args, "--json")
    assert proc.returncode == 0, proc.stderr.decode()
    document = json.loads(proc.stdout)
    return Path(document["path"])


def extract(archive: Path, into: Path) -> Path:
    """Extract with GNU tar (not our own reader); return the bundle's top directory."""
    into.mkdir(parents=True)
    flags = ["--zstd"] if archive.name.endswith(".zst") else []
    run(["tar", *flags, "-xf", str(archive), "-C", str(into)])
    (top,) = into.iterdir()
    return top


def tree_state(root: Path) -> dict[str, tuple[bytes, int]]:
    """Every file under root (symlinks as their target) with its bytes and mtime."""
    state: dict[str, tuple[bytes, int]] = {}
    for path in sorted(root.rglob("*")):
        rel = path.relative_to(root).as_posix()
        if path.is_symlink():
            state[rel] = (os.readlink(path).encode(), path.lstat().st_mtime_ns)
        elif path.is_file():
            state[rel] = (path.read_bytes(), path.stat().st_mtime_ns)
        elif path.is_dir():
            state[rel + "/"] = (b"", path.stat().st_mtime_ns)
    return state


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


# --- the workspace -----------------------------------------------------------------------


@dataclass(frozen=True)
class Workspace:
    root: Path
    venv: Venv
    local_wheel_name: str
    env_file: Path


@pytest.fixture(scope="session")
def workspace(tmp_path_factory: pytest.TempPathFactory) -> Workspace:
    base = tmp_path_factory.mktemp("pack-ws")
    root = base / "dflash"
    root.mkdir()
    venv = make_venv(PYTHON_311, root / "venv")

    local = write_project(base / "local-src", LOCAL_DIST, "demo_wheel", "1.0+local", True)
    dist = base / "dist"
    run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(dist), str(local)])
    (wheel,) = dist.glob("*.whl")
    editable = write_project(base / "editable-src", EDITABLE_DIST, "demo_editable", "0.3", False)
    pip(venv, "install", "-q", *PYPI, str(wheel))
    pip(venv, "install", "-q", "-e", str(editable))
    wheel_name = wheel.name
    shutil.rmtree(dist)  # the vault must rebuild it from the installed files

    site = venv.site_packages
    core = site / "idna" / "core.py"
    core.write_bytes(core.read_bytes().replace(b"import re", b"import re  # patched", 1))
    (site / "packaging" / "_repro_added.py").write_text("ADDED = True\n")
    (site / "idna" / "codec.py").unlink()

    env_file = root / "app.env"
    env_file.write_text(f"HF_TOKEN={TOKEN}\nSGLANG_LOG_LEVEL=info\n")
    (root / "services").mkdir()
    (root / "services" / "app.service").write_text(
        "[Unit]\nDescription=demo app\n\n[Service]\n"
        f"EnvironmentFile={env_file}\n"
        f"ExecStart={root}/venv/bin/repro-demo-wheel-cli --config {root}/drafter/config.json\n"
        f"WorkingDirectory={root}\n\n[Install]\nWantedBy=multi-user.target\n"
    )
    drafter = root / "drafter"
    drafter.mkdir()
    (drafter / "config.json").write_text('{"architectures": ["LlamaForCausalLM"]}\n')
    (drafter / "README.md").write_text("# drafter\n")
    (drafter / "model.safetensors").write_bytes(os.urandom(2 * 2**20))
    (root / "bench").mkdir()
    (root / "bench" / "run_bench.sh").write_text("#!/bin/sh\necho bench\n")
    (root / "bench" / "run_bench.sh").chmod(0o755)
    (root / "bench" / "results.json").write_text('{"tokens_per_s": 1234.5}\n')
    (root / "repro.toml").write_text(
        '[files]\ninclude = ["bench/*"]\n\n'
        '[launch]\ncommands = ["python -m sglang.launch_server --model-path /m --port 30001"]\n'
    )
    return Workspace(root, venv, wheel_name, env_file)


@dataclass(frozen=True)
class Packed:
    archive: Path
    tree: Path
    summary: dict[str, Any]
    before: dict[str, tuple[bytes, int]]
    after: dict[str, tuple[bytes, int]]


@pytest.fixture(scope="session")
def packed(workspace: Workspace, tmp_path_factory: pytest.TempPathFactory) -> Packed:
    out = tmp_path_factory.mktemp("pack-out")
    before = tree_state(workspace.root)
    proc = pack(str(workspace.root), "-o", f"{out}/", "--version", VERSION, "--json")
    after = tree_state(workspace.root)
    assert proc.returncode == 0, proc.stderr.decode()
    summary = json.loads(proc.stdout)
    archive = Path(summary["path"])
    return Packed(archive, extract(archive, out / "x"), summary, before, after)


@pytest.fixture(scope="session")
def packed_all(workspace: Workspace, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("pack-all")
    archive = packed_ok(str(workspace.root), "-o", f"{out}/", "--version", "9", "--wheels", "all")
    return extract(archive, out / "x")


@pytest.fixture(scope="session")
def workspace_312(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A workspace whose venv is made with Python 3.12 (repro runs on 3.11)."""
    root = tmp_path_factory.mktemp("pack-312") / "svc312"
    root.mkdir()
    venv = make_venv(PYTHON_312, root / ".venv")
    pip(venv, "install", "-q", "six")
    return root


# --- bundle content ------------------------------------------------------------------------


def test_pack_summary_and_layout(packed: Packed) -> None:
    assert packed.archive.name == f"dflash-{VERSION}.tar"
    assert packed.tree.name == f"dflash-{VERSION}"
    for rel in ("bundle.toml", "MANIFEST.sha256", "REPRODUCE.md", "setup_env.sh"):
        assert (packed.tree / rel).is_file(), rel
    assert os.access(packed.tree / "setup_env.sh", os.X_OK)
    assert list((packed.tree / "tool" / "wheels").glob("repro-*.whl"))
    summary = packed.summary
    assert summary["units"] == ["app.service"]
    assert summary["models"] == ["drafter"]
    assert summary["files"] == ["bench/results.json", "bench/run_bench.sh"]


def test_manifest_verifies_with_sha256sum(packed: Packed) -> None:
    proc = subprocess.run(
        ["sha256sum", "--strict", "-c", "MANIFEST.sha256"],
        cwd=packed.tree,
        capture_output=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout.decode() + proc.stderr.decode()
    listed = {
        line.split("  ", 1)[1]
        for line in (packed.tree / "MANIFEST.sha256").read_text().splitlines()
    }
    on_disk = {p.relative_to(packed.tree).as_posix() for p in packed.tree.rglob("*") if p.is_file()}
    assert listed == on_disk - {"MANIFEST.sha256"}


def test_repro_check_passes_on_the_archive(packed: Packed) -> None:
    proc = run_repro("check", str(packed.archive))
    assert proc.returncode == 0, proc.stderr.decode()


def test_patches_toml_lists_exactly_the_patches(packed: Packed, workspace: Workspace) -> None:
    data = _toml.loads((packed.tree / "patches" / "patches.toml").read_text())
    entries = data["files"]
    assert {(e["dist"], e["path"], e["kind"]) for e in entries} == EXPECTED_PATCHES
    site = workspace.venv.site_packages
    for entry in entries:
        if entry["kind"] == "deleted":
            assert entry.get("patched_sha256") is None
            assert entry["pristine_sha256"]
            continue
        patched = (site / entry["path"]).read_bytes()
        assert entry["patched_sha256"] == sha256(patched)
        full = packed.tree / "patches" / "full" / entry["dist"] / entry["path"]
        assert full.read_bytes() == patched


@pytest.fixture(scope="session")
def idna_wheel(
    packed: Packed, workspace: Workspace, tmp_path_factory: pytest.TempPathFactory
) -> Path:
    """The PyPI wheel of the idna version the workspace holds (the pristine files)."""
    entry = _modified_entry(packed.tree)
    out = tmp_path_factory.mktemp("idna-wheel")
    pip(workspace.venv, "download", "-q", "--no-deps", "--only-binary=:all:", "-d", str(out),
        f"idna=={entry['version']}")  # fmt: skip
    (wheel,) = out.glob("idna-*.whl")
    return wheel


def _modified_entry(tree: Path) -> dict[str, Any]:
    data = _toml.loads((tree / "patches" / "patches.toml").read_text())
    (entry,) = [e for e in data["files"] if e["kind"] == "modified"]
    assert isinstance(entry, dict)
    return entry


def test_diff_applies_to_the_pristine_wheel_file(
    packed: Packed, workspace: Workspace, idna_wheel: Path, tmp_path: Path
) -> None:
    entry = _modified_entry(packed.tree)
    work = tmp_path / "work"
    work.mkdir()
    run(["python3", "-m", "zipfile", "-e", str(idna_wheel), str(work)])
    assert sha256((work / "idna" / "core.py").read_bytes()) == entry["pristine_sha256"]
    diff = packed.tree / "patches" / "diffs" / "idna" / "idna" / "core.py.diff"
    proc = subprocess.run(
        ["patch", "-p1", "-d", str(work), "-i", str(diff)],
        capture_output=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout.decode() + proc.stderr.decode()
    patched = (workspace.venv.site_packages / "idna" / "core.py").read_bytes()
    assert (work / "idna" / "core.py").read_bytes() == patched


def test_offline_pack_takes_pristine_files_from_pips_cache(
    packed: Packed, workspace: Workspace, idna_wheel: Path, tmp_path: Path
) -> None:
    """With --offline nothing is downloaded; a wheel in pip's cache still gives the diff."""
    cache = tmp_path / "pip-cache"
    (cache / "wheels" / "ab" / "cd").mkdir(parents=True)
    shutil.copy(idna_wheel, cache / "wheels" / "ab" / "cd" / idna_wheel.name)
    env = pack_env(PIP_CACHE_DIR=str(cache))
    proc = pack(str(workspace.root), "-o", f"{tmp_path}/out/", "--version", "2", "--offline",
                "--json", env=env)  # fmt: skip
    assert proc.returncode == 0, proc.stderr.decode()
    tree = extract(Path(json.loads(proc.stdout)["path"]), tmp_path / "x")
    diff = tree / "patches" / "diffs" / "idna" / "idna" / "core.py.diff"
    assert (
        diff.read_bytes()
        == (packed.tree / "patches" / "diffs" / "idna" / "idna" / "core.py.diff").read_bytes()
    )


def _vault(tree: Path) -> set[str]:
    return {p.name for p in (tree / "env" / "wheels").glob("*.whl")}


def test_auto_vault_holds_the_local_and_editable_wheels_only(
    packed: Packed, workspace: Workspace
) -> None:
    vault = _vault(packed.tree)
    assert workspace.local_wheel_name in vault
    assert any(name.startswith("repro_demo_editable-0.3-") for name in vault)
    assert len(vault) == 2, vault
    assert set(packed.summary["vault_wheels"]) == vault


def test_vault_wheel_of_the_local_dist_installs_its_files(packed: Packed, tmp_path: Path) -> None:
    (wheel,) = (packed.tree / "env" / "wheels").glob("repro_demo_wheel-*.whl")
    target = make_venv(PYTHON_311, tmp_path / "venv")
    pip(target, "install", "-q", "--no-deps", "--no-index", str(wheel))
    assert (target.site_packages / "demo_wheel" / "data.txt").read_text() == "payload\n"
    out = run([str(target.root / "bin" / "repro-demo-wheel-cli")])
    assert out.strip() == LOCAL_DIST


def test_wheels_all_vaults_every_distribution(packed_all: Path) -> None:
    vault = _vault(packed_all)
    prefixes = {name.split("-", 1)[0].lower() for name in vault}
    facts = json.loads((packed_all / "env" / "environment.json").read_text())
    wanted = {d["normalized_name"].replace("-", "_") for d in facts["distributions"]}
    assert {"six", "idna", "attrs", "packaging", "repro_demo_wheel", "repro_demo_editable"} <= (
        prefixes
    )
    assert prefixes == wanted


def test_streamed_vault_wheels_equal_the_written_ones_and_their_records(
    workspace: Workspace, tmp_path: Path
) -> None:
    """pack streams rebuilt wheels from their plan straight into the tar; build_vault
    writes the same plans to files: both must give the same bytes, and the digests in
    vault.toml and pylock.toml must be those of the bytes in the bundle."""
    from repro.snapshot.facts.installed import list_installed, scheme_paths
    from repro.snapshot.vault.build import build_vault

    # offline with an empty pip cache: every wheel without a local original is rebuilt
    env = pack_env(PIP_CACHE_DIR=str(tmp_path / "empty-pip-cache"))
    proc = pack(str(workspace.root), "-o", f"{tmp_path}/", "--wheels", "all", "--offline", env=env)
    assert proc.returncode == 0, proc.stderr.decode()
    packed_all = extract(next(tmp_path.glob("*.tar")), tmp_path / "x")
    vault_toml = _toml.loads((packed_all / "env" / "vault.toml").read_text())
    streamed = {
        w["name"].lower(): w
        for w in vault_toml["wheels"]
        if w["source"] == "rebuilt" and w["name"] != "idna"  # idna: patched, carried
    }
    assert {"six", "attrs", "packaging", "pip"} <= set(streamed), vault_toml
    # no pristine idna at hand: its wheel carries the patches (core.py edited, codec.py gone)
    (idna_wheel,) = (packed_all / "env" / "wheels").glob("idna-*.whl")
    with zipfile.ZipFile(idna_wheel) as idna_zip:
        names = idna_zip.namelist()
        record = idna_zip.read(next(n for n in names if n.endswith("RECORD"))).decode()
        core = idna_zip.read("idna/core.py")
    assert "idna/codec.py" not in names and "idna/codec.py" not in record
    assert core == (workspace.venv.site_packages / "idna" / "core.py").read_bytes()
    python = workspace.venv.python
    dists = [
        d for d in list_installed(workspace.venv.site_packages) if d.canonical_name in streamed
    ]
    written = build_vault(
        dists,
        mode="all",
        out_dir=tmp_path / "vault",
        python=python,
        scheme=scheme_paths(python),
        download=False,
        pip_cache=tmp_path / "no-pip-cache",
    )
    assert {w.name.lower() for w in written.wheels} == set(streamed)
    pylock = (packed_all / "env" / "pylock.toml").read_text()
    for wheel in written.wheels:
        in_bundle = (packed_all / "env" / "wheels" / wheel.filename).read_bytes()
        assert in_bundle == (tmp_path / "vault" / wheel.filename).read_bytes()
        digest = hashlib.sha256(in_bundle).hexdigest()
        assert streamed[wheel.name.lower()]["sha256"] == digest == wheel.sha256
        assert digest in pylock


def test_requirements_lock_pins_everything_portably(packed: Packed) -> None:
    text = (packed.tree / "env" / "requirements.lock").read_text()
    facts = json.loads((packed.tree / "env" / "environment.json").read_text())
    lines = [line for line in text.splitlines() if line and not line.startswith("#")]
    pins = [line for line in lines if not line.startswith("--")]
    assert all("==" in line for line in pins)
    expected = {f"{d['normalized_name']}=={d['version']}" for d in facts["distributions"]}
    assert set(pins) == expected
    assert f"{LOCAL_DIST}==1.0+local" in pins and f"{EDITABLE_DIST}==0.3" in pins
    assert not any("file://" in line or line.startswith(("-e", "--editable")) for line in lines)
    assert "@" not in " ".join(pins)


def test_units_are_templated_and_the_token_is_nowhere(packed: Packed, workspace: Workspace) -> None:
    unit = (packed.tree / "services" / "app.service").read_text()
    assert "ExecStart=${REPRO_VENV}/bin/repro-demo-wheel-cli" in unit
    assert "${REPRO_HOME}/drafter/config.json" in unit
    assert str(workspace.root) not in unit
    env_files = list((packed.tree / "services").rglob("app.env"))
    assert len(env_files) == 1
    assert "HF_TOKEN=" in env_files[0].read_text() and "SGLANG_LOG_LEVEL=info" in (
        env_files[0].read_text()
    )
    secret = TOKEN.encode()
    assert secret not in packed.archive.read_bytes()
    for path in packed.tree.rglob("*"):
        if path.is_file():
            assert secret not in path.read_bytes(), path
    environment = json.loads((packed.tree / "env" / "environment.json").read_text())
    assert "HF_TOKEN" in json.dumps(environment)
    assert TOKEN not in json.dumps(environment)


def test_models_carry_config_and_card_but_not_weights(packed: Packed, workspace: Workspace) -> None:
    drafter = packed.tree / "models" / "drafter"
    assert sorted(p.name for p in drafter.iterdir()) == ["README.md", "config.json"]
    assert (drafter / "config.json").read_bytes() == (
        workspace.root / "drafter" / "config.json"
    ).read_bytes()
    info = _toml.loads((packed.tree / "bundle.toml").read_text())
    (model,) = info["models"]
    source = workspace.root / "drafter"
    assert model["name"] == "drafter" and model["role"] == "drafter"
    assert model["total_bytes"] == sum(p.stat().st_size for p in source.iterdir())
    assert model["file_count"] == 3
    assert model["small_files"] == {
        "README.md": sha256((source / "README.md").read_bytes()),
        "config.json": sha256((source / "config.json").read_bytes()),
    }


def test_bench_files_and_launch_are_carried(packed: Packed, workspace: Workspace) -> None:
    for name in ("run_bench.sh", "results.json"):
        carried = packed.tree / "files" / "bench" / name
        assert carried.read_bytes() == (workspace.root / "bench" / name).read_bytes()
    assert os.access(packed.tree / "files" / "bench" / "run_bench.sh", os.X_OK)
    info = _toml.loads((packed.tree / "bundle.toml").read_text())
    assert info["version"] == VERSION and info["name"] == "dflash"
    assert "--port 30001" in json.dumps(info["launch"])
    assert info["source"]["python"].startswith("3.11.")


def test_nothing_in_source_is_modified(packed: Packed) -> None:
    assert packed.before.keys() == packed.after.keys()
    changed = [k for k in packed.before if packed.before[k] != packed.after[k]]
    assert changed == []


# --- determinism, versions, stdout ------------------------------------------------------


def test_a_repack_is_byte_identical(packed: Packed, workspace: Workspace, tmp_path: Path) -> None:
    again = packed_ok(str(workspace.root), "-o", f"{tmp_path}/", "--version", VERSION)
    assert again.name == packed.archive.name
    assert again.read_bytes() == packed.archive.read_bytes()


def test_hashing_processes_and_threads_make_the_same_bundle(
    workspace_312: Path, tmp_path: Path
) -> None:
    """Every file read again (--rehash), its small files hashed by two worker processes
    (the default on 4 cores or more) or by threads only: the same bytes."""
    args = ("--version", "5", "--wheels", "all", "--offline", "--rehash", "--json")
    bundles = []
    for setting in ("2", "0"):
        proc = pack(
            str(workspace_312), "-o", f"{tmp_path}/{setting}/", *args,
            env=pack_env(REPRO_HASH_PROCESSES=setting),
        )  # fmt: skip
        assert proc.returncode == 0, proc.stderr.decode()
        bundles.append(Path(json.loads(proc.stdout)["path"]).read_bytes())
    assert bundles[0] == bundles[1]


def test_zst_repacks_are_byte_identical(
    packed: Packed, workspace: Workspace, tmp_path: Path
) -> None:
    args = ("--version", VERSION, "--compress", "zst")
    first = packed_ok(str(workspace.root), "-o", f"{tmp_path}/a/", *args)
    second = packed_ok(str(workspace.root), "-o", f"{tmp_path}/b/", *args)
    assert first.name == f"dflash-{VERSION}.tar.zst"
    assert first.read_bytes() == second.read_bytes()
    check = run_repro("check", str(first))
    assert check.returncode == 0, check.stderr.decode()
    tree = extract(first, tmp_path / "x")
    manifest = (tree / "MANIFEST.sha256").read_text().splitlines()
    plain = (packed.tree / "MANIFEST.sha256").read_text().splitlines()
    # the same members as the plain pack; only REPRODUCE.md names the bundle file
    differ = set(manifest) ^ set(plain)
    assert {line.split("  ", 1)[1] for line in differ} == {"REPRODUCE.md"}


def test_the_archive_does_not_depend_on_its_file_name(workspace_312: Path, tmp_path: Path) -> None:
    """REPRODUCE.md names the canonical <top>.tar, never -o's name."""
    first = packed_ok(str(workspace_312), "-o", f"{tmp_path}/one.tar", "--version", "4")
    second = packed_ok(str(workspace_312), "-o", f"{tmp_path}/other-name.tar", "--version", "4")
    assert first.name == "one.tar"
    assert first.read_bytes() == second.read_bytes()
    reproduce = (extract(first, tmp_path / "x") / "REPRODUCE.md").read_text()
    assert "repro check svc312-4.tar" in reproduce
    assert "one.tar" not in reproduce


@pytest.mark.parametrize(
    "name", ["x.tar.xz", "x.zip", "x.tar.bz2", "x.7z", "x.tar.br", "x.tar.lzo", "x.tar.Z", "x.cpio"]
)
def test_an_archive_suffix_repro_does_not_write_is_refused(
    workspace_312: Path, tmp_path: Path, name: str
) -> None:
    proc = pack(str(workspace_312), "-o", str(tmp_path / name), "--version", "1")
    assert proc.returncode == 2, proc.stderr.decode()
    err = proc.stderr.decode()
    assert f"{tmp_path / name}: repro does not write this kind of archive" in err
    assert ".tar, .tar.gz, .tgz, .tar.zst, .tzst" in err
    assert not (tmp_path / name).exists()
    assert proc.stdout == b""


def test_suffixes_are_read_in_any_case_and_a_plain_dotted_name_is_a_directory(
    workspace_312: Path, tmp_path: Path
) -> None:
    upper = packed_ok(str(workspace_312), "-o", f"{tmp_path}/B.TAR.GZ", "--version", "5")
    assert upper == tmp_path / "B.TAR.GZ"
    with tarfile.open(upper, "r:gz") as archive:  # gzip, as .tar.gz names it
        assert "svc312-5/MANIFEST.sha256" in archive.getnames()
    into = packed_ok(str(workspace_312), "-o", f"{tmp_path}/v1.2", "--version", "5")
    assert into == tmp_path / "v1.2" / "svc312-5.tar"


def test_versions_count_up_in_the_output_dir(workspace_312: Path, tmp_path: Path) -> None:
    first = packed_ok(str(workspace_312), "-o", f"{tmp_path}/")
    second = packed_ok(str(workspace_312), "-o", f"{tmp_path}/")
    assert (first.name, second.name) == ("svc312-1.tar", "svc312-2.tar")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["svc312-1.tar", "svc312-2.tar"]


def test_stdout_stream_equals_the_file(workspace_312: Path, tmp_path: Path) -> None:
    streamed = pack(str(workspace_312), "-o", "-", "--version", "3")
    assert streamed.returncode == 0, streamed.stderr.decode()
    archive = packed_ok(str(workspace_312), "-o", f"{tmp_path}/", "--version", "3")
    assert streamed.stdout == archive.read_bytes()


@pytest.mark.parametrize("compress", ["none", "gz", "zst"])
def test_wheels_all_to_a_file_equals_the_stream_and_lists_true_digests(
    workspace_312: Path, tmp_path: Path, compress: str
) -> None:
    """To a file or to stdout, the vault wheels' sha256 are taken as they are written,
    and the lock files that list them come after them (format 5: after every ordinary
    member, before the SBOM and the manifest). Both give the same bytes, and the
    digests listed are those of the wheels."""
    args = ("--version", "4", "--wheels", "all", "--offline", "--compress", compress)
    streamed = pack(str(workspace_312), "-o", "-", *args)
    assert streamed.returncode == 0, streamed.stderr.decode()
    # no pass over the wheels before the writing (a delta's alone has one)
    assert b"writing stdout" in streamed.stderr
    assert b"vault wheel(s)" not in streamed.stderr, streamed.stderr.decode()
    archive = packed_ok(str(workspace_312), "-o", f"{tmp_path}/", *args)
    tree = extract(archive, tmp_path / "x")
    if compress != "zst":
        assert streamed.stdout == archive.read_bytes()
    else:  # the same members, REPRODUCE.md included: it never names -o's file
        (tmp_path / "streamed.tar.zst").write_bytes(streamed.stdout)
        other = extract(tmp_path / "streamed.tar.zst", tmp_path / "y")
        lines = [(t / "MANIFEST.sha256").read_text().splitlines() for t in (tree, other)]
        assert lines[0] == lines[1]
    wheels = _toml.loads((tree / "env" / "vault.toml").read_text())["wheels"]
    assert "six" in {w["name"] for w in wheels}
    pylock = _toml.loads((tree / "env" / "pylock.toml").read_text())
    listed = {
        w["name"]: w["hashes"]["sha256"] for p in pylock["packages"] for w in p.get("wheels", [])
    }
    for wheel in wheels:
        digest = hashlib.sha256((tree / "env" / "wheels" / wheel["filename"]).read_bytes())
        assert wheel["sha256"] == digest.hexdigest() == listed[wheel["filename"]]
    check = run_repro("check", str(archive))
    assert check.returncode == 0, check.stdout.decode() + check.stderr.decode()
    # the order GNU tar reads: the digest lists after env/wheels/ and files/, the
    # wheels' names ahead of them in bundle.toml
    flags = ["--zstd"] if compress == "zst" else []
    listing = subprocess.run(["tar", *flags, "-tf", str(archive)], capture_output=True, check=True)
    names = [n.split("/", 1)[1] for n in listing.stdout.decode().splitlines() if "/" in n]
    names = [n for n in names if n and not n.endswith("/")]
    assert names[-3:] == ["env/pylock.toml", "env/vault.toml", "MANIFEST.sha256"]
    wheels_at = [i for i, n in enumerate(names) if n.startswith("env/wheels/")]
    assert names.index("bundle.toml") < wheels_at[0] and wheels_at[-1] < len(names) - 3
    info = _toml.loads((tree / "bundle.toml").read_text())
    assert info["format_version"] == 5
    assert info["vault"]["wheels"] == sorted(w["filename"] for w in wheels)
    assert info["vault"]["index_serves"] == info["vault"]["wheels"]  # --wheels all


def test_a_python_312_venv_packs_from_repro_on_311(workspace_312: Path, tmp_path: Path) -> None:
    assert sys.version_info[:2] == (3, 11)
    archive = packed_ok(str(workspace_312), "-o", f"{tmp_path}/", "--version", "1")
    tree = extract(archive, tmp_path / "x")
    info = _toml.loads((tree / "bundle.toml").read_text())
    assert info["source"]["python"].startswith("3.12.")
    lock = (tree / "env" / "requirements.lock").read_text()
    assert "six==" in lock


def test_the_active_virtual_env_is_packed_when_source_has_none(
    workspace_312: Path, tmp_path: Path
) -> None:
    source = tmp_path / "bare"
    source.mkdir()
    env = pack_env(VIRTUAL_ENV=str(workspace_312 / ".venv"))
    proc = pack(str(source), "-o", f"{tmp_path}/out/", "--version", "1", "--json", env=env)
    assert proc.returncode == 0, proc.stderr.decode()
    tree = extract(Path(json.loads(proc.stdout)["path"]), tmp_path / "x")
    info = _toml.loads((tree / "bundle.toml").read_text())
    assert info["name"] == "bare" and info["source"]["python"].startswith("3.12.")


# --- the real sglang wheel ----------------------------------------------------------------


def test_pack_finds_the_one_edited_file_in_real_sglang(sglang_env: Venv, tmp_path: Path) -> None:
    source = tmp_path / "sgl"
    source.mkdir()
    target = sglang_env.site_packages / "sglang" / "srt" / "server_args.py"
    original = target.read_bytes()
    target.write_bytes(original.replace(b"def ", b"def  ", 1))
    try:
        archive = packed_ok(
            str(source), "--python", str(sglang_env.python), "-o", f"{tmp_path}/out/", "--offline"
        )
    finally:
        target.write_bytes(original)
    tree = extract(archive, tmp_path / "x")
    data = _toml.loads((tree / "patches" / "patches.toml").read_text())
    assert [(e["dist"], e["path"], e["kind"]) for e in data["files"]] == [
        ("sglang", "sglang/srt/server_args.py", "modified")
    ]
    full = tree / "patches" / "full" / "sglang" / "sglang" / "srt" / "server_args.py"
    assert full.read_bytes() == original.replace(b"def ", b"def  ", 1)


# --- refusals --------------------------------------------------------------------------


def _refused(proc: subprocess.CompletedProcess[bytes], *needles: str, code: int = 2) -> str:
    message = proc.stderr.decode()
    print(message)
    assert proc.returncode == code, message
    assert "Traceback" not in message, message
    for needle in needles:
        assert needle in message, message
    return message


def test_refuses_a_missing_source(tmp_path: Path) -> None:
    out = tmp_path / "out.tar"
    _refused(pack(str(tmp_path / "nope"), "-o", str(out)), str(tmp_path / "nope"))
    assert not out.exists()


def test_refuses_a_file_as_source(tmp_path: Path) -> None:
    source = tmp_path / "file.txt"
    source.write_text("x")
    out = tmp_path / "out.tar"
    _refused(pack(str(source), "-o", str(out)), str(source), "not a directory")
    assert not out.exists()


def test_refuses_without_an_interpreter(tmp_path: Path) -> None:
    source = tmp_path / "empty"
    source.mkdir()
    out = tmp_path / "out.tar"
    _refused(pack(str(source), "-o", str(out)), "no environment found", "--python")
    assert not out.exists()


def test_refuses_an_interpreter_it_cannot_read(tmp_path: Path) -> None:
    source = tmp_path / "src"
    source.mkdir()
    not_python = tmp_path / "python"
    not_python.write_text("#!/bin/sh\necho not-json\n")
    not_python.chmod(0o755)
    out = tmp_path / "out.tar"
    _refused(pack(str(source), "--python", str(not_python), "-o", str(out)), str(not_python))
    not_python.chmod(0o644)
    _refused(pack(str(source), "--python", str(not_python), "-o", str(out)), "not an executable")
    assert not out.exists()


def test_refuses_a_repro_toml_that_does_not_parse(tmp_path: Path) -> None:
    source = tmp_path / "bad"
    source.mkdir()
    (source / "repro.toml").write_text("[files\ninclude = 3\n")
    out = tmp_path / "out.tar"
    _refused(pack(str(source), "-o", str(out)), "repro.toml", "not valid TOML")
    assert not out.exists()


def test_refuses_an_output_inside_the_venv(workspace: Workspace) -> None:
    out = workspace.venv.root / "bundle.tar"
    _refused(pack(str(workspace.root), "-o", str(out)), "inside the environment")
    assert not out.exists()


def test_a_failed_pack_leaves_nothing_behind(
    tmp_path_factory: pytest.TempPathFactory, tmp_path: Path
) -> None:
    base = tmp_path_factory.mktemp("pack-broken")
    root = base / "broken"
    venv = make_venv(PYTHON_311, root / "venv")
    project = write_project(base / "src", "repro-broken", "broken_pkg", "2.0+local", False)
    run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(base), str(project)])
    (wheel,) = base.glob("*.whl")
    pip(venv, "install", "-q", "--no-deps", str(wheel))
    wheel.unlink()
    # its RECORD claims a file outside the environment: no wheel can hold it
    (record,) = venv.site_packages.glob("repro_broken-*.dist-info/RECORD")
    with record.open("a") as stream:
        stream.write("../../../../../../../../../../etc/hostname,,\n")
    out = tmp_path / "out"
    out.mkdir()
    message = _refused(pack(str(root), "-o", f"{out}/", "--version", "1"), "outside", code=1)
    assert "etc/hostname" in message
    assert list(out.iterdir()) == [], message


def test_writeback_hands_what_was_written_to_the_kernel_while_writing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Written through the page cache (REPRO_DIRECT_IO=0, or a file system without
    O_DIRECT), the bundle's pages start for the disk during the pack, not all at the final
    fsync: a real sync_file_range on a real file (Linux)."""
    from repro.snapshot.write.bundle import Writeback, partial_output

    monkeypatch.setenv("REPRO_DIRECT_IO", "0")

    target = tmp_path / "out.bin"
    data = os.urandom(8 << 20)
    with partial_output(target) as stream:
        writeback = Writeback(stream.fileno(), interval=0.01)
        stream.write(data)
        stream.flush()
        deadline = time.monotonic() + 30
        while writeback.started < len(data) and time.monotonic() < deadline:
            time.sleep(0.01)
        writeback.close()
    assert writeback.started == len(data)
    assert target.read_bytes() == data
    assert not any(t.name == "repro-writeback" and t.is_alive() for t in threading.enumerate())


# --- the scan cache ------------------------------------------------------------------


def test_packing_again_trusts_unchanged_files_and_still_finds_a_new_patch(
    tmp_path: Path,
) -> None:
    """A second pack reads no file that did not change; a patch made after it, even one
    that keeps the file's size and mtime, is found by the third, and its vault wheel
    carries the patched bytes. --rehash reads everything."""
    root = tmp_path / "svc"
    root.mkdir()
    venv = make_venv(PYTHON_312, root / ".venv")
    pip(venv, "install", "-q", "six")
    newest = max(p.lstat().st_ctime for p in (root / ".venv").rglob("*"))
    time.sleep(max(0.0, newest + 2.1 - time.time()))  # out of the racy window (2 s)
    env = pack_env(XDG_CACHE_HOME=str(tmp_path / "xdg"))
    args = ("--wheels", "all", "--offline", "--json")

    def packed(version: str, *extra: str) -> tuple[dict[str, Any], str]:
        proc = pack(str(root), "-o", f"{tmp_path}/out/", "--version", version, *args, *extra,
                    env=env)  # fmt: skip
        assert proc.returncode == 0, proc.stderr.decode()
        return json.loads(proc.stdout), proc.stderr.decode()

    _, first = packed("1")
    assert "0 of " in first
    _, second = packed("2")
    counts = second.split("files unchanged")[0].split()[-3:]  # "N of M"
    assert counts[0] == counts[2] and int(counts[0]) > 10, second
    six = next((root / ".venv").glob("lib/python3.*/site-packages/six.py"))
    before = six.stat()
    text = six.read_bytes()
    patched = text.replace(b'__author__ = "Benjamin Peterson', b'__author__ = "Patchman Peterson')
    assert patched != text and len(patched) == len(text)
    six.write_bytes(patched)
    os.utime(six, ns=(before.st_atime_ns, before.st_mtime_ns))
    summary, third = packed("3")
    assert "six: six.py (modified)" in summary["patched_files"]
    assert f"{int(counts[0]) - 1} of {counts[2]} files unchanged" in third
    tree = extract(Path(summary["path"]), tmp_path / "x")
    wheel = next((tree / "env" / "wheels").glob("six-*.whl"))
    with zipfile.ZipFile(wheel) as archive:
        assert archive.read("six.py") == patched
    time.sleep(max(0.0, six.stat().st_ctime + 2.1 - time.time()))  # the patch not racy
    _, rehashed = packed("4", "--rehash")
    assert "files unchanged" not in rehashed
    # what --rehash read is kept: the next pack reads nothing again
    _, after = packed("5")
    assert f"{counts[2]} of {counts[2]} files unchanged" in after, after
    assert not list((tmp_path / "xdg" / "repro" / "scan").glob(".scan-*"))  # none staged


def test_a_large_file_patched_at_its_recorded_size_is_found_by_the_writing(
    tmp_path: Path,
) -> None:
    """The scan reads files of 64 KiB or more of vaulted distributions for their CRC-32
    only when their size is RECORD's, and the vault writer checks their sha256 in the
    same read as it writes them. A patch that keeps the size is found there, and the
    pack runs again reading every file: the patch is reported and carried."""
    root = tmp_path / "svc"
    root.mkdir()
    make_venv(PYTHON_312, root / ".venv")
    site = next((root / ".venv").glob("lib/python3.*/site-packages"))
    target = site / "pip" / "_vendor" / "rich" / "_emoji_codes.py"
    text = target.read_bytes()
    assert len(text) >= 64 << 10 and b"EMOJI = {" in text
    patched = text.replace(b"EMOJI = {", b"EMOJX = {", 1)
    before = target.stat()
    target.write_bytes(patched)
    os.utime(target, ns=(before.st_atime_ns, before.st_mtime_ns))
    env = pack_env(XDG_CACHE_HOME=str(tmp_path / "xdg"))
    proc = pack(str(root), "-o", f"{tmp_path}/out/", "--wheels", "all", "--offline", "--json",
                env=env)  # fmt: skip
    assert proc.returncode == 0, proc.stderr.decode()
    stderr = " ".join(proc.stderr.decode().split())  # the console wraps long lines
    assert "_emoji_codes.py differs from its RECORD hash" in stderr
    assert "packing again, every file read by the scan" in stderr
    assert stderr.count("pack: scanning installed files") == 2
    summary = json.loads(proc.stdout)
    assert "pip: pip/_vendor/rich/_emoji_codes.py (modified)" in summary["patched_files"]
    tree = extract(Path(summary["path"]), tmp_path / "x")
    wheel = next((tree / "env" / "wheels").glob("pip-*.whl"))
    with zipfile.ZipFile(wheel) as archive:
        assert archive.read("pip/_vendor/rich/_emoji_codes.py") == patched
    assert not list((tmp_path / "out").glob(".*partial"))  # the first try left nothing
    caches = tmp_path / "xdg" / "repro" / "scan"
    assert not list(caches.glob(".scan-*"))  # the first try's staged cache thrown away
    assert len(list(caches.glob("*.tsv"))) == 1  # the second try's put in place
