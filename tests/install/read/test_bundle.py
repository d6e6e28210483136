"""Tests of repro.install.read.bundle: a bundle's source told apart, verified, opened."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from repro.errors import EXIT_INVALID, EXIT_USAGE, InputError, VerificationError
from repro.install.read.bundle import is_directory, is_url, opened_bundle, verify_bundle_dir
from tests.support.bundles import archive_tree, bundle_info, make_bundle_tree, tamper
from tests.support.run import REPO_ROOT, run, run_process


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("http://host/b.tar", True),
        ("https://host:8443/b.tar?x=1", True),
        ("https://", True),
        ("HTTP://host/b.tar", False),
        ("ftp://host/b.tar", False),
        ("file:///tmp/b.tar", False),
        ("http:/host/b.tar", False),
        ("bundle.tar", False),
        (" https://host/b.tar", False),
        ("-", False),
        ("", False),
    ],
)
def test_is_url(text: str, expected: bool) -> None:
    assert is_url(text) is expected


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("dir", True),
        ("link-to-dir", True),
        ("file.tar", False),
        ("link-to-file", False),
        ("absent", False),
        ("dangling", False),
    ],
)
def test_is_directory(tmp_path: Path, name: str, expected: bool) -> None:
    (tmp_path / "dir").mkdir()
    (tmp_path / "file.tar").write_bytes(b"")
    (tmp_path / "link-to-dir").symlink_to(tmp_path / "dir")
    (tmp_path / "link-to-file").symlink_to(tmp_path / "file.tar")
    (tmp_path / "dangling").symlink_to(tmp_path / "nowhere")
    assert is_directory(str(tmp_path / name)) is expected


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("dir", True),  # a relative name, judged against the working directory
        ("-", False),  # stdin, even where a directory of that name is
        ("https://host/b", False),  # a URL, even where a directory of that name is
    ],
)
def test_is_directory_of_a_relative_name(tmp_path: Path, name: str, expected: bool) -> None:
    for directory in ("dir", "-", "https:/host/b"):
        (tmp_path / directory).mkdir(parents=True)
    script = f"from repro.install.read.bundle import is_directory; print(is_directory({name!r}))"
    assert run([sys.executable, "-c", script], cwd=tmp_path, env=_env()) == f"{expected}\n"


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(REPO_ROOT)}


# --- verify_bundle_dir on a tree whose manifest GNU sha256sum wrote --------------------


def _gnu_tree(root: Path) -> Path:
    """A bundle tree whose MANIFEST.sha256 is `sha256sum`'s output over every file."""
    tree = make_bundle_tree(root, manifest=False)
    files = sorted(str(p.relative_to(tree)) for p in tree.rglob("*") if p.is_file())
    (tree / "MANIFEST.sha256").write_text(run(["sha256sum", "--", *files], cwd=tree))
    return tree


def test_a_manifest_by_sha256sum_verifies(tmp_path: Path) -> None:
    tree = _gnu_tree(tmp_path)
    assert run(["sha256sum", "--check", "--strict", "MANIFEST.sha256"], cwd=tree).count("OK") == 4
    assert verify_bundle_dir(tree, "the-bundle", jobs=2) == bundle_info()


def _one_byte(tree: Path) -> str:
    path = tree / "files/notes.txt"
    data = bytearray(path.read_bytes())
    data[0] ^= 0x01
    path.write_bytes(bytes(data))
    return "mismatched: files/notes.txt"


def _missing(tree: Path) -> str:
    (tree / "env/requirements.lock").unlink()
    return "missing: env/requirements.lock"


def _unlisted(tree: Path) -> str:
    (tree / "files/extra.txt").write_bytes(b"not packed\n")
    return "unlisted: files/extra.txt"


@pytest.mark.parametrize(
    ("damage", "gnu_fails"),
    [(_one_byte, True), (_missing, True), (_unlisted, False)],  # sha256sum -c sees no extras
    ids=["one-byte", "missing", "unlisted"],
)
def test_a_damaged_tree_fails_naming_the_file(
    tmp_path: Path, damage: Callable[[Path], str], gnu_fails: bool
) -> None:
    tree = _gnu_tree(tmp_path)
    problem = damage(tree)
    gnu = run_process(["sha256sum", "--check", "--strict", "MANIFEST.sha256"], cwd=tree)
    assert (gnu.returncode != 0) is gnu_fails
    with pytest.raises(VerificationError) as caught:
        verify_bundle_dir(tree, "the-bundle")
    assert caught.value.message == (
        f"the-bundle: the bundle does not verify against its MANIFEST.sha256:\n  - {problem}"
    )
    assert caught.value.exit_code == EXIT_INVALID


