"""repro.bundle.delta: which members a delta carries, `[base]` in bundle.toml, and when a
delta may be applied onto a target."""

from __future__ import annotations

from dataclasses import replace

import pytest

from repro.bundle import layout
from repro.bundle.delta import (
    DELTA_FORMAT_VERSION,
    BaseRef,
    always_carried,
    delta_decision,
    delta_members,
    manifest_digest,
    members_from_base,
    refuse_other_base,
)
from repro.bundle.info import FORMAT_VERSION, dump_bundle_info, load_bundle_info
from repro.bundle.manifest import format_manifest, parse_manifest
from repro.errors import BundleFormatError, DeltaBaseError
from tests.support.bundles import bundle_info

BASE = BaseRef("demo", "1", "a" * 64)


def test_metadata_always_travels_and_the_payload_does_not() -> None:
    for member in (
        layout.BUNDLE_TOML,
        layout.MANIFEST,
        layout.REPRODUCE,
        layout.SETUP_ENV,
        layout.PYLOCK,
        layout.PACK_REPORT,
        layout.PATCHES_TOML,
    ):
        assert always_carried(member), member
    for member in (
        layout.wheel("torch-2.9.0-cp312-cp312-linux_x86_64.whl"),
        layout.full_patch("sglang", "srt/layers/triton_backend.py"),
        layout.tool_wheel("repro-0.1.0-py3-none-any.whl"),
        layout.carried_file("bench/run.sh"),
        layout.unit("model.service"),
    ):
        assert not always_carried(member), member


def test_only_changed_members_are_carried_and_metadata_always() -> None:
    new = {
        layout.BUNDLE_TOML: "1" * 64,
        layout.wheel("a.whl"): "2" * 64,
        layout.wheel("b.whl"): "3" * 64,
        layout.full_patch("six", "six.py"): "4" * 64,
    }
    old = {**new, layout.full_patch("six", "six.py"): "5" * 64}
    carried, from_base = delta_members(new, old)
    assert carried == {layout.BUNDLE_TOML, layout.full_patch("six", "six.py")}
    assert from_base == {layout.wheel("a.whl"), layout.wheel("b.whl")}
    manifest = parse_manifest(format_manifest(new.items()), source="m")
    assert members_from_base(manifest, carried) == from_base


def test_a_delta_has_the_format_of_a_full_bundle_and_its_base_round_trips() -> None:
    """From format 5 on, [base] alone makes a delta; 4 was a delta of format 3 only."""
    info = replace(bundle_info(), base=BASE)
    data = dump_bundle_info(info)
    assert data.startswith(f"format_version = {FORMAT_VERSION}\n".encode())
    assert b'[base]\nname = "demo"\nversion = "1"\n' in data
    assert load_bundle_info(data, source="t").base == BASE
    full = dump_bundle_info(bundle_info())
    assert b"[base]" not in full
    assert load_bundle_info(full, source="t").format_version == FORMAT_VERSION
    four = data.replace(f"format_version = {FORMAT_VERSION}".encode(), b"format_version = 4")
    assert load_bundle_info(four, source="t").format_version == DELTA_FORMAT_VERSION


def test_base_and_format_must_agree() -> None:
    full = dump_bundle_info(bundle_info())
    three = full.replace(f"format_version = {FORMAT_VERSION}".encode(), b"format_version = 3")
    with_base = (
        three
        + b'\n[base]\nname = "demo"\nversion = "1"\nmanifest_sha256 = "'
        + (b"a" * 64 + b'"\n')
    )
    with pytest.raises(BundleFormatError, match="needs format_version 4"):
        load_bundle_info(with_base, source="t")
    four = three.replace(b"format_version = 3", b"format_version = 4")
    with pytest.raises(BundleFormatError, match=r"'base' is required in format 4"):
        load_bundle_info(four, source="t")
    bad = with_base.replace(b"format_version = 3", b"format_version = 4").replace(
        b"a" * 64, b"A" * 64
    )
    with pytest.raises(BundleFormatError, match=r"base\.manifest_sha256"):
        load_bundle_info(bad, source="t")


def test_another_base_is_refused_naming_both() -> None:
    refuse_other_base(BASE, BASE, delta="d.tar", base="old.tar")
    other = BaseRef("other", "7", "b" * 64)
    with pytest.raises(DeltaBaseError) as caught:
        refuse_other_base(BASE, other, delta="d.tar", base="old.tar")
    message = caught.value.message
    assert "d.tar" in message and "old.tar" in message
    assert "demo 1" in message and "other 7" in message and "another bundle" in message
    with pytest.raises(DeltaBaseError, match="another manifest"):
        refuse_other_base(BASE, replace(BASE, manifest_sha256="c" * 64), delta="d", base="o")
    assert DeltaBaseError.exit_code == 2


def test_a_delta_applies_only_onto_a_target_of_its_base() -> None:
    assert delta_decision(BASE, BASE, delta="d", target="/t").ok
    for recorded in (None, replace(BASE, version="2"), replace(BASE, manifest_sha256="d" * 64)):
        decision = delta_decision(BASE, recorded, delta="d.tar", target="/srv/t")
        assert not decision.ok
        assert "d.tar" in decision.reason and "/srv/t" in decision.reason
        with pytest.raises(DeltaBaseError):
            decision.raise_unless_ok()


def test_manifest_digest_is_the_sha256_of_its_bytes() -> None:
    assert manifest_digest(b"") == (
        "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
    )
