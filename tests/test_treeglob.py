"""Tests of repro.treeglob: glob patterns that never follow a symbolic link."""

from __future__ import annotations

import glob
import os
from pathlib import Path

import pytest

from repro.treeglob import glob_tree, matched_entries


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    for rel in [
        "bench/run.sh",
        "bench/res/a.json",
        "bench/res/deep/b.json",
        "bench/.hidden",
        "docs/x.md",
        "top.txt",
    ]:
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(rel)
    (tmp_path / ".git").mkdir()
    (tmp_path / ".git" / "config").write_text("c")
    return tmp_path


@pytest.mark.parametrize(
    "pattern",
    [
        "bench/*",
        "bench/**",
        "bench/**/*.json",
        "**/*.json",
        "*",
        "*.txt",
        "bench/res/?.json",
        "docs/[xy].md",
        ".git/*",
        "./top.txt",
    ],
)
def test_same_files_as_glob_where_there_are_no_links(tree: Path, pattern: str) -> None:
    expected = sorted(
        Path(p) for p in glob.glob(str(tree / pattern), recursive=True) if Path(p).is_file()
    )
    assert list(glob_tree(tree, pattern).files) == expected


def test_links_are_returned_never_entered(tree: Path) -> None:
    (tree / "bench" / "loop").symlink_to(".")
    (tree / "bench" / "out").symlink_to("/etc")
    (tree / "bench" / "res" / "f.json").symlink_to("a.json")
    result = glob_tree(tree, "bench/**/*.json")
    assert [p.relative_to(tree).as_posix() for p in result.files] == [
        "bench/res/a.json",
        "bench/res/deep/b.json",
    ]
    assert [p.relative_to(tree).as_posix() for p in result.links] == [
        "bench/loop",
        "bench/out",
        "bench/res/f.json",
    ]
    named = glob_tree(tree, "bench/out/passwd")
    assert named.files == () and named.links == (tree / "bench" / "out",)


def test_special_files_are_others(tree: Path) -> None:
    os.mkfifo(tree / "bench" / "pipe")
    result = glob_tree(tree, "bench/*")
    assert result.others == (tree / "bench" / "pipe",)
    assert tree / "bench" / "pipe" not in result.files


def test_nothing_matches_an_empty_or_missing_pattern(tree: Path) -> None:
    assert glob_tree(tree, "") == glob_tree(tree, "./") == glob_tree(tree, "missing/*")
    assert glob_tree(tree, "").files == ()


def test_matched_entries_names_directories_too(tree: Path) -> None:
    (tree / "bench" / "ln").symlink_to("res")
    assert {p.relative_to(tree).as_posix() for p in matched_entries(tree, "bench/*")} == {
        "bench/run.sh",
        "bench/res",
        "bench/ln",
    }
    assert matched_entries(tree, "") == set()
