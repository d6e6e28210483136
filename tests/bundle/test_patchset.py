"""Tests of repro.bundle.patchset: patches/patches.toml, the bundle's patch set."""

from __future__ import annotations

import pytest

from repro import _toml
from repro.bundle.patchset import (
    PatchEntry,
    PatchSet,
    check_relative_path,
    dump_patchset,
    load_patchset,
)
from repro.errors import BundleFormatError

P, Q = "a" * 64, "b" * 64
MODIFIED = PatchEntry("sglang", "0.5.0", "sglang/srt/x.py", "modified", P, Q, has_diff=True)
ADDED = PatchEntry("sglang", "0.5.0", "sglang/new.py", "added", None, Q, executable=True)
DELETED = PatchEntry("vllm", "0.9.0", "vllm/old.py", "deleted", P, None)


def test_dump_then_load_round_trips_sorted() -> None:
    data = dump_patchset([DELETED, MODIFIED, ADDED])
    assert load_patchset(data, source="p.toml") == PatchSet((ADDED, MODIFIED, DELETED))
    files = _toml.loads(data.decode())["files"]
    assert files[1] == {
        "dist": "sglang",
        "version": "0.5.0",
        "path": "sglang/srt/x.py",
        "kind": "modified",
        "pristine_sha256": P,
        "patched_sha256": Q,
        "full": "full/sglang/sglang/srt/x.py",
        "diff": "diffs/sglang/sglang/srt/x.py.diff",
    }
    assert "full" not in files[2] and files[0]["executable"] is True


def test_members_and_grouping() -> None:
    assert DELETED.full_member is None and DELETED.diff_member is None
    assert ADDED.full_member == "full/sglang/sglang/new.py"
    assert PatchSet((MODIFIED, DELETED, ADDED)).by_dist() == {
        "sglang": [MODIFIED, ADDED],
        "vllm": [DELETED],
    }


@pytest.mark.parametrize("path", ["a/b.py", "a.b/c-d_e.py", "x"])
def test_plain_paths(path: str) -> None:
    assert check_relative_path(path, where="w") == path


@pytest.mark.parametrize(
    "path", ["", "/etc/x", "../x", "a/../b", "a/./b", "a//b", "a/", "a\\b", "a\0b", "~/x"]
)
def test_paths_that_leave_site_packages(path: str) -> None:
    with pytest.raises(
        BundleFormatError, match=r"w: path .* is not a plain path inside site-packages"
    ):
        check_relative_path(path, where="w")


GOOD = (
    'dist = "d"\nversion = "1"\npath = "d/x.py"\nkind = "modified"\n'
    f'pristine_sha256 = "{P}"\npatched_sha256 = "{Q}"\n'
)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("files = [", "p.toml: not valid TOML"),
        ("files = []", "p.toml: 'format_version' must be an integer"),
        ("format_version = true", "'format_version' must be an integer"),
        ("format_version = 2", "patch set format 2 is newer than this repro supports \\(1\\)"),
        ("format_version = 1\nextra = 1", "p.toml: unknown key\\(s\\) 'extra'"),
        ("format_version = 1\nfiles = 1", "'files' must be an array of tables"),
        (
            "format_version = 1\nfiles = [1]",
            r"files\[0\]: each \[\[files\]\] entry must be a table",
        ),
        (
            "format_version = 1\n[[files]]\n" + GOOD + "color = 1",
            r"files\[0\]: unknown key\(s\) 'color'",
        ),
        (
            "format_version = 1\n[[files]]\n" + GOOD.replace('"d"', '"-d"', 1),
            "'dist' '-d' is not a distribution name",
        ),
        (
            "format_version = 1\n[[files]]\n" + GOOD.replace("modified", "renamed"),
            "'kind' must be one of modified, added, deleted",
        ),
        (
            "format_version = 1\n[[files]]\n" + GOOD.replace(P, P.upper()),
            "'pristine_sha256' is not a lowercase sha256",
        ),
        (
            "format_version = 1\n[[files]]\n" + GOOD.replace(f'pristine_sha256 = "{P}"\n', ""),
            "a modified file needs 'pristine_sha256'",
        ),
        (
            "format_version = 1\n[[files]]\n" + GOOD.replace(f'patched_sha256 = "{Q}"\n', ""),
            "a modified file needs 'patched_sha256'",
        ),
        (
            "format_version = 1\n[[files]]\n" + GOOD.replace('version = "1"', "version = 1"),
            "'version' must be a string, not int",
        ),
        (
            "format_version = 1\n[[files]]\n" + GOOD + "executable = 1",
            "'executable' must be true or false",
        ),
        (
            "format_version = 1\n[[files]]\n" + GOOD.replace("d/x.py", "../x.py"),
            "path '../x.py' is not a plain path",
        ),
        (
            "format_version = 1\n[[files]]\n" + GOOD + "[[files]]\n" + GOOD,
            "p.toml: 'd/x.py' is listed twice",
        ),
    ],
)
def test_malformed_patch_sets(text: str, message: str) -> None:
    with pytest.raises(BundleFormatError, match=message):
        load_patchset(text.encode(), source="p.toml")
