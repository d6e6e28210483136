"""Tests of repro.bundle.layout: where each part of a bundle lies."""

from __future__ import annotations

from pathlib import Path

import pytest

from repro.bundle import layout


@pytest.mark.parametrize(
    ("member", "expected"),
    [
        (layout.wheel("k-1.0-py3-none-any.whl"), "env/wheels/k-1.0-py3-none-any.whl"),
        (layout.wheel_from_env("k-1.0-py3-none-any.whl"), "wheels/k-1.0-py3-none-any.whl"),
        (layout.tool_wheel("repro-1-py3-none-any.whl"), "tool/wheels/repro-1-py3-none-any.whl"),
        (layout.full_patch("sglang", "sglang/srt/x.py"), "patches/full/sglang/sglang/srt/x.py"),
        (
            layout.patch_diff("sglang", "sglang/srt/x.py"),
            "patches/diffs/sglang/sglang/srt/x.py.diff",
        ),
        (layout.in_patches("full/sglang/a.py"), "patches/full/sglang/a.py"),
        (layout.unit("sglang.service"), "services/sglang.service"),
        (layout.unit("sglang.service.d/x.conf"), "services/sglang.service.d/x.conf"),
        (layout.model_file("drafter", "config.json"), "models/drafter/config.json"),
        (layout.carried_file("bench/run.sh"), "files/bench/run.sh"),
        (layout.under(layout.SERVICES), "services/"),
    ],
)
def test_member_paths(member: str, expected: str) -> None:
    assert member == expected


def test_patchset_paths_agree() -> None:
    assert layout.PATCHES_TOML == "patches/patches.toml"
    assert layout.in_patches(layout.PATCHSET_FILE) == layout.PATCHES_TOML
    assert layout.in_patches("full") == layout.PATCHES_FULL
    assert layout.in_patches("diffs") == layout.PATCHES_DIFFS


def test_env_members_lie_under_env() -> None:
    prefix = layout.under(layout.ENV)
    for member in (
        layout.PIP_FREEZE,
        layout.REQUIREMENTS_LOCK,
        layout.PYLOCK,
        layout.ENVIRONMENT,
        layout.VAULT_TOML,
        layout.PACK_REPORT,
        layout.SBOM,
        layout.WHEELS,
    ):
        assert member.startswith(prefix), member


def test_closing_members() -> None:
    assert layout.MANIFEST_NAMES == ("MANIFEST.sha256", "MANIFEST.sha256.sig")
    assert layout.SIGNATURE == layout.MANIFEST + ".sig"
    # format 5: the lock files that list the vault wheels' sha256, then the SBOM
    assert layout.TRAILING_MEMBERS == ("env/pylock.toml", "env/vault.toml", "env/sbom.cdx.json")
    assert layout.trailing_members(5) == layout.TRAILING_MEMBERS
    assert [layout.trailing_members(v) for v in (1, 2, 3, 4)] == [("env/sbom.cdx.json",)] * 4


def test_at_joins_components(tmp_path: Path) -> None:
    where = layout.at(tmp_path, layout.full_patch("d", "a/b.py"))
    assert where == tmp_path / "patches" / "full" / "d" / "a" / "b.py"
    assert where.relative_to(tmp_path).parts == ("patches", "full", "d", "a", "b.py")
    assert layout.at(tmp_path, layout.BUNDLE_TOML) == tmp_path / "bundle.toml"
