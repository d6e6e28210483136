"""Delta bundles end to end: one real workspace (a venv with six, a hand patch in six.py)
packed, the patch changed, packed again with --base; the delta checked, read back with
tar and sha256sum, unpacked with its base (from a file and streamed), and refused
against a wrong or tampered base, or a target that does not hold its base."""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import sys
import tarfile
from dataclasses import dataclass
from pathlib import Path

import pytest

from repro.bundle import layout
from repro.bundle.delta import always_carried
from repro.bundle.info import FORMAT_VERSION, load_bundle_info
from repro.bundle.manifest import parse_manifest
from repro.snapshot.pack import PackOptions, PackResult, pack
from tests.snapshot.conftest import PYTHON_311, make_venv, pip
from tests.support.bundles import read_member, tamper
from tests.support.run import run, run_repro

pytestmark = pytest.mark.slow

PATCHED = "venv/lib/python3.11/site-packages/six.py"
SIX_PATCH = layout.full_patch("six", "six.py")


@dataclass(frozen=True)
class Deltas:
    workspace: Path
    old: Path  # full bundle, version 1
    new: Path  # delta of version 2 against old
    full_new: Path  # version 2 packed in full, for sizes
    other: Path  # a full bundle of another name
    result: PackResult
    cache: Path


def _pack(
    ws: Path, out: Path, cache: Path, version: str, *, name: str = "demo", base: str | None = None
) -> PackResult:
    return pack(
        PackOptions(source=ws, output=out, cache_dir=cache, version=version, name=name, base=base)
    )


@pytest.fixture(scope="module")
def deltas(tmp_path_factory: pytest.TempPathFactory) -> Deltas:
    base = tmp_path_factory.mktemp("delta")
    ws = base / "ws"
    venv = make_venv(PYTHON_311, ws / "venv")
    pip(venv, "install", "-q", "six==1.16.0", "idna==3.6")
    six = ws / PATCHED
    six.write_text(six.read_text() + "PATCH = 1\n")
    cache = base / "cache"
    old = _pack(ws, base / "demo-1.tar", cache, "1").path
    other = _pack(ws, base / "other-1.tar", cache, "1", name="other").path
    six.write_text(six.read_text().replace("PATCH = 1\n", "PATCH = 2\n"))
    result = _pack(ws, base / "demo-2.tar", cache, "2", base=str(old))
    full_new = _pack(ws, base / "full" / "demo-2.tar", cache, "2").path
    assert old and other and result.path and full_new
    return Deltas(ws, old, result.path, full_new, other, result, cache)


def _names(archive: Path) -> set[str]:
    with tarfile.open(archive) as tar:
        return {m.name.split("/", 1)[1] for m in tar.getmembers() if m.isfile()}


def _manifest(archive: Path) -> dict[str, str]:
    data = read_member(archive, f"{archive.name.removesuffix('.tar')}/{layout.MANIFEST}")
    return {e.path: e.digest for e in parse_manifest(data, source="m").entries}


def test_the_delta_carries_the_changed_patch_and_the_metadata_only(deltas: Deltas) -> None:
    carried = _names(deltas.new)
    payload = {name for name in carried if not always_carried(name)}
    assert payload == {SIX_PATCH, layout.patch_diff("six", "six.py")}
    manifest = _manifest(deltas.new)
    full = _manifest(deltas.full_new)
    # the complete manifest: every member of the full bundle, the same payload digests
    # (repro's own wheels aside: a delta makes them with its base's timestamp)
    assert set(manifest) == set(full)

    def payload_of(digests: dict[str, str]) -> dict[str, str]:
        return {
            p: d
            for p, d in digests.items()
            if not always_carried(p) and not p.startswith(layout.TOOL_WHEELS)
        }

    assert payload_of(manifest) == payload_of(full)
    old = _manifest(deltas.old)
    assert manifest[SIX_PATCH] != old[SIX_PATCH]
    info = load_bundle_info(read_member(deltas.new, f"demo-2/{layout.BUNDLE_TOML}"), source="t")
    assert info.format_version == FORMAT_VERSION  # [base] alone makes it a delta
    assert info.base is not None and (info.base.name, info.base.version) == ("demo", "1")
    old_manifest = read_member(deltas.old, f"demo-1/{layout.MANIFEST}")
    assert info.base.manifest_sha256 == hashlib.sha256(old_manifest).hexdigest()
    size = deltas.new.stat().st_size
    assert size < 200_000 and size * 20 < deltas.full_new.stat().st_size
    summary = deltas.result.delta
    assert summary is not None and summary.base == info.base
    assert summary.carried_members == len(carried)
    assert summary.base_members == len(manifest) - len(carried) + 1  # +1: the manifest