def test_every_problem_is_reported_at_once(tmp_path: Path) -> None:
    tree = _gnu_tree(tmp_path)
    problems = [_one_byte(tree), _missing(tree), _unlisted(tree)]
    with pytest.raises(VerificationError) as caught:
        verify_bundle_dir(tree, "the-bundle")
    lines = caught.value.message.splitlines()
    assert lines[1:] == [f"  - {p}" for p in problems]


def test_a_tree_without_bundle_toml_is_refused(tmp_path: Path) -> None:
    tree = make_bundle_tree(tmp_path, manifest=False)
    (tree / "bundle.toml").unlink()
    files = sorted(str(p.relative_to(tree)) for p in tree.rglob("*") if p.is_file())
    (tree / "MANIFEST.sha256").write_text(run(["sha256sum", "--", *files], cwd=tree))
    with pytest.raises(VerificationError) as caught:
        verify_bundle_dir(tree, "the-bundle")
    assert caught.value.message == "the-bundle: the bundle has no bundle.toml"


# --- opened_bundle -----------------------------------------------------------------------


def test_a_directory_is_opened_where_it_is(tmp_path: Path) -> None:
    tree = _gnu_tree(tmp_path)
    with opened_bundle(str(tree)) as opened:
        assert opened == tree
    assert (tree / "MANIFEST.sha256").is_file()  # a directory is not removed


def test_an_archive_is_extracted_verified_and_removed(tmp_path: Path) -> None:
    tree = _gnu_tree(tmp_path / "src")
    archive = archive_tree(tree, tmp_path / "demo.tar")
    with opened_bundle(str(archive), jobs=2) as opened:
        assert opened.parent.name.startswith("repro-bundle-")
        names = sorted(str(p.relative_to(opened)) for p in opened.rglob("*") if p.is_file())
        assert names == [
            "MANIFEST.sha256",
            "bundle.toml",
            "env/requirements.lock",
            "files/notes.txt",
            "patches/patches.toml",
        ]
        assert (opened / "files/notes.txt").read_bytes() == b"hello\n"
        temporary = opened.parent
    assert not temporary.exists()
    assert archive.is_file()


# opened in a child with TMPDIR set, so that what it leaves behind can be seen
OPEN = """
import sys
from repro.errors import ReproError
from repro.install.read.bundle import opened_bundle
try:
    with opened_bundle(sys.argv[1]) as opened:
        if sys.argv[2] == "raise":
            raise RuntimeError("the block failed")
except (ReproError, RuntimeError) as exc:
    print(type(exc).__name__, getattr(exc, "exit_code", "-"))
    print(exc)
"""


@pytest.mark.parametrize(
    ("archive", "block", "first_line", "said"),
    [
        ("good", "raise", "RuntimeError -", "the block failed"),
        ("tampered", "pass", f"VerificationError {EXIT_INVALID}", "mismatched: files/notes.txt"),
        ("absent", "pass", f"InputError {EXIT_USAGE}", "absent.tar: no such file or directory"),
    ],
)
def test_nothing_is_left_behind_when_opening_fails(
    tmp_path: Path, archive: str, block: str, first_line: str, said: str
) -> None:
    tree = _gnu_tree(tmp_path / "src")
    good = archive_tree(tree, tmp_path / "good.tar")
    tamper(good, tmp_path / "tampered.tar", "files/notes.txt", b"HELLO\n")
    temp = tmp_path / "tmp"
    temp.mkdir()
    given = tmp_path / f"{archive}.tar"
    out = run([sys.executable, "-c", OPEN, str(given), block], env={**_env(), "TMPDIR": str(temp)})
    assert out.splitlines()[0] == first_line
    assert said in out
    assert list(temp.iterdir()) == []


def test_a_missing_bundle_is_an_input_error(tmp_path: Path) -> None:
    with pytest.raises(InputError) as caught, opened_bundle(str(tmp_path / "nope.tar")):
        pass
    assert caught.value.message == f"{tmp_path / 'nope.tar'}: no such file or directory"
    assert caught.value.exit_code == EXIT_USAGE
