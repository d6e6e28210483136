"""Tests of repro.snapshot.facts.installed: installed distributions read from disk."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from repro.errors import InputError, ProbeError
from repro.snapshot.facts.installed import (
    list_installed,
    read_dist,
    read_metadata_headers,
    read_metadata_name_version,
    scheme_paths,
)


def _dist_info(site: Path, name: str, metadata: str, **extra: str) -> Path:
    dist_info = site / name
    dist_info.mkdir(parents=True)
    (dist_info / "METADATA").write_text(metadata)
    for filename, text in extra.items():
        (dist_info / filename).write_text(text)
    return dist_info


def test_headers_stop_at_the_description(tmp_path: Path) -> None:
    info = _dist_info(
        tmp_path,
        "demo-1.0.dist-info",
        "Metadata-Version: 2.1\r\nName: Demo\r\nVersion: 1.0\r\n\r\nName: not-a-header\n",
    )
    headers = read_metadata_headers(info)
    assert headers.get_all("Name") == ["Demo"]
    assert read_metadata_name_version(info) == ("Demo", "1.0")


@pytest.mark.parametrize("metadata", ["Name: demo\n", "Version: 1.0\n", "Name:\nVersion: 1\n"])
def test_metadata_without_name_or_version_is_named(tmp_path: Path, metadata: str) -> None:
    info = _dist_info(tmp_path, "demo-1.0.dist-info", metadata)
    with pytest.raises(InputError, match=r"demo-1\.0\.dist-info/METADATA: no Name or Version"):
        read_metadata_name_version(info)


def test_missing_metadata_is_named(tmp_path: Path) -> None:
    (tmp_path / "demo-1.0.dist-info").mkdir()
    with pytest.raises(InputError, match=r"demo-1\.0\.dist-info/METADATA: cannot read"):
        read_metadata_headers(tmp_path / "demo-1.0.dist-info")


def test_an_editable_direct_url_is_read_and_its_credentials_dropped(tmp_path: Path) -> None:
    direct = {"url": "https://user:pa55w0rd@git.example/demo", "dir_info": {"editable": True}}
    info = _dist_info(
        tmp_path,
        "demo-1.0.dist-info",
        "Name: Demo_Pkg\nVersion: 1.0\n",
        **{"direct_url.json": json.dumps(direct), "INSTALLER": "uv\n"},
    )
    dist = read_dist(info, tmp_path)
    assert (dist.name, dist.canonical_name, dist.version) == ("Demo_Pkg", "demo-pkg", "1.0")
    assert dist.editable
    assert dist.installer == "uv"
    assert dist.direct_url_str is not None
    assert "pa55w0rd" not in dist.direct_url_str
    assert dist.direct_url_str.endswith("git.example/demo")


def test_a_direct_url_that_is_not_json_is_named(tmp_path: Path) -> None:
    info = _dist_info(
        tmp_path, "demo-1.0.dist-info", "Name: d\nVersion: 1\n", **{"direct_url.json": "{oops"}
    )
    with pytest.raises(InputError, match=r"demo-1\.0\.dist-info/direct_url\.json: not JSON"):
        read_dist(info, tmp_path)


def test_list_installed_sorts_by_canonical_name_and_skips_files(tmp_path: Path) -> None:
    _dist_info(tmp_path, "zeta-1.dist-info", "Name: zeta\nVersion: 1\n")
    _dist_info(tmp_path, "Alpha_B-2.dist-info", "Name: Alpha_B\nVersion: 2\n")
    (tmp_path / "stray-1.dist-info").write_text("a file, not a directory")
    _dist_info(tmp_path, "old-1.egg-info", "Name: old\nVersion: 1\n")
    dists = list_installed(tmp_path)
    assert [(d.name, d.version, d.editable, d.installer) for d in dists] == [
        ("Alpha_B", "2", False, None),
        ("zeta", "1", False, None),
    ]
    with pytest.raises(InputError, match="nowhere: not a directory"):
        list_installed(tmp_path / "nowhere")


@pytest.mark.slow
def test_a_real_venv_is_read_as_its_own_pip_sees_it(tmp_path: Path) -> None:
    root = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(root)], check=True)
    python = root / "bin" / "python"
    scheme = scheme_paths(python)
    assert scheme.scripts == root / "bin"
    assert scheme.data == root
    listed = subprocess.run(
        [str(python), "-m", "pip", "list", "--format=json", "--disable-pip-version-check"],
        capture_output=True,
        text=True,
        check=True,
    )
    expected = {(d["name"].lower(), d["version"]) for d in json.loads(listed.stdout)}
    dists = list_installed(scheme.purelib)
    assert {(d.canonical_name, d.version) for d in dists} == expected
    assert all(d.site_packages == scheme.purelib for d in dists)


@pytest.mark.parametrize(
    ("python", "message"),
    [
        ("/nonexistent/python", "cannot run /nonexistent/python"),
        ("/bin/false", r"/bin/false failed to report its install scheme \(exit 1\)"),
        ("/bin/echo", "/bin/echo printed an unreadable install scheme"),
    ],
)
def test_an_interpreter_that_cannot_say_its_scheme_is_named(python: str, message: str) -> None:
    with pytest.raises(ProbeError, match=message):
        scheme_paths(Path(python))
