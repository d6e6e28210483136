"""The pure pieces behind `inspect` and `diff`: version ordering, line counts, what is
kept in memory, vault.toml parsing and vault comparison."""

from __future__ import annotations

import pytest

from repro.bundle.limits import KEEP_LIMIT
from repro.bundle.vault import VaultEntry, load_vault
from repro.diffapply import count_diff_lines, unified_diff
from repro.errors import BundleFormatError
from repro.verbs.diff import diff_vault, version_change
from repro.verbs.view import should_keep


@pytest.mark.parametrize(
    ("old", "new", "expected"),
    [
        ("1.0", "1.0", None),
        ("1.16.0", "1.17.0", "upgraded"),
        ("23.2.0", "23.1.0", "downgraded"),
        ("2.9.0", "2.10.0", "upgraded"),  # not string order
        ("2.9.0+cu128", "2.9.0+cu130", "upgraded"),  # local versions order too
        ("2.9.0+cu130", "2.9.0", "downgraded"),
        ("1.0rc1", "1.0", "upgraded"),
        ("1.0.post1", "1.0", "downgraded"),
        ("1.0", "1.0.0", "changed"),  # equal by PEP 440, spelled differently
        ("not a version", "1.0", "changed"),
    ],
)
def test_version_change(old: str, new: str, expected: str | None) -> None:
    assert version_change(old, new) == expected


@pytest.mark.parametrize(
    ("before", "after", "counts"),
    [
        ("a\nb\n", "a\nb\nc\n", (1, 0)),
        ("a\nb\nc\n", "a\nc\n", (0, 1)),
        ("a\n--x\n", "a\n++x\n", (1, 1)),  # content lines that look like headers
        ("a", "b", (1, 1)),  # no newline at end of file
        ("", "x\ny\n", (2, 0)),  # a hunk with a zero-length side
        (
            "".join(f"{i}\n" for i in range(30)),
            "0\nX\n" + "".join(f"{i}\n" for i in range(2, 29)),
            (1, 2),
        ),  # two hunks
    ],
)
def test_count_diff_lines(before: str, after: str, counts: tuple[int, int]) -> None:
    assert count_diff_lines(unified_diff(before, after, "pkg/mod.py")) == counts


@pytest.mark.parametrize(
    ("rel", "size", "kept"),
    [
        ("bundle.toml", 100, True),
        ("env/environment.json", 100, True),
        ("env/requirements.lock", 100, True),
        ("env/pip-freeze.txt", 100, True),
        ("env/wheels/x-1.0-py3-none-any.whl", 100, False),
        ("tool/wheels/repro-0.1.0-py3-none-any.whl", 100, False),
        ("patches/full/idna/idna/core.py", 100, True),
        ("patches/full/big/big/blob.bin", KEEP_LIMIT + 1, False),
        ("services/model.service", 100, True),
        ("models/drafter/config.json", 100, True),
        ("files/bench/results.json", 100, True),
        ("REPRODUCE.md", 100, False),
        ("setup_env.sh", 100, False),
    ],
)
def test_should_keep(rel: str, size: int, kept: bool) -> None:
    assert should_keep(rel, size) is kept


def _wheel(name: str, version: str, sha: str) -> VaultEntry:
    return VaultEntry(name, version, f"{name}-{version}-py3-none-any.whl", sha, "local", "original")


def test_vault_toml_round_trip_and_errors() -> None:
    data = (
        b'[[wheels]]\nname = "x"\nversion = "1.0+local"\n'
        b'filename = "x-1.0+local-py3-none-any.whl"\n'
        b'sha256 = "' + b"a" * 64 + b'"\nreason = "local version"\nsource = "original"\n'
    )
    (entry,) = load_vault(data, source="v.toml")
    assert (entry.name, entry.version, entry.source) == ("x", "1.0+local", "original")
    with pytest.raises(BundleFormatError, match=r"v.toml: wheels\[0\] needs"):
        load_vault(b'[[wheels]]\nname = "x"\n', source="v.toml")
    with pytest.raises(BundleFormatError, match="not valid TOML"):
        load_vault(b"[[wheels", source="v.toml")


def test_diff_vault() -> None:
    old = (_wheel("a", "1.0", "1" * 64), _wheel("b", "2.0", "2" * 64), _wheel("c", "1", "3" * 64))
    new = (_wheel("a", "1.0", "1" * 64), _wheel("b", "2.0", "9" * 64), _wheel("d", "1", "4" * 64))
    changes = {(c.name, c.change) for c in diff_vault(old, new)}
    assert changes == {("b", "changed"), ("c", "removed"), ("d", "added")}
