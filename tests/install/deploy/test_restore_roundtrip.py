"""The deployment, not only the venv: a workspace without repro.toml packed from another
directory and unpacked elsewhere comes back with the same layout under the target.

Real venv (PyPI's six, patched), real units, a drafter with config, card and a weights
file, a bench harness, results and reports, and a directory no rule selects; real
`repro pack`/`unpack`/`verify` through the CLI.
"""

from __future__ import annotations

import json
import os
import shutil
import tarfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from repro._toml import loads as toml_loads
from repro.bundle.info import FORMAT_VERSION
from repro.snapshot.workspace.leftout import MAX_CARRIED_FILE
from tests.conftest import unpacked_venv
from tests.install.test_unpack import build_workspace, site_packages
from tests.support.run import run_repro
from tests.support.venvs import find_python

pytestmark = pytest.mark.slow

UNIT = """[Unit]
Description=serving endpoint

[Service]
WorkingDirectory={home}
ExecStart={venv}/bin/python -m http.server --bind 127.0.0.1 8123 --directory {home}/drafter
Restart=on-failure

[Install]
WantedBy=multi-user.target
"""
WEIGHTS = 2 << 20  # over the models' small-file limit: referenced, never carried


@dataclass(frozen=True)
class Packed:
    workspace: Path
    bundle: Path
    stdout: str
    stderr: str


def make_workspace(root: Path) -> Path:
    workspace = build_workspace(root / "dflash", find_python("3.11"), ["six==1.16.0"])
    (workspace / "services").mkdir()
    (workspace / "services" / "serve.service").write_text(
        UNIT.format(home=workspace, venv=workspace / ".venv")
    )
    drafter = workspace / "drafter"
    drafter.mkdir()
    (drafter / "config.json").write_text(json.dumps({"model_type": "llama", "layers": 1}))
    (drafter / "README.md").write_text("# drafter\n")
    (drafter / "model.safetensors").write_bytes(os.urandom(WEIGHTS))
    (workspace / "bench").mkdir()
    (workspace / "bench" / "run.sh").write_text("#!/bin/sh\necho bench\n")
    (workspace / "bench" / "run.sh").chmod(0o755)
    (workspace / "results").mkdir()
    for index in range(3):
        (workspace / "results" / f"r{index}.json").write_text(json.dumps({"tok_s": index}))
    (workspace / "reports").mkdir()
    (workspace / "reports" / "summary.md").write_text("# summary\n")
    (workspace / "data").mkdir()
    (workspace / "data" / "corpus.bin").write_bytes(b"\0" * 1024)
    return workspace


def pack_from(cwd: Path, workspace: Path, out: Path) -> Packed:
    """Pack SOURCE given relative to `cwd`, as a user in another directory would."""
    relative = os.path.relpath(workspace, cwd)
    result = run_repro(
        "pack", relative, "-o", str(out), "--name", "dflash", "--version", "1", cwd=cwd
    )
    assert result.returncode == 0, result.stderr.decode()
    return Packed(workspace, out, result.stdout.decode(), result.stderr.decode())


def member(bundle: Path, name: str) -> bytes:
    with tarfile.open(bundle) as archive:
        stream = archive.extractfile(f"dflash-1/{name}")
        assert stream is not None
        return stream.read()


@pytest.fixture(scope="module")
def packed(tmp_path_factory: pytest.TempPathFactory) -> Packed:
    root = tmp_path_factory.mktemp("restore")
    workspace = make_workspace(root)
    elsewhere = root / "somewhere" / "else"
    elsewhere.mkdir(parents=True)
    return pack_from(elsewhere, workspace, root / "dflash-1.tar")


def test_pack_without_repro_toml_carries_what_init_proposes(packed: Packed) -> None:
    with tarfile.open(packed.bundle) as archive:
        names = set(archive.getnames())
    for rel in ("bench/run.sh", "results/r0.json", "results/r2.json", "reports/summary.md"):
        assert f"dflash-1/files/{rel}" in names
    assert "dflash-1/models/drafter/config.json" in names
    assert "dflash-1/models/drafter/README.md" in names
    assert not any("safetensors" in n or "corpus" in n for n in names)
    info = toml_loads(member(packed.bundle, "bundle.toml").decode())
    assert info["format_version"] == FORMAT_VERSION
    assert info["workspace"] == {"venv": ".venv"}
    (drafter,) = info["models"]
    # relative to the workspace, not to the directory pack ran in
    assert drafter["local_path"] == "drafter"
    # pinned: size and sha256 (random bytes, so no safetensors header facts)
    [pin] = drafter["weights"]
    assert (pin["path"], pin["size"], pin["source"]) == ("model.safetensors", WEIGHTS, "hashed")
    assert drafter["weights_hashed"] is True and "large_files" not in drafter