def test_a_delta_pack_is_deterministic_and_streams(deltas: Deltas, tmp_path: Path) -> None:
    again = _pack(deltas.workspace, tmp_path / "again.tar", deltas.cache, "2", base=str(deltas.old))
    assert again.path is not None
    assert again.path.read_bytes() == deltas.new.read_bytes()
    streamed = run_repro(
        "pack", str(deltas.workspace), "--name", "demo", "--version", "2",
        "--base", f"file://{deltas.old}", "-o", "-",
    )  # fmt: skip
    assert streamed.returncode == 0, streamed.stderr.decode()
    assert streamed.stdout == deltas.new.read_bytes()


def test_check_says_which_base_and_base_checks_the_whole(deltas: Deltas, tmp_path: Path) -> None:
    alone = run_repro("check", str(deltas.new), "--json")
    assert alone.returncode == 0, alone.stdout.decode()
    document = json.loads(alone.stdout)
    manifest = _manifest(deltas.new)
    from_base = len(manifest) - len(_names(deltas.new)) + 1
    assert document["passed"] and document["counts"]["missing"] == 0
    assert document["counts"]["from_base"] == from_base
    assert document["base"]["name"] == "demo" and document["base"]["version"] == "1"
    assert document["base"]["checked_in"] is None
    text = run_repro("check", str(deltas.new)).stdout.decode()
    assert "needs base demo 1" in text and f"{from_base} member(s) come from it" in text

    whole = run_repro("check", str(deltas.new), "--base", str(deltas.old), "--json")
    document = json.loads(whole.stdout)
    assert whole.returncode == 0 and document["counts"]["verified"] == len(manifest)

    # read back with GNU tar and sha256sum: the carried members verify as they are
    run(["tar", "-xf", str(deltas.new), "-C", str(tmp_path)])
    top = tmp_path / "demo-2"
    checked = subprocess.run(
        ["sha256sum", "--strict", "-c", "--ignore-missing", layout.MANIFEST],
        cwd=top, capture_output=True, check=False,
    )  # fmt: skip
    assert checked.returncode == 0, checked.stdout.decode()
    assert checked.stdout.decode().count(": OK") == len(_names(deltas.new)) - 1
    for target in (top, top / layout.MANIFEST):
        assert run_repro("check", str(target)).returncode == 0
    assert run_repro("check", str(top), "--base", str(deltas.old)).returncode == 0

    # a member a delta must carry (metadata) is missing, as in any bundle
    (top / layout.PACK_REPORT).unlink()
    gone = run_repro("check", str(top))
    assert gone.returncode == 1 and "MISSING" in gone.stdout.decode()


def test_a_full_bundle_missing_a_member_is_still_missing(deltas: Deltas, tmp_path: Path) -> None:
    run(["tar", "-xf", str(deltas.old), "-C", str(tmp_path)])
    top = tmp_path / "demo-1"
    (top / SIX_PATCH).unlink()
    result = run_repro("check", str(top))
    assert result.returncode == 1
    assert f"MISSING    {SIX_PATCH}" in result.stdout.decode()
    assert "delta" not in result.stdout.decode()


def _unpack(*args: str, input: bytes | None = None) -> subprocess.CompletedProcess[bytes]:
    return run_repro("unpack", *args, "--cpu", "--no-smoke", input=input)


def test_unpack_with_its_base_rebuilds_the_new_bundle(deltas: Deltas, tmp_path: Path) -> None:
    target = tmp_path / "t"
    result = _unpack(str(deltas.new), "--base", str(deltas.old), "--target", str(target))
    assert result.returncode == 0, result.stderr.decode()
    assert (target / PATCHED).read_text().endswith("PATCH = 2\n")
    assert run_repro("verify", str(target)).returncode == 0
    kept = target / ".repro" / "bundle"
    assert run_repro("check", str(kept)).returncode == 0  # whole: nothing from a base


def test_a_streamed_delta_unpacks_with_its_base(deltas: Deltas, tmp_path: Path) -> None:
    target = tmp_path / "t"
    repro = f"{sys.executable} -m repro"
    pipeline = (
        f"{repro} pack {deltas.workspace} --name demo --version 2 --base {deltas.old} -o - "
        f"| {repro} unpack - --base {deltas.old} --target {target} --cpu --no-smoke"
    )
    result = subprocess.run(
        ["bash", "-o", "pipefail", "-c", pipeline], capture_output=True, check=False, timeout=600
    )
    assert result.returncode == 0, result.stderr.decode()
    assert (target / PATCHED).read_text().endswith("PATCH = 2\n")
    assert run_repro("verify", str(target)).returncode == 0


