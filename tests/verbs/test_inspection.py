"""`repro inspect` on real bundles packed from a real venv: archive, directory, stdin."""

from __future__ import annotations

import gzip
import hashlib
import json
import subprocess
import tarfile
from pathlib import Path
from typing import Any

import pytest

from tests.support.bundles import BundlePair, run_cli, tamper

pytestmark = pytest.mark.slow


def _json(result: subprocess.CompletedProcess[bytes]) -> dict[str, Any]:
    document: dict[str, Any] = json.loads(result.stdout)
    return document


def _member(archive: Path, rel: str) -> bytes:
    with tarfile.open(archive) as tar:
        for member in tar.getmembers():
            if member.name.split("/", 1)[-1] == rel:
                data = tar.extractfile(member)
                assert data is not None
                return data.read()
    raise AssertionError(f"{archive} has no {rel}")


def _environment(archive: Path) -> dict[str, Any]:
    document: dict[str, Any] = json.loads(_member(archive, "env/environment.json"))
    return document


def test_archive_json_describes_the_bundle(bundle_pair: BundlePair) -> None:
    result = run_cli("inspect", "--json", str(bundle_pair.a))
    assert result.returncode == 0, result.stderr.decode()
    doc = _json(result)
    environment = _environment(bundle_pair.a)
    assert (doc["name"], doc["version"]) == ("demo", "1")
    assert doc["verified"] is True
    assert doc["check"]["counts"]["verified"] == doc["members"] - 1
    assert doc["source"]["python"] == environment["python"]["version"]
    assert doc["source"]["platform"] == environment["platform"]["platform"]
    assert doc["distributions"] == len(environment["distributions"])
    names = {d["normalized_name"]: d["version"] for d in environment["distributions"]}
    assert names["six"] == "1.16.0" and names["tomli"] == "2.0.1"
    assert [w["filename"] for w in doc["vault"]] == ["vaultpkg-1.0+local-py3-none-any.whl"]
    vault_wheel = _member(bundle_pair.a, "env/wheels/vaultpkg-1.0+local-py3-none-any.whl")
    assert doc["vault"][0]["sha256"] == hashlib.sha256(vault_wheel).hexdigest()
    patches = {(p["dist"], p["path"]): p for p in doc["patches"]}
    assert set(patches) == {("idna", "idna/core.py"), ("tomli", "tomli/_parser.py")}
    core = patches[("idna", "idna/core.py")]
    assert (core["kind"], core["added"], core["removed"]) == ("modified", 1, 0)
    assert doc["units"] == ["model.service"]
    (model,) = doc["models"]
    assert (model["name"], model["role"]) == ("drafter", "drafter")
    config_sha = hashlib.sha256(bundle_pair.drafter_config_a).hexdigest()
    assert model["small_files"]["config.json"] == config_sha
    results = _member(bundle_pair.a, "files/bench/results.json")
    run_sh = bundle_pair.workspace / "bench" / "run.sh"
    assert doc["files"] == [
        {"path": "bench/results.json", "size": len(results)},
        {"path": "bench/run.sh", "size": run_sh.stat().st_size},
    ]


def test_directory_stdin_and_compressed_give_the_same_answer(
    bundle_pair: BundlePair, tmp_path: Path
) -> None:
    from_archive = _json(run_cli("inspect", "--json", str(bundle_pair.a)))
    zst = tmp_path / "a.tar.zst"
    subprocess.run(["zstd", "-q", str(bundle_pair.a), "-o", str(zst)], check=True)
    others = [
        run_cli("inspect", "--json", str(bundle_pair.a_dir)),
        run_cli("inspect", "--json", "-", input=bundle_pair.a.read_bytes()),
        run_cli("inspect", "--json", "-", input=gzip.compress(bundle_pair.a.read_bytes())),
        run_cli("inspect", "--json", str(zst)),
    ]
    assert [r.returncode for r in others] == [0, 0, 0, 0]
    documents = [from_archive, *(_json(r) for r in others)]
    for document in documents:
        document.pop("target")
        document["check"].pop("manifest")
    for document in documents[1:]:
        assert document == documents[0]


def test_jobs_do_not_change_the_answer(bundle_pair: BundlePair) -> None:
    """-j: a bundle directory's files hashed by one thread or by four, the same report."""
    one = _json(run_cli("inspect", "--json", "-j", "1", str(bundle_pair.a_dir)))
    four = _json(run_cli("inspect", "--json", "--jobs", "4", str(bundle_pair.a_dir)))
    assert one == four
    assert one["verified"] is True


def test_human_output_names_everything(bundle_pair: BundlePair) -> None:
    result = run_cli("inspect", str(bundle_pair.a))
    assert result.returncode == 0
    assert result.stderr == b""  # the result is on stdout: `repro inspect b.tar | less`
    text = result.stdout.decode()
    for expected in (
        "demo 1",
        "vaultpkg-1.0+local-py3-none-any.whl",
        "idna/core.py (modified, +1 -0)",
        "tomli/_parser.py",
        "model.service",
        "drafter (drafter)",
        "bench/results.json",
        "verifies",
    ):
        assert expected in text, expected