def test_pack_says_what_it_left_out_and_why(packed: Packed) -> None:
    assert "left out: data/: a directory no rule selects" in packed.stderr
    assert "left out: drafter/: 1 weight file(s) of model 'drafter'" in packed.stderr
    report = json.loads(member(packed.bundle, "env/pack-report.json"))
    assert {(item["path"], item["kind"]) for item in report["left_out"]} == {
        ("data/", "unselected"),
        ("drafter/", "weights"),
    }


def test_bundle_does_not_depend_on_the_directory_pack_ran_in(
    packed: Packed, tmp_path: Path
) -> None:
    again = pack_from(packed.workspace, packed.workspace, tmp_path / "dflash-1.tar")
    assert again.bundle.read_bytes() == packed.bundle.read_bytes()


# --- one rule with and without repro.toml: credentials and size ----------------------

TOKEN = "hf_leftOutTestPlantedSecret0123456789abcd"
CREDENTIALS = {
    "bench/hf_token.txt": ("its name", f"{TOKEN}\n"),
    "credentials.json": ("its name", '{"user": "me"}\n'),
    "reports/deploy-notes.md": ("assigns HF_TOKEN", f"# deploy\nHF_TOKEN={TOKEN}\n"),
}
HUGE = "results/huge.bin"


@dataclass(frozen=True)
class Guarded:
    """One workspace holding credential files and an oversized result, packed without
    repro.toml and then with the one `repro init` writes for it."""

    without: Packed
    with_init: Packed


def _report_of(bundle: Path) -> dict[str, Any]:
    report: dict[str, Any] = json.loads(member(bundle, "env/pack-report.json"))
    return report


def _carried(bundle: Path) -> set[str]:
    with tarfile.open(bundle) as archive:
        return {
            name
            for name in archive.getnames()
            if name.startswith(("dflash-1/files/", "dflash-1/models/", "dflash-1/services/"))
        }


@pytest.fixture(scope="module")
def guarded(tmp_path_factory: pytest.TempPathFactory) -> Guarded:
    root = tmp_path_factory.mktemp("guarded")
    workspace = make_workspace(root)
    for rel, (_, text) in CREDENTIALS.items():
        (workspace / rel).write_text(text)
    with (workspace / HUGE).open("wb") as stream:
        stream.truncate(MAX_CARRIED_FILE + 1)  # sparse: no disk used
    without = pack_from(workspace, workspace, root / "without" / "dflash-1.tar")
    init = run_repro("init", str(workspace))
    assert init.returncode == 0, init.stderr.decode()
    assert (workspace / "repro.toml").is_file()
    with_init = pack_from(workspace, workspace, root / "with" / "dflash-1.tar")
    return Guarded(without, with_init)


def test_pack_without_repro_toml_names_each_credential_file_it_refuses(guarded: Guarded) -> None:
    packed = guarded.without
    report = _report_of(packed.bundle)
    secrets = {item["path"]: item for item in report["left_out"] if item["kind"] == "secret"}
    assert set(secrets) == set(CREDENTIALS)
    for rel, (why, _) in CREDENTIALS.items():
        assert f"looks like a credential ({why})" in secrets[rel]["reason"]
        assert f"left out: {rel}: looks like a credential ({why})" in packed.stderr
        assert f"dflash-1/files/{rel}" not in _carried(packed.bundle)
    # never the content: not in the bundle, the report or what pack printed
    assert TOKEN.encode() not in packed.bundle.read_bytes()
    assert TOKEN not in packed.stderr + packed.stdout


