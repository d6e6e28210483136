"""repro/install/read/delta.py: a delta read into staging made whole from its base (each
member from the base checked against the delta's manifest), and the check that a delta
applies in place only onto a target that holds its base."""

from __future__ import annotations

import hashlib
from dataclasses import replace
from pathlib import Path

import pytest

from repro.bundle.delta import DELTA_FORMAT_VERSION, BaseRef, manifest_digest
from repro.bundle.info import dump_bundle_info
from repro.bundle.manifesttree import write_manifest
from repro.errors import DeltaBaseError, VerificationError
from repro.install.read.delta import complete_from_base, delta_target_decision, staged_base
from repro.install.state import BundleIdentity, open_state
from tests.support.bundles import NAME, VERSION, bundle_info, make_bundle_tree

WHEEL = "env/wheels/a-1-py3-none-any.whl"
CHANGED = "files/notes.txt"


def _base(tmp_path: Path) -> tuple[Path, BaseRef]:
    tree = make_bundle_tree(tmp_path / "old", files={WHEEL: b"wheel a\n"})
    return tree, BaseRef(NAME, VERSION, manifest_digest((tree / "MANIFEST.sha256").read_bytes()))


def _delta(tmp_path: Path, base: BaseRef) -> Path:
    """The new bundle (notes.txt changed, the wheel the same) with only what changed
    and the metadata left in its directory, as staging holds a delta after its read."""
    info = replace(bundle_info(), version="2.0", format_version=DELTA_FORMAT_VERSION, base=base)
    tree = make_bundle_tree(
        tmp_path / "new",
        files={WHEEL: b"wheel a\n", CHANGED: b"changed\n", "bundle.toml": dump_bundle_info(info)},
    )
    write_manifest(tree)
    (tree / WHEEL).unlink()
    return tree


def test_a_delta_made_whole_from_its_base(tmp_path: Path) -> None:
    old, ref = _base(tmp_path)
    new = _delta(tmp_path, ref)
    assert staged_base(new, "new.tar") == ref
    known = {CHANGED: hashlib.sha256(b"changed\n").hexdigest()}
    assert complete_from_base(new, "new.tar", str(old), known) == 1
    assert (new / WHEEL).read_bytes() == b"wheel a\n"
    assert known[WHEEL] == hashlib.sha256(b"wheel a\n").hexdigest()
    # the carried member was not read from the base
    assert (new / CHANGED).read_bytes() == b"changed\n"


def test_a_full_bundle_takes_nothing(tmp_path: Path) -> None:
    old, _ = _base(tmp_path)
    full = make_bundle_tree(tmp_path / "full")
    assert staged_base(full, "full.tar") is None
    assert complete_from_base(full, "full.tar", str(old), {}) == 0


def test_a_base_member_changed_since_packing_is_refused(tmp_path: Path) -> None:
    old, ref = _base(tmp_path)
    new = _delta(tmp_path, ref)
    # The base's own manifest is not the judge of its members: the delta's is.
    (old / WHEEL).write_bytes(b"wheel b\n")
    with pytest.raises(VerificationError) as caught:
        complete_from_base(new, "new.tar", str(old), {})
    message = caught.value.message
    assert "1 member(s) the delta new.tar takes from its base" in message
    assert WHEEL in message and hashlib.sha256(b"wheel b\n").hexdigest() in message


def test_another_base_is_refused_before_a_member_is_written(tmp_path: Path) -> None:
    old, ref = _base(tmp_path)
    new = _delta(tmp_path, replace(ref, version="0.9"))
    with pytest.raises(DeltaBaseError, match="another version"):
        complete_from_base(new, "new.tar", str(old), {})
    assert not (new / WHEEL).exists()


def test_in_place_only_onto_a_target_of_its_base(tmp_path: Path) -> None:
    ref = BaseRef(NAME, VERSION, "a" * 64)
    missing = delta_target_decision(ref, tmp_path / "nowhere", delta="new.tar")
    assert not missing.ok
    target = tmp_path / "t"
    target.mkdir()
    state = open_state(target, BundleIdentity(NAME, VERSION, "a" * 64), replace=False)
    state.save()
    assert delta_target_decision(ref, target, delta="new.tar").ok
    other = delta_target_decision(replace(ref, manifest_sha256="b" * 64), target, delta="new.tar")
    assert not other.ok
    assert "new.tar" in other.reason and str(target) in other.reason
