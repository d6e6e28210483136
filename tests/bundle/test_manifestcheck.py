"""Tests of repro.bundle.manifestcheck: a manifest against computed digests."""

from __future__ import annotations

from repro.bundle.manifest import parse_manifest
from repro.bundle.manifestcheck import UnlistedPath, Unreadable, compare_digests, exempt_names

# tests/bundle/test_manifest.py covers the common verdicts; these are the other rules.
A, B = "a" * 64, "b" * 64


def _manifest(*names: str, digest: str = A) -> bytes:
    return b"".join(f"{digest}  {name}\n".encode() for name in names)


def test_exempt_names() -> None:
    assert exempt_names("MANIFEST.sha256") == {"MANIFEST.sha256", "MANIFEST.sha256.sig"}
    assert exempt_names("other.sha256") == {"other.sha256", "other.sha256.sig"}


def test_an_uppercase_computed_digest_still_verifies() -> None:
    manifest = parse_manifest(_manifest("a"), source="m")
    report = compare_digests(manifest, {"a": A.upper()}, present=["a"])
    assert report.verified == ("a",) and report.passed(ignore_missing=False, strict=True)


def test_present_but_not_hashed_is_a_failure_not_a_pass() -> None:
    manifest = parse_manifest(_manifest("a", "b"), source="m")
    report = compare_digests(manifest, {"a": A}, present=["a", "b"])
    assert report.unreadable == (Unreadable("b", "present but not hashed"),)
    assert report.missing == ()
    assert not report.passed(ignore_missing=True, strict=False)


def test_a_rejected_entry_is_not_also_unlisted() -> None:
    manifest = parse_manifest(_manifest("a", "a"), source="m")  # a duplicate: rejected
    assert [r.path for r in manifest.rejected] == ["a"]
    report = compare_digests(manifest, {"a": A}, present=["a", "../x"])
    assert [u.path for u in report.unlisted] == ["../x"]
    assert not report.passed(ignore_missing=False, strict=False)


def test_unreadable_unlisted_paths_and_exempt_nonregular() -> None:
    manifest = parse_manifest(_manifest("a"), source="m")
    report = compare_digests(
        manifest,
        {"a": A},
        present=["a", "custom.sha256"],
        unreadable={"locked-dir": "cannot list directory: Permission denied"},
        nonregular={"custom.sha256.sig": "symlink", "sock": "socket"},
        exempt=exempt_names("custom.sha256"),
    )
    assert report.unreadable == (
        Unreadable("locked-dir", "cannot list directory: Permission denied"),
    )
    assert report.unlisted == (UnlistedPath("sock", "socket"),)


def test_reports_sort_by_bytes() -> None:
    names = ["b", "B", "a/z", "a.z", "é"]
    manifest = parse_manifest(_manifest(*names), source="m")
    report = compare_digests(manifest, dict.fromkeys(names, B), present=names)
    assert [m.path for m in report.mismatched] == ["B", "a.z", "a/z", "b", "é"]
    assert report.to_json()["counts"]["mismatched"] == 5