def test_pack_without_repro_toml_leaves_out_an_oversized_file_for_its_size(
    guarded: Guarded,
) -> None:
    packed = guarded.without
    (item,) = [i for i in _report_of(packed.bundle)["left_out"] if i["path"] == HUGE]
    assert item["kind"] == "size"
    assert item["reason"].startswith("64.0 MiB, over the 64 MiB limit for carried files")
    assert f"left out: {HUGE}: 64.0 MiB, over the 64 MiB limit" in packed.stderr
    assert f"dflash-1/files/{HUGE}" not in _carried(packed.bundle)
    assert "dflash-1/files/results/r0.json" in _carried(packed.bundle)


def test_pack_with_the_repro_toml_init_writes_carries_the_same(guarded: Guarded) -> None:
    """One rule, one place: no repro.toml means what `repro init` proposes."""
    without, with_init = guarded.without, guarded.with_init
    assert _carried(without.bundle) == _carried(with_init.bundle)
    assert _report_of(without.bundle)["left_out"] == _report_of(with_init.bundle)["left_out"]
    left = [line for line in without.stderr.splitlines() if line.startswith("left out: ")]
    assert len(left) == len(CREDENTIALS) + 3  # the secrets, the huge file, data/, drafter/
    assert left == [line for line in with_init.stderr.splitlines() if line.startswith("left out: ")]


@pytest.fixture(scope="module")
def target(packed: Packed, tmp_path_factory: pytest.TempPathFactory) -> Path:
    target = tmp_path_factory.mktemp("box") / "srv" / "dflash"
    result = run_repro(
        "unpack", str(packed.bundle), "--target", str(target), "--cpu", "--no-smoke", "--json"
    )
    assert result.returncode == 0, result.stderr.decode()
    report = json.loads(result.stdout)
    assert report["venv"] == str(target / ".venv")
    return target


def test_target_mirrors_the_workspace(packed: Packed, target: Path) -> None:
    assert unpacked_venv(target) == target / ".venv"
    assert (target / ".venv" / "bin" / "python").exists()
    for rel in ("bench/run.sh", "results/r1.json", "reports/summary.md", "drafter/config.json"):
        assert (target / rel).read_bytes() == (packed.workspace / rel).read_bytes(), rel
    assert os.access(target / "bench" / "run.sh", os.X_OK)
    assert not (target / "drafter" / "model.safetensors").exists()
    assert not (target / "data").exists()


def test_rendered_unit_names_paths_that_exist_on_the_target(packed: Packed, target: Path) -> None:
    unit = (target / "services" / "serve.service").read_text()
    assert str(packed.workspace) not in unit
    assert f"WorkingDirectory={target}\n" in unit
    exec_start = next(line for line in unit.splitlines() if line.startswith("ExecStart="))
    argv = exec_start.removeprefix("ExecStart=").split()
    assert argv[0] == str(target / ".venv" / "bin" / "python")
    assert Path(argv[0]).exists()
    assert argv[-1] == str(target / "drafter")
    assert Path(argv[-1]).is_dir()


def test_models_step_finds_the_config_but_says_the_weights_are_missing(target: Path) -> None:
    report = json.loads((target / ".repro" / "unpack-report.json").read_text())
    (model,) = report["models"]
    assert model["status"] == "missing"
    assert model["path"] == str(target / "drafter")
    assert "not its weights" in model["detail"]
    assert "model.safetensors" in model["detail"]


def test_rerun_reports_a_local_edit_instead_of_nothing_to_do(packed: Packed, target: Path) -> None:
    site = site_packages(unpacked_venv(target))
    six = site / "six.py"
    original = six.read_bytes()
    bench = target / "results" / "r1.json"
    bench_original = bench.read_bytes()
    try:
        six.write_bytes(original + b"\nLOCAL_EDIT = 1\n")
        bench.write_text("{}")
        again = run_repro("unpack", str(packed.bundle), "--target", str(target), "--cpu")
        assert again.returncode == 1, again.stderr.decode()
        err = again.stderr.decode()
        assert "nothing to do" not in err + again.stdout.decode()
        assert "has drifted" in err
        assert "patched file six: six.py: expected" in err
        assert "workspace file results/r1.json: expected" in err

        verify = run_repro("verify", str(target), "--json")
        assert verify.returncode == 1
        drift = json.loads(verify.stdout)["drift"]
        assert {(d["what"], d["path"]) for d in drift} == {
            ("patched file", "six: six.py"),
            ("workspace file", "results/r1.json"),
        }
        (patched,) = [d for d in drift if d["what"] == "patched file"]
        assert len(patched["expected"]) == 64 and len(patched["found"]) == 64
        assert patched["expected"] != patched["found"]
    finally:
        six.write_bytes(original)
        bench.write_bytes(bench_original)
    clean = run_repro("verify", str(target))
    assert clean.returncode == 0, clean.stdout.decode() + clean.stderr.decode()
    assert "matches its bundle" in clean.stderr.decode()


