"""Tests of repro.snapshot.scan.keptpatches: patches a workspace keeps under patches/full/."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from repro.config import WorkspaceTarget
from repro.errors import ConfigError
from repro.snapshot.facts.environment import probe_environment
from repro.snapshot.scan.keptpatches import load_workspace_patches
from repro.wheel.record import read_record
from tests.snapshot.conftest import Venv


def _write(root: Path, rel: str, content: bytes) -> Path:
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(content)
    return path


def test_a_directory_without_full_is_refused_naming_it(tmp_path: Path) -> None:
    patches = tmp_path / "patches"
    (patches / "diffs").mkdir(parents=True)
    with pytest.raises(ConfigError, match="no full/ directory") as caught:
        load_workspace_patches(patches, {"x": WorkspaceTarget("x", "x")})
    assert str(patches) in str(caught.value)


def test_full_as_a_file_is_refused_too(tmp_path: Path) -> None:
    patches = tmp_path / "patches"
    _write(patches, "full", b"not a directory\n")
    with pytest.raises(ConfigError, match=r"patches: no full/ directory"):
        load_workspace_patches(patches, {})


def test_an_empty_full_directory_gives_no_patches(tmp_path: Path) -> None:
    (tmp_path / "full" / "python").mkdir(parents=True)
    assert load_workspace_patches(tmp_path, {"python": WorkspaceTarget("six", "")}) == []


def test_without_facts_each_file_is_a_modified_patch_of_the_mapped_dist(tmp_path: Path) -> None:
    content = b"def f():\n    return 2\n"
    source = _write(tmp_path, "full/vendor/pkg/mod.py", content)
    _write(tmp_path, "diffs/vendor/pkg/mod.py.diff", b"--- a/pkg/mod.py\n+++ b/pkg/mod.py\n")
    (patch,) = load_workspace_patches(tmp_path, {"vendor": WorkspaceTarget("My-Dist", "")})
    assert patch.source == source
    assert patch.content == content
    assert patch.diff == "--- a/pkg/mod.py\n+++ b/pkg/mod.py\n"
    file = patch.file
    assert (file.dist, file.version, file.path, file.kind) == (
        "My-Dist",
        "",
        "pkg/mod.py",
        "modified",
    )
    assert file.pristine_sha256 is None
    assert file.patched_sha256 == hashlib.sha256(content).hexdigest()
    assert file.size == len(content)


@pytest.mark.parametrize(
    ("rest", "dist", "site_path"),
    [
        ("python/idna/core.py", "idna", "idna/core.py"),  # the longer key wins
        ("python/idna/sub/deep.py", "idna", "idna/sub/deep.py"),
        ("python/six.py", "six", "six.py"),  # the shorter key, empty prefix
        ("python/idnax/a.py", "six", "idnax/a.py"),  # "python/idna" is no directory prefix
        ("lib/x/y.py", "other", "lib-root/x/y.py"),  # slashes around the key stripped
    ],
)
def test_the_longest_directory_key_maps_a_file(
    tmp_path: Path, rest: str, dist: str, site_path: str
) -> None:
    mapping = {
        "python": WorkspaceTarget("six", ""),
        "python/idna": WorkspaceTarget("idna", "idna"),
        "/lib/": WorkspaceTarget("other", "lib-root"),
    }
    _write(tmp_path, f"full/{rest}", b"x\n")
    (patch,) = load_workspace_patches(tmp_path, mapping)
    assert (patch.file.dist, patch.file.path) == (dist, site_path)
    assert patch.diff is None


def test_a_key_is_never_matched_as_a_bare_string_prefix(tmp_path: Path) -> None:
    _write(tmp_path, "full/python/six.py", b"x\n")
    with pytest.raises(ConfigError) as caught:
        load_workspace_patches(tmp_path, {"py": WorkspaceTarget("six", "")})
    assert caught.value.message.endswith("map entry for: python/six.py")


def test_unmapped_files_are_refused_naming_full_and_the_first_ten(tmp_path: Path) -> None:
    _write(tmp_path, "full/mapped/a.py", b"a\n")
    for i in range(12):
        _write(tmp_path, f"full/stray/f{i:02d}.py", b"s\n")
    with pytest.raises(ConfigError) as caught:
        load_workspace_patches(tmp_path, {"mapped": WorkspaceTarget("six", "")})
    message = caught.value.message
    listed = ", ".join(f"stray/f{i:02d}.py" for i in range(10))
    assert message == f"{tmp_path / 'full'}: no [patches.workspace] map entry for: {listed}"
    assert caught.value.hint == "map each directory under full/ to its distribution in repro.toml"


@pytest.mark.slow
def test_facts_give_the_installed_name_version_and_record_digest(
    clean_env: Venv, tmp_path: Path
) -> None:
    """With facts, the dist is named as installed, a RECORD-listed file is modified with
    RECORD's digest, an unlisted one added; a dist not installed keeps the map's name."""
    facts = probe_environment(clean_env.python, imports=False)
    idna = facts.distribution("idna")
    assert idna is not None
    record = {e.path: e.sha256 for e in read_record(Path(idna.metadata_dir) / "RECORD")}
    _write(tmp_path, "full/IDNA/core.py", b"# mine\n")
    _write(tmp_path, "full/IDNA/new.py", b"NEW = 1\n")
    _write(tmp_path, "full/ghost/g.py", b"G = 1\n")
    mapping = {"IDNA": WorkspaceTarget("IDNA", "idna"), "ghost": WorkspaceTarget("Ghost", "g")}
    loaded = {p.file.path: p.file for p in load_workspace_patches(tmp_path, mapping, facts=facts)}
    assert set(loaded) == {"idna/core.py", "idna/new.py", "g/g.py"}
    core, new, ghost = loaded["idna/core.py"], loaded["idna/new.py"], loaded["g/g.py"]
    assert (core.dist, core.version, core.kind) == ("idna", idna.version, "modified")
    assert core.pristine_sha256 == record["idna/core.py"] is not None
    assert (new.dist, new.kind, new.pristine_sha256) == ("idna", "added", None)
    assert (ghost.dist, ghost.version, ghost.kind) == ("Ghost", "", "added")