def test_a_wrong_base_is_refused_naming_both(deltas: Deltas, tmp_path: Path) -> None:
    packed = run_repro(
        "pack", str(deltas.workspace), "--name", "demo", "--version", "3",
        "--base", str(deltas.other), "-o", str(tmp_path / "x.tar"),
    )  # fmt: skip
    assert packed.returncode == 2
    assert "'other'" in packed.stderr.decode() and "'demo'" in packed.stderr.decode()
    assert not (tmp_path / "x.tar").exists()
    for verb in (
        ("check", str(deltas.new), "--base", str(deltas.other)),
        ("unpack", str(deltas.new), "--base", str(deltas.other), "--target", str(tmp_path / "t")),
    ):
        extra = ("--cpu", "--no-smoke") if verb[0] == "unpack" else ()
        result = run_repro(*verb, *extra)
        message = result.stderr.decode()
        assert result.returncode == 2, message
        assert "demo 1" in message and "other 1" in message and str(deltas.other) in message
    assert not (tmp_path / "t").exists()


def test_without_base_onto_a_target_not_of_its_base_is_refused(
    deltas: Deltas, tmp_path: Path
) -> None:
    target = tmp_path / "t"
    result = _unpack(str(deltas.new), "--target", str(target))
    assert result.returncode == 2
    message = result.stderr.decode()
    assert "is a delta against demo 1" in message and "holds no bundle" in message
    assert not target.exists()
    assert [p.name for p in tmp_path.iterdir()] == []  # no staging left either


def test_a_tampered_base_member_is_refused(deltas: Deltas, tmp_path: Path) -> None:
    taken = sorted(set(_manifest(deltas.new)) - _names(deltas.new))
    member = next(name for name in taken if name.startswith(layout.TOOL_WHEELS))
    bad = tamper(deltas.old, tmp_path / "demo-1.tar", member, b"not the wheel\n")
    checked = run_repro("check", str(deltas.new), "--base", str(bad))
    assert checked.returncode == 1 and "MISMATCH" in checked.stdout.decode()
    assert member in checked.stdout.decode()
    target = tmp_path / "t"
    result = _unpack(str(deltas.new), "--base", str(bad), "--target", str(target))
    assert result.returncode == 1, result.stderr.decode()
    assert member in result.stderr.decode()
    assert not target.exists()


def test_a_delta_upgrades_a_target_of_its_base_in_place(deltas: Deltas, tmp_path: Path) -> None:
    """Without --base, onto a target of its base: the upgrade in place reads only what
    the delta carries, ends equal (file for file) to a fresh unpack of the whole new
    bundle at the same path, and rolls back to the base."""
    from tests.support.upgrades import differences, tree

    target = tmp_path / "t"
    first = _unpack(str(deltas.old), "--target", str(target))
    assert first.returncode == 0, first.stderr.decode()
    base_tree = tree(target, history=False)
    result = run_repro("unpack", str(deltas.new), "--target", str(target), "--cpu", "--json")
    assert result.returncode == 0, result.stderr.decode()
    report = json.loads(result.stdout)
    assert report["upgrade"]["dists"]["changed"] == []
    assert (target / PATCHED).read_text().endswith("PATCH = 2\n")
    assert run_repro("verify", str(target)).returncode == 0
    again = _unpack(str(deltas.new), "--target", str(target))
    assert again.returncode == 0 and "the target still matches the bundle" in again.stderr.decode()
    upgraded = tmp_path / "upgraded"
    target.rename(upgraded)
    fresh = _unpack(str(deltas.new), "--base", str(deltas.old), "--target", str(target))
    assert fresh.returncode == 0, fresh.stderr.decode()
    fresh_tree = tree(target, history=False)
    shutil.rmtree(target)
    upgraded.rename(target)
    assert differences(tree(target, history=False), fresh_tree) == []
    back = run_repro("rollback", str(target))
    assert back.returncode == 0, back.stderr.decode()
    assert (target / PATCHED).read_text().endswith("PATCH = 1\n")
    assert differences(tree(target, history=False), base_tree) == []
    assert run_repro("verify", str(target)).returncode == 0


def test_a_delta_onto_a_target_whose_base_file_was_changed_is_refused(
    deltas: Deltas, tmp_path: Path
) -> None:
    target = tmp_path / "t"
    assert _unpack(str(deltas.old), "--target", str(target)).returncode == 0
    patched = target / PATCHED
    patched.write_text(patched.read_text() + "# local edit\n")
    before = tree_of(target)
    result = _unpack(str(deltas.new), "--target", str(target))
    assert result.returncode == 1, result.stderr.decode()
    message = result.stderr.decode()
    assert "has drifted from demo 1" in message and "six.py" in message
    assert tree_of(target) == before


def tree_of(target: Path) -> dict[str, str]:
    from tests.support.upgrades import tree

    return tree(target, history=False)
