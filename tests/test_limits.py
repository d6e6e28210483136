"""Bounded work: inputs built to make repro run for ever fail fast with a clear error.

Each case runs the real CLI under a timeout, so a regression fails instead of hanging."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from repro.bundle.info import MAX_TIMEOUT_S, load_bundle_info
from repro.bundle.manifest import MAX_LINE_BYTES, MAX_PATH_DEPTH, parse_manifest
from repro.config import load_config
from repro.errors import BundleFormatError, ConfigError
from tests.bundle.test_info import MINIMAL
from tests.support.run import run_repro

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


def bundle_toml(timeout_s: object) -> bytes:
    """test_bundle's minimal bundle.toml with a [ladder] timeout_s."""
    return MINIMAL + f"\n[ladder]\ntimeout_s = {timeout_s}\n".encode()


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        ("inf", "must be finite and at most 86400, not inf"),
        ("nan", "must be a positive number, not nan"),
        ("-inf", "must be a positive number, not -inf"),
        ("1e300", "must be finite and at most 86400, not 1e+300"),
        ("86401", "must be finite and at most 86400, not 86401"),
    ],
)
def test_a_ladder_timeout_that_never_ends_is_refused(
    tmp_path: Path, value: str, problem: str
) -> None:
    (tmp_path / "repro.toml").write_text(f"[ladder]\ntimeout = {value}\n")
    with pytest.raises(ConfigError) as config_error:
        load_config(tmp_path)
    assert f"ladder.timeout: {problem}" in str(config_error.value)
    with pytest.raises(BundleFormatError) as bundle_error:
        load_bundle_info(bundle_toml(value), source="/b/bundle.toml")
    message = str(bundle_error.value)
    assert "/b/bundle.toml" in message and "timeout_s" in message and "86400" in message


def test_the_longest_ladder_timeout_is_accepted(tmp_path: Path) -> None:
    (tmp_path / "repro.toml").write_text(f"[ladder]\ntimeout = {MAX_TIMEOUT_S}\n")
    assert load_config(tmp_path).ladder.timeout == MAX_TIMEOUT_S
    data = bundle_toml(MAX_TIMEOUT_S)
    assert load_bundle_info(data, source="bundle.toml").ladder.timeout_s == MAX_TIMEOUT_S


@pytest.mark.parametrize("value", ["inf", "nan", "1e9"])
def test_smoke_refuses_an_endless_timeout(value: str) -> None:
    proc = run_repro("smoke", "--launch", "true", "--timeout", value, timeout=LIMIT_S)
    assert proc.returncode == 2
    assert "--timeout" in proc.stderr.decode()
