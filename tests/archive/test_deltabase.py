"""repro/archive/deltabase.py: a delta's base read from a directory, an archive file, a
file:// URL or stdin; its identity, the wanted members hashed (and copied), and every
way a base can be the wrong one or a damaged one, each refused naming the base."""

from __future__ import annotations

import hashlib
import io
import os
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from repro.archive.deltabase import local_path, mismatched_members, read_base
from repro.bundle.delta import BaseRef, manifest_digest
from repro.errors import DeltaBaseError, InputError, VerificationError
from tests.support.bundles import NAME, VERSION, archive_tree, make_bundle_tree

PAYLOAD_WHEEL = "env/wheels/a-1-py3-none-any.whl"
PAYLOAD = {PAYLOAD_WHEEL: b"wheel a\n", "files/run.sh": b"#!/bin/sh\n"}


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    made = make_bundle_tree(tmp_path / "base", files=PAYLOAD)
    (made / "files" / "run.sh").chmod(0o755)
    return made


def identity(tree: Path) -> BaseRef:
    return BaseRef(NAME, VERSION, manifest_digest((tree / "MANIFEST.sha256").read_bytes()))


# Each way to name a base: (name of the case, the spec given for the tree `tree`).
def as_directory(tree: Path, tmp_path: Path) -> str:
    return str(tree)


def as_archive(tree: Path, tmp_path: Path) -> str:
    return str(archive_tree(tree, tmp_path / "base.tar"))


def as_file_url(tree: Path, tmp_path: Path) -> str:
    return archive_tree(tree, tmp_path / "base.tar").as_uri()


FORMS: dict[str, Callable[[Path, Path], str]] = {
    "directory": as_directory,
    "archive": as_archive,
    "file-url": as_file_url,
}


@pytest.fixture(params=sorted(FORMS))
def spec(request: pytest.FixtureRequest, tree: Path, tmp_path: Path) -> str:
    return FORMS[str(request.param)](tree, tmp_path)


def test_identity_and_the_wanted_members_copied(spec: str, tree: Path, tmp_path: Path) -> None:
    into = tmp_path / "into"
    into.mkdir()
    read = read_base(spec, wanted=sorted(PAYLOAD), into=into, expected=identity(tree))
    assert read.base.ref == identity(tree)
    assert read.base.info.name == NAME
    assert dict(read.digests) == {rel: sha(data) for rel, data in PAYLOAD.items()}
    assert dict(read.sizes) == {rel: len(data) for rel, data in PAYLOAD.items()}
    for rel, data in PAYLOAD.items():
        assert (into / rel).read_bytes() == data
    assert os.access(into / "files" / "run.sh", os.X_OK)
    assert not os.access(into / PAYLOAD_WHEEL, os.X_OK)
    assert mismatched_members(read, read.base.digests()) == []


def test_only_hashed_without_a_directory_to_write(spec: str, tmp_path: Path) -> None:
    before = sorted(p.name for p in tmp_path.iterdir())
    read = read_base(spec, wanted=[PAYLOAD_WHEEL])
    assert dict(read.digests) == {PAYLOAD_WHEEL: sha(PAYLOAD[PAYLOAD_WHEEL])}
    assert sorted(p.name for p in tmp_path.iterdir()) == before


@pytest.mark.parametrize(
    ("other", "says"),
    [
        (BaseRef("other", VERSION, "x"), "another bundle"),
        (BaseRef(NAME, "9", "x"), "another version"),
        (BaseRef(NAME, VERSION, "0" * 64), "another manifest"),
    ],
)
def test_another_base_is_refused_naming_both(spec: str, other: BaseRef, says: str) -> None:
    with pytest.raises(DeltaBaseError) as caught:
        read_base(spec, wanted=[PAYLOAD_WHEEL], expected=other, delta="new.tar")
    message = caught.value.message
    assert f"new.tar is a delta against {other.describe()}" in message
    assert f"but {spec} is {says}" in message
    assert caught.value.exit_code == 2


def test_a_member_the_base_lacks_is_named(spec: str) -> None:
    with pytest.raises(VerificationError) as caught:
        read_base(spec, wanted=[PAYLOAD_WHEEL, "env/wheels/gone-1-py3-none-any.whl"])
    assert "does not hold 1 member(s)" in caught.value.message
    assert "env/wheels/gone-1-py3-none-any.whl" in caught.value.message


def test_a_base_whose_bundle_toml_is_not_its_manifests_is_refused(
    tree: Path, tmp_path: Path
) -> None:
    toml = tree / "bundle.toml"
    toml.write_bytes(toml.read_bytes() + b"\n# changed after packing\n")
    for spec in (str(tree), as_archive(tree, tmp_path)):
        with pytest.raises(VerificationError) as caught:
            read_base(spec)
        assert "bundle.toml is not the one its MANIFEST.sha256 lists" in caught.value.message


@pytest.mark.parametrize("missing", ["MANIFEST.sha256", "bundle.toml"])
def test_not_a_bundle(tree: Path, missing: str) -> None:
    (tree / missing).unlink()
    with pytest.raises(InputError) as caught:
        read_base(str(tree))
    assert f"{tree}: the base has no {missing}" in caught.value.message


def test_a_directory_base_is_read_without_following_links(tree: Path, tmp_path: Path) -> None:
    outside = tmp_path / "outside.whl"
    outside.write_bytes(PAYLOAD[PAYLOAD_WHEEL])
    (tree / PAYLOAD_WHEEL).unlink()
    (tree / PAYLOAD_WHEEL).symlink_to(outside)
    with pytest.raises(InputError) as caught:
        read_base(str(tree), wanted=[PAYLOAD_WHEEL])
    assert f"the base's {PAYLOAD_WHEEL}" in caught.value.message
    (tree / PAYLOAD_WHEEL).unlink()
    (tree / "env" / "wheels").rmdir()
    (tree / "env" / "wheels").symlink_to(tmp_path)
    with pytest.raises(InputError):
        read_base(str(tree), wanted=[PAYLOAD_WHEEL])


def test_a_base_on_stdin(tree: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    data = archive_tree(tree, tmp_path / "base.tar").read_bytes()

    class Stdin:
        buffer = io.BytesIO(data)

    monkeypatch.setattr(sys, "stdin", Stdin)
    read = read_base("-", wanted=[PAYLOAD_WHEEL], expected=identity(tree))
    assert read.base.ref == identity(tree)


def test_mismatched_members_name_both_digests(tree: Path) -> None:
    read = read_base(str(tree), wanted=sorted(PAYLOAD))
    listed = read.base.digests() | {PAYLOAD_WHEEL: "f" * 64}
    assert mismatched_members(read, listed) == [
        (PAYLOAD_WHEEL, "f" * 64, sha(PAYLOAD[PAYLOAD_WHEEL]))
    ]


@pytest.mark.parametrize(
    ("spec", "path"),
    [("file:///srv/b.tar", "/srv/b.tar"), ("file://localhost/a%20b.tar", "/a b.tar"),
     ("b.tar", "b.tar"), ("-", "-")],
)  # fmt: skip
def test_local_path(spec: str, path: str) -> None:
    assert local_path(spec) == path


def test_a_file_url_of_another_host_is_refused() -> None:
    with pytest.raises(InputError, match="must name a local file"):
        local_path("file://elsewhere/b.tar")
