"""Tests of repro.verbs.check: a bundle directory, manifest or archive checked."""

from __future__ import annotations

import gzip
import hashlib
import io
import tarfile
from pathlib import Path

import pytest

from repro.bundle.manifest import MANIFEST_NAME, format_manifest
from repro.bundle.signing import SignaturePolicy
from repro.errors import InputError, SignatureError, UsageError
from repro.verbs.check import CheckOptions, check_archive, check_target

TOP = "demo-1.0"
FILES = {"bundle.toml": b"format_version = 1\n", "env/requirements.lock": b"six==1.16.0\n"}


def _manifest(files: dict[str, bytes]) -> bytes:
    return format_manifest((p, hashlib.sha256(d).hexdigest()) for p, d in files.items())


def _tree(root: Path, files: dict[str, bytes], manifest: bytes) -> Path:
    for rel, data in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(data)
    (root / MANIFEST_NAME).write_bytes(manifest)
    return root


def _archive(path: Path, files: dict[str, bytes], manifest: bytes | None) -> Path:
    members = dict(files)
    if manifest is not None:
        members[MANIFEST_NAME] = manifest  # a bundle carries it last
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as tar:
        top = tarfile.TarInfo(TOP)
        top.type, top.mode = tarfile.DIRTYPE, 0o755
        tar.addfile(top)
        for directory in sorted({f"{TOP}/{r.rsplit('/', 1)[0]}" for r in members if "/" in r}):
            info = tarfile.TarInfo(directory)
            info.type, info.mode = tarfile.DIRTYPE, 0o755
            tar.addfile(info)
        for rel, data in members.items():
            info = tarfile.TarInfo(f"{TOP}/{rel}")
            info.size, info.mode = len(data), 0o644
            tar.addfile(info, io.BytesIO(data))
    data = buffer.getvalue()
    path.write_bytes(gzip.compress(data, mtime=0) if path.name.endswith(".gz") else data)
    return path


def test_a_directory_and_its_manifest_verify_alike(tmp_path: Path) -> None:
    root = _tree(tmp_path / TOP, FILES, _manifest(FILES))
    for target in (root, root / MANIFEST_NAME):
        report = check_target(str(target), CheckOptions())
        assert sorted(report.verified) == sorted(FILES)
        assert report.passed(ignore_missing=False, strict=True)


def test_a_changed_and_an_unlisted_file_are_both_reported(tmp_path: Path) -> None:
    root = _tree(tmp_path / TOP, FILES, _manifest(FILES))
    (root / "bundle.toml").write_bytes(b"format_version = 2\n")
    (root / "env" / "extra.txt").write_bytes(b"smuggled\n")
    report = check_target(str(root), CheckOptions())
    assert [m.path for m in report.mismatched] == ["bundle.toml"]
    assert report.mismatched[0].actual == hashlib.sha256(b"format_version = 2\n").hexdigest()
    assert [u.path for u in report.unlisted] == ["env/extra.txt"]
    assert not report.passed(ignore_missing=True, strict=False)


def test_a_directory_without_a_manifest_is_named(tmp_path: Path) -> None:
    with pytest.raises(InputError, match=f"{tmp_path}: no {MANIFEST_NAME} in this directory"):
        check_target(str(tmp_path), CheckOptions())


@pytest.mark.parametrize("name", ["bundle.tar", "bundle.tar.gz"])
def test_an_archive_verifies_as_it_streams(tmp_path: Path, name: str) -> None:
    archive = _archive(tmp_path / name, FILES, _manifest(FILES))
    report = check_target(str(archive), CheckOptions(jobs=2))
    assert sorted(report.verified) == sorted(FILES)
    assert report.passed(ignore_missing=False, strict=True)
    assert sorted(p.name for p in tmp_path.iterdir()) == [name]  # nothing written


@pytest.mark.parametrize("name", ["bundle.tar", "bundle.tar.gz"])
def test_an_archive_member_that_differs_is_a_mismatch(tmp_path: Path, name: str) -> None:
    tampered = {**FILES, "env/requirements.lock": b"six==9.9.9\n"}
    archive = _archive(tmp_path / name, tampered, _manifest(FILES))
    report = check_archive(str(archive), CheckOptions())
    assert [m.path for m in report.mismatched] == ["env/requirements.lock"]
    assert report.verified == ("bundle.toml",)


def test_an_archive_missing_a_listed_file_says_so(tmp_path: Path) -> None:
    archive = _archive(tmp_path / "b.tar", {"bundle.toml": FILES["bundle.toml"]}, _manifest(FILES))
    report = check_archive(str(archive), CheckOptions())
    assert report.missing == ("env/requirements.lock",)
    assert not report.passed(ignore_missing=False, strict=False)


def test_an_archive_without_a_manifest_is_refused(tmp_path: Path) -> None:
    archive = _archive(tmp_path / "b.tar", FILES, None)
    with pytest.raises(InputError, match=rf"b\.tar: the archive holds no {MANIFEST_NAME}"):
        check_archive(str(archive), CheckOptions())


def test_an_unreadable_archive_is_named(tmp_path: Path) -> None:
    with pytest.raises(InputError, match=r"gone\.tar: cannot read"):
        check_archive(str(tmp_path / "gone.tar"), CheckOptions())


@pytest.mark.parametrize(
    "policy",
    [SignaturePolicy(require=True), SignaturePolicy(identity="ops@example.com")],
)
def test_an_incomplete_signature_policy_is_refused_before_reading(
    tmp_path: Path, policy: SignaturePolicy
) -> None:
    with pytest.raises(UsageError, match="need --allowed-signers FILE"):
        check_target(str(tmp_path / "never-read"), CheckOptions(signature=policy))


def test_a_required_signature_that_is_absent_fails_the_check(tmp_path: Path) -> None:
    root = _tree(tmp_path / TOP, FILES, _manifest(FILES))
    signers = tmp_path / "allowed_signers"
    signers.write_text("ops@example.com ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIA\n")
    policy = SignaturePolicy(allowed_signers=signers, identity="ops@example.com", require=True)
    with pytest.raises(SignatureError, match="signature"):
        check_target(str(root), CheckOptions(signature=policy))
