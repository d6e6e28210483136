"""Tests of repro.install.read.contents: the members unpack reads, each checked."""

from __future__ import annotations

from pathlib import Path

import pytest

from repro.bundle.vault import VaultEntry
from repro.errors import BundleFormatError, ReproError
from repro.install.read.contents import (
    PackFacts,
    check_bundle_contents,
    custom_vault_wheels,
    hashes_by_pin,
    pack_facts,
    vault_wheel_files,
)


def _member(bundle: Path, name: str, data: str | bytes) -> None:
    path = bundle / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data.encode() if isinstance(data, str) else data)


@pytest.mark.parametrize(
    ("text", "facts"),
    [
        ("{}", PackFacts(0, 0)),
        ('{"installed_bytes": 1024, "unmet_requirements": ["a", "b"]}', PackFacts(1024, 2)),
        ('{"other": 1}', PackFacts(0, 0)),
    ],
)
def test_pack_facts(tmp_path: Path, text: str, facts: PackFacts) -> None:
    _member(tmp_path, "env/pack-report.json", text)
    assert pack_facts(tmp_path) == facts
    assert pack_facts(tmp_path / "absent") == PackFacts()


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"{", "env/pack-report.json: not valid JSON: "),
        (b"\xff", "env/pack-report.json: not valid JSON: "),
        (b"[" * 100000 + b"]" * 100000, "env/pack-report.json: not valid JSON: nested too deeply"),
        (b"[1]", "env/pack-report.json: must be a JSON object, not list"),
        (
            b'{"installed_bytes": -1}',
            "env/pack-report.json: key 'installed_bytes' must be a non-negative integer, not -1",
        ),
        (
            b'{"installed_bytes": true}',
            "env/pack-report.json: key 'installed_bytes' must be a non-negative integer, not true",
        ),
        (
            b'{"installed_bytes": "9"}',
            "env/pack-report.json: key 'installed_bytes' must be a non-negative integer, not \"9\"",
        ),
        (
            b'{"unmet_requirements": "a"}',
            "env/pack-report.json: key 'unmet_requirements' must be a list, not str",
        ),
    ],
)
def test_a_bad_pack_report_is_refused(tmp_path: Path, data: bytes, message: str) -> None:
    _member(tmp_path, "env/pack-report.json", data)
    with pytest.raises(BundleFormatError) as caught:
        pack_facts(tmp_path)
    assert caught.value.message.startswith(message)


def _entry(name: str, filename: str, sha: str, reason: str = "custom build") -> VaultEntry:
    return VaultEntry(name, "1", filename, sha, reason, "original")


def test_hashes_by_pin_groups_by_canonical_name() -> None:
    entries = [
        _entry("Flash_Attn", "flash_attn-1-cp311-linux.whl", "a"),
        _entry("flash-attn", "flash_attn-1-cp312-linux.whl", "b"),
        _entry("torch", "torch-1-cp311-linux.whl", "c"),
    ]
    assert hashes_by_pin(entries) == {"flash-attn": ("a", "b"), "torch": ("c",)}


def test_custom_vault_wheels_leaves_out_what_an_index_serves(tmp_path: Path) -> None:
    _member(
        tmp_path,
        "env/vault.toml",
        "".join(
            f'[[wheels]]\nname = "{n}"\nversion = "1"\nfilename = "{f}"\nsha256 = "0"\n'
            f'reason = "{r}"\nsource = "original"\n'
            for n, f, r in [
                ("zz", "zz-1-py3-none-any.whl", "local version +cu130"),
                ("aa", "aa-1-py3-none-any.whl", "--wheels all"),
                ("kern", "kern-1-py3-none-any.whl", "never published"),
            ]
        ),
    )
    assert custom_vault_wheels(tmp_path) == ["kern-1-py3-none-any.whl", "zz-1-py3-none-any.whl"]
    assert custom_vault_wheels(tmp_path / "absent") == []


def test_vault_wheel_files_sorted_wheels_only(tmp_path: Path) -> None:
    for name in ("b-1-py3-none-any.whl", "a-1-py3-none-any.whl", "notes.txt"):
        _member(tmp_path, f"env/wheels/{name}", b"")
    assert [p.name for p in vault_wheel_files(tmp_path)] == [
        "a-1-py3-none-any.whl",
        "b-1-py3-none-any.whl",
    ]


def test_check_bundle_contents_accepts_an_empty_bundle(tmp_path: Path) -> None:
    check_bundle_contents(tmp_path, "b.tar")


@pytest.mark.parametrize(
    ("member", "data", "named"),
    [
        ("env/requirements.lock", "--index-url http://x/simple\nfoo==1\n", "b.tar: env/"),
        ("patches/patches.toml", "not toml [", "b.tar: patches/patches.toml"),
        ("env/vault.toml", "wheels = 3\n", "env/vault.toml"),
        ("env/pack-report.json", "[]", "env/pack-report.json"),
        ("services/bad name!.service", "[Service]\n", "b.tar: services/"),
    ],
)
def test_check_bundle_contents_refuses_a_bad_member(
    tmp_path: Path, member: str, data: str, named: str
) -> None:
    _member(tmp_path, member, data)
    with pytest.raises(ReproError) as caught:
        check_bundle_contents(tmp_path, "b.tar")
    assert named in caught.value.message