def test_patches_prints_the_diffs(bundle_pair: BundlePair) -> None:
    result = run_cli("inspect", "--patches", str(bundle_pair.a))
    assert result.returncode == 0
    out = result.stdout.decode()
    assert "+++ b/idna/core.py" in out
    assert "+# local tweak A" in out
    assert "+# tomli tweak" in out


def test_file_prints_one_member(bundle_pair: BundlePair) -> None:
    result = run_cli("inspect", "--file", "services/model.service", str(bundle_pair.a))
    assert result.returncode == 0, result.stderr.decode()
    assert result.stdout == _member(bundle_pair.a, "services/model.service")
    assert b"${REPRO_VENV}/bin/python" in result.stdout  # the unit as carried, paths made variables
    wheel = "env/wheels/vaultpkg-1.0+local-py3-none-any.whl"
    from_dir = run_cli("inspect", "--file", wheel, str(bundle_pair.a_dir))
    assert from_dir.returncode == 0
    assert from_dir.stdout == _member(bundle_pair.a, wheel)
    from_stdin = run_cli("inspect", "--file", wheel, "-", input=bundle_pair.a.read_bytes())
    assert from_stdin.stdout == from_dir.stdout


@pytest.mark.parametrize("path", ["services/nope.service", "../etc/passwd"])
def test_file_that_is_not_there_is_exit_2(bundle_pair: BundlePair, path: str) -> None:
    result = run_cli("inspect", "--file", path, str(bundle_pair.a))
    assert result.returncode == 2
    assert result.stdout == b""
    assert repr(path) in result.stderr.decode()


def test_changed_member_does_not_verify(bundle_pair: BundlePair, tmp_path: Path) -> None:
    bad = tamper(bundle_pair.a, tmp_path / "bad.tar", "files/bench/results.json", b"{}\n")
    result = run_cli("inspect", "--json", str(bad))
    assert result.returncode == 1
    doc = _json(result)
    assert doc["verified"] is False
    assert [m["path"] for m in doc["check"]["mismatched"]] == ["files/bench/results.json"]
    assert (doc["name"], doc["units"]) == ("demo", ["model.service"])  # still everything
    human = run_cli("inspect", str(bad))
    assert human.returncode == 1
    assert "does not verify: 1 mismatched" in human.stdout.decode()
    assert "MISMATCH" in human.stdout.decode()
    member = run_cli("inspect", "--file", "files/bench/results.json", str(bad))
    assert (member.returncode, member.stdout) == (1, b"{}\n")
    assert "does not match" in member.stderr.decode()


def test_changed_file_in_a_directory_does_not_verify(
    bundle_pair: BundlePair, tmp_path: Path
) -> None:
    copy = tmp_path / "copy"
    subprocess.run(["cp", "-a", str(bundle_pair.a_dir), str(copy)], check=True)
    (copy / "services" / "model.service").write_text("[Service]\nExecStart=/bin/false\n")
    (copy / "services" / "extra.service").write_text("[Service]\n")
    result = run_cli("inspect", "--json", str(copy))
    assert result.returncode == 1
    doc = _json(result)
    assert [m["path"] for m in doc["check"]["mismatched"]] == ["services/model.service"]
    assert [u["path"] for u in doc["check"]["unlisted"]] == ["services/extra.service"]


@pytest.mark.parametrize(
    ("content", "message"),
    [(b"not a tar at all\n" * 100, "not a tar archive"), (b"", "not a tar archive")],
)
def test_unreadable_input_is_exit_2(tmp_path: Path, content: bytes, message: str) -> None:
    path = tmp_path / "junk.tar"
    path.write_bytes(content)
    result = run_cli("inspect", str(path))
    assert result.returncode == 2, result.stderr.decode()
    assert message in result.stderr.decode()
    missing = run_cli("inspect", str(tmp_path / "absent.tar"))
    assert missing.returncode == 2
    assert "no such file" in missing.stderr.decode()


def test_truncated_archive_is_exit_2(bundle_pair: BundlePair, tmp_path: Path) -> None:
    cut = tmp_path / "cut.tar"
    cut.write_bytes(bundle_pair.a.read_bytes()[:30000])
    result = run_cli("inspect", str(cut))
    assert result.returncode == 2
    assert "truncated" in result.stderr.decode()


def test_bundle_without_manifest_does_not_verify(bundle_pair: BundlePair, tmp_path: Path) -> None:
    stripped = tmp_path / "no-manifest.tar"
    with tarfile.open(bundle_pair.a) as source, tarfile.open(stripped, "w") as dest:
        for member in source.getmembers():
            if not member.name.endswith("/MANIFEST.sha256"):
                dest.addfile(member, source.extractfile(member) if member.isfile() else None)
    result = run_cli("inspect", "--json", str(stripped))
    assert result.returncode == 1
    doc = _json(result)
    assert (doc["verified"], doc["manifest_problem"], doc["check"]) == (
        False,
        "no MANIFEST.sha256",
        None,
    )
    assert doc["name"] == "demo"
