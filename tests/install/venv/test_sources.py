"""Tests of repro.install.venv.sources: the package sources repro gives the installer."""

from __future__ import annotations

from pathlib import Path

import pytest

from repro.bundle.lock import LockFile, read_requirements_lock
from repro.errors import BundleFormatError
from repro.install.venv.sources import (
    PYPI,
    PackageSources,
    check_lock_options,
    package_sources,
)


def _lock(tmp_path: Path, *lines: str) -> LockFile:
    path = tmp_path / "requirements.lock"
    path.write_text("\n".join([*lines, "foo==1.0", ""]))
    return read_requirements_lock(path)


@pytest.mark.parametrize(
    "url",
    [
        "https://pypi.org/simple",
        "https://download.pytorch.org/whl/cu130",
        "https://mirror.example:8443/simple/",
    ],
)
def test_https_index_urls_pass(tmp_path: Path, url: str) -> None:
    check_lock_options(_lock(tmp_path, f"--index-url {url}"), "b.tar")


@pytest.mark.parametrize(
    ("line", "why"),
    [
        ("--index-url http://pypi.org/simple", "is not an https:// URL"),
        ("--extra-index-url file:///wheels", "is not an https:// URL"),
        ("--find-links https://user:secret@host/w", "carries credentials"),
        ("--index-url https://host/${TOKEN}/simple", "holds characters no index URL needs"),
        ("--index-url https:///simple", "names no host"),
        ("--index-url https://host:99999/simple", "is not a URL"),
    ],
)
def test_a_bad_index_line_is_named_with_its_line(tmp_path: Path, line: str, why: str) -> None:
    with pytest.raises(BundleFormatError) as caught:
        check_lock_options(_lock(tmp_path, "# packed", line), "b.tar")
    message = caught.value.message
    assert message.startswith("b.tar: env/requirements.lock names package sources")
    option, value = line.split(" ", 1)
    assert f"  - line 2: {option} {value}: {why}" in message


def test_every_bad_line_is_reported_at_once(tmp_path: Path) -> None:
    lock = _lock(
        tmp_path,
        "--index-url http://a/simple",
        "--extra-index-url https://ok/simple",
        "--find-links http://b/w",
    )
    with pytest.raises(BundleFormatError) as caught:
        check_lock_options(lock, "b")
    assert "line 1:" in caught.value.message and "line 3:" in caught.value.message
    assert "line 2:" not in caught.value.message


def test_package_sources_online_defaults_to_pypi(tmp_path: Path) -> None:
    vault = tmp_path / "wheels"
    vault.mkdir()
    sources = package_sources(_lock(tmp_path), vault=vault, offline=False, where="b")
    assert sources == PackageSources(vault=vault, index_url=PYPI)
    assert sources.describe() == f"vault {vault}; index {PYPI}"


def test_package_sources_keeps_the_recorded_indexes_in_order(tmp_path: Path) -> None:
    lock = _lock(
        tmp_path,
        "--index-url https://a/simple",
        "--extra-index-url https://b/simple",
        "--find-links https://c/w",
    )
    sources = package_sources(lock, vault=tmp_path / "absent", offline=False, where="b")
    assert sources.vault is None  # a vault that is not there is no source
    assert sources.describe() == (
        "no vault; index https://a/simple; extra index https://b/simple; find-links https://c/w"
    )


def test_offline_uses_the_vault_alone(tmp_path: Path) -> None:
    lock = _lock(tmp_path, "--index-url https://a/simple")
    sources = package_sources(lock, vault=tmp_path, offline=True, where="b")
    assert sources.offline and sources.index_url is None
    assert sources.extra_index_urls == () and sources.find_links == ()
    assert sources.describe() == f"vault {tmp_path}; offline: no index"


def test_offline_still_refuses_a_bad_lock(tmp_path: Path) -> None:
    with pytest.raises(BundleFormatError):
        package_sources(_lock(tmp_path, "-i http://a/"), vault=None, offline=True, where="b")