def test_verify_sees_a_removed_distribution_and_an_edited_unit(target: Path) -> None:
    unit = target / "services" / "serve.service"
    text = unit.read_text()
    python = unpacked_venv(target) / "bin" / "python"
    six_dist = next((site_packages(unpacked_venv(target))).glob("six-*.dist-info"))
    moved = six_dist.with_name("six-moved.aside")
    try:
        unit.write_text(text.replace("Restart=on-failure", "Restart=always"))
        six_dist.rename(moved)
        verify = run_repro("verify", str(target))
        assert verify.returncode == 1
        out = verify.stdout.decode()
        assert "unit services/serve.service: expected" in out
        assert "distribution six: expected 1.16.0, found not installed" in out
    finally:
        unit.write_text(text)
        if moved.exists():
            moved.rename(six_dist)
    assert python.exists()
    assert run_repro("verify", str(target)).returncode == 0


def test_verify_hashes_in_parallel_with_the_same_verdict(target: Path) -> None:
    """-j/--jobs as on the other verbs that hash: one file at a time or several, the
    same differences; a unit replaced by a link is never taken for the file it names."""
    unit = target / "services" / "serve.service"
    text = unit.read_text()
    aside = target / "serve.service.aside"
    try:
        unit.rename(aside)
        unit.symlink_to(aside)
        outcomes = [run_repro("verify", str(target), "--json", "-j", n) for n in ("1", "3")]
        assert [p.returncode for p in outcomes] == [1, 1]
        one, three = (json.loads(p.stdout) for p in outcomes)
        assert one == three
        assert {(d["what"], d["path"], d["found"]) for d in one["drift"]} == {
            ("unit", "services/serve.service", "not a regular file")
        }
    finally:
        unit.unlink(missing_ok=True)
        if aside.exists():
            aside.rename(unit)
    assert unit.read_text() == text
    refused = run_repro("verify", str(target), "-j", "0")
    assert refused.returncode == 2
    assert "-j" in refused.stderr.decode()


def test_verify_of_a_directory_that_is_no_target_is_a_usage_error(tmp_path: Path) -> None:
    result = run_repro("verify", str(tmp_path))
    assert result.returncode == 2
    assert "not an unpacked repro target" in result.stderr.decode()


def test_a_file_in_the_way_is_a_conflict_and_nothing_is_written(
    packed: Packed, tmp_path: Path
) -> None:
    target = tmp_path / "t"
    (target / "results").mkdir(parents=True)
    (target / "results" / "r0.json").write_text("operator's own")
    result = run_repro(
        "unpack", str(packed.bundle), "--target", str(target), "--cpu", "--no-smoke", "--replace"
    )
    assert result.returncode == 4, result.stderr.decode()
    err = result.stderr.decode()
    assert "results/r0.json: exists with sha256" in err
    assert (target / "results" / "r0.json").read_text() == "operator's own"
    assert not (target / "bench").exists()


def _model_drift(target: Path, *extra: str) -> list[dict[str, str]]:
    result = run_repro("verify", str(target), "--json", *extra)
    drift = json.loads(result.stdout)["drift"]
    return [item for item in drift if item["what"] == "model"]


def test_verify_weights_reads_the_pinned_weights(packed: Packed, target: Path) -> None:
    """`repro verify --weights`: the weights put in place match their pins; one byte
    flipped at equal size is caught by the hash (and not without --weights)."""
    weights = target / "drafter" / "model.safetensors"
    shutil.copyfile(packed.workspace / "drafter" / "model.safetensors", weights)
    try:
        assert _model_drift(target, "--weights") == []
        data = bytearray(weights.read_bytes())
        data[len(data) // 2] ^= 0x01
        weights.write_bytes(bytes(data))
        assert _model_drift(target) == []
        [item] = _model_drift(target, "--weights")
        assert item["path"] == "drafter"
        assert "model.safetensors: sha256 " in item["found"]
    finally:
        weights.unlink()
