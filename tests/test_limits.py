"""Bounded work: inputs built to make repro run for ever fail fast with a clear error.

Each case runs the real CLI under a timeout, so a regression fails instead of hanging."""

from __future__ import annotations

import hashlib
from pathlib import Path

from repro.manifest import MAX_LINE_BYTES, MAX_PATH_DEPTH, parse_manifest
from tests.conftest import run_repro

LIMIT_S = 60  # the cases below take well under a second when bounded


def _tree_with_long_manifest_line(root: Path) -> Path:
    root.mkdir()
    (root / "a.txt").write_bytes(b"a\n")
    digest = hashlib.sha256(b"a\n").hexdigest()
    long_name = "/".join(["a"] * (2 << 20))  # 4 MiB, two million components
    (root / "MANIFEST.sha256").write_text(f"{digest}  a.txt\n{digest}  {long_name}\n")
    return root


def test_check_refuses_a_four_megabyte_manifest_line(tmp_path: Path) -> None:
    tree = _tree_with_long_manifest_line(tmp_path / "bundle")
    proc = run_repro("check", str(tree / "MANIFEST.sha256"), timeout=LIMIT_S)
    assert proc.returncode != 0
    out = (proc.stdout + proc.stderr).decode()
    assert "line 2" in out or ":2" in out, out
    assert f"over the limit of {MAX_LINE_BYTES:,}" in out, out
    assert len(out) < 20_000  # the line is not echoed back


def test_unpack_refuses_a_four_megabyte_manifest_line(tmp_path: Path) -> None:
    tree = _tree_with_long_manifest_line(tmp_path / "bundle")
    proc = run_repro("unpack", str(tree), "--target", str(tmp_path / "t"), timeout=LIMIT_S)
    assert proc.returncode != 0
    out = (proc.stdout + proc.stderr).decode()
    assert "MANIFEST.sha256" in out and "over the limit" in out, out
    assert not (tmp_path / "t").exists() or not any((tmp_path / "t").iterdir())


def test_deep_and_long_names_are_rejected_naming_the_line() -> None:
    digest = "0" * 64
    deep = "/".join(["d"] * (MAX_PATH_DEPTH + 1))
    data = f"{digest}  ok.txt\n{digest}  {deep}\n{digest}  {'n' * 5000}\n".encode()
    manifest = parse_manifest(data, source="MANIFEST.sha256")
    assert [e.path for e in manifest.entries] == ["ok.txt"]
    reasons = {r.lineno: r.reason for r in manifest.rejected}
    assert reasons[2] == f"{MAX_PATH_DEPTH + 1} path components, over the limit of {MAX_PATH_DEPTH}"
    assert reasons[3] == "name longer than 4096 bytes"
