"""Tests of repro.bundle.vault: env/vault.toml, the wheels a bundle carries."""

from __future__ import annotations

import sys

import pytest

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

from repro.bundle.vault import ALL_WHEELS_REASON, VaultEntry, dump_vault, load_vault
from repro.errors import BundleFormatError

SHA = "a" * 64
CUSTOM = VaultEntry(
    "flash-attn",
    "2.8.3",
    "flash_attn-2.8.3-cp312-cp312-linux_x86_64.whl",
    SHA,
    "local version, no index serves it",
    "original",
)
OFFLINE = VaultEntry(
    "numpy",
    "2.1.0",
    "numpy-2.1.0-cp312-cp312-manylinux_2_17_x86_64.whl",
    "b" * 64,
    ALL_WHEELS_REASON,
    "downloaded",
)


def test_dump_then_load_is_the_same_entries_sorted_by_file_name() -> None:
    data = dump_vault([OFFLINE, CUSTOM])
    assert load_vault(data, source="env/vault.toml") == (CUSTOM, OFFLINE)
    document = tomllib.loads(data.decode())
    assert [w["filename"] for w in document["wheels"]] == [CUSTOM.filename, OFFLINE.filename]
    assert document["wheels"][0] == {
        "name": "flash-attn",
        "version": "2.8.3",
        "filename": CUSTOM.filename,
        "sha256": SHA,
        "reason": "local version, no index serves it",
        "source": "original",
    }


def test_dump_is_deterministic() -> None:
    assert dump_vault([CUSTOM, OFFLINE]) == dump_vault([OFFLINE, CUSTOM])


def test_index_serves() -> None:
    assert OFFLINE.index_serves
    assert not CUSTOM.index_serves


def test_empty_and_absent() -> None:
    assert load_vault(b"", source="v") == ()
    assert load_vault(dump_vault([]), source="v") == ()


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"wheels = [", "v.toml: not valid TOML"),
        (b"\xff\xfe", "v.toml: not valid TOML"),
        (b'wheels = "x"', "v.toml: 'wheels' must be an array of tables"),
        (b"wheels = [1]", r"v.toml: wheels\[0\] needs string keys name, version"),
        (b'[[wheels]]\nname = "a"\n', r"v.toml: wheels\[0\] needs string keys"),
    ],
)
def test_malformed_documents(data: bytes, message: str) -> None:
    with pytest.raises(BundleFormatError, match=message):
        load_vault(data, source="v.toml")


@pytest.mark.parametrize(
    "filename",
    [
        "../evil.whl",
        "sub/x-1-py3-none-any.whl",
        ".hidden.whl",
        "x-1.tar.gz",
        "x.whl.txt",
        "a\\b.whl",
    ],
)
def test_a_file_name_outside_env_wheels_is_refused(filename: str) -> None:
    entry = VaultEntry("x", "1", filename, SHA, "r", "original")
    with pytest.raises(BundleFormatError, match=r"wheels\[0\]\.filename .* is not the name"):
        load_vault(dump_vault([entry]), source="env/vault.toml")


def test_a_wrong_typed_key_is_refused() -> None:
    data = dump_vault([CUSTOM]).replace(b'version = "2.8.3"', b"version = 2")
    with pytest.raises(BundleFormatError, match=r"env/vault.toml: wheels\[0\] needs string keys"):
        load_vault(data, source="env/vault.toml")
