"""Tests of repro.snapshot.vault.original: the original wheel of an installed distribution."""

from __future__ import annotations

import dataclasses
import hashlib
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from packaging.version import Version

from repro.snapshot.facts.indexcheck import IndexFile, IndexReport
from repro.snapshot.facts.installed import InstalledDist, list_installed
from repro.snapshot.vault.original import (
    fetch_from_indexes,
    file_url_path,
    local_wheels,
    original_at_hand,
    pip_download,
    wheel_matches_install,
)
from tests.snapshot.conftest import Venv
from tests.support.httpfiles import directory_server
from tests.support.wheels import record_row

DEMO = "repro-demo-wheel"


def _dist(venv: Venv, name: str) -> InstalledDist:
    (dist,) = [d for d in list_installed(venv.site_packages) if d.canonical_name == name]
    return dist


def _altered(wheel: Path, out: Path) -> Path:
    """`wheel` with demo_wheel/__init__.py changed and its RECORD row updated to match: the
    same name and version, but not the installed files."""
    out.mkdir(parents=True, exist_ok=True)
    target = out / wheel.name
    new_init = b'__version__ = "1.0+local"\n# another build\n'
    with zipfile.ZipFile(wheel) as src, zipfile.ZipFile(target, "w") as dst:
        for info in src.infolist():
            data = src.read(info)
            if info.filename == "demo_wheel/__init__.py":
                data = new_init
            elif info.filename.endswith(".dist-info/RECORD"):
                rows = [
                    record_row("demo_wheel/__init__.py", new_init).rstrip("\n")
                    if row.startswith("demo_wheel/__init__.py,")
                    else row
                    for row in data.decode().splitlines()
                ]
                data = ("\n".join(rows) + "\n").encode()
            dst.writestr(info, data)
    return target


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("file:///tmp/w/a-1.0-py3-none-any.whl", Path("/tmp/w/a-1.0-py3-none-any.whl")),
        ("file:///tmp/with%20space/x.whl", Path("/tmp/with space/x.whl")),
        ("file://localhost/srv/x.whl", Path("/srv/x.whl")),
        ("FILE:///srv/y.whl", Path("/srv/y.whl")),
        ("https://files.example/a-1.0-py3-none-any.whl", None),
        ("/tmp/w/a-1.0-py3-none-any.whl", None),
        ("", None),
    ],
)
def test_file_url_path(url: str, expected: Path | None) -> None:
    assert file_url_path(url) == expected


def test_local_wheels_by_name_and_version_at_one_level_or_all(tmp_path: Path) -> None:
    top, below, missing = tmp_path / "fl", tmp_path / "fl" / "sub", tmp_path / "absent"
    below.mkdir(parents=True)
    names = {
        top / "Foo_Bar-1.0-py3-none-any.whl": ("foo-bar", Version("1.0")),
        top / "foo_bar-1.0-cp311-cp311-linux_x86_64.whl": ("foo-bar", Version("1.0")),
        top / "six-1.16.0-py2.py3-none-any.whl": ("six", Version("1.16.0")),
        below / "six-1.17.0-py2.py3-none-any.whl": ("six", Version("1.17.0")),
    }
    for path in names:
        path.write_bytes(b"")
    (top / "not-a-wheel.whl").write_bytes(b"")  # no valid wheel name: left out
    (top / "six-1.16.0.tar.gz").write_bytes(b"")
    flat = local_wheels([missing, top], recursive=False)
    assert flat == {
        ("foo-bar", Version("1.0")): [
            top / "Foo_Bar-1.0-py3-none-any.whl",
            top / "foo_bar-1.0-cp311-cp311-linux_x86_64.whl",
        ],
        ("six", Version("1.16.0")): [top / "six-1.16.0-py2.py3-none-any.whl"],
    }
    deep = local_wheels([top], recursive=True)
    assert deep == {**flat, ("six", Version("1.17.0")): [below / "six-1.17.0-py2.py3-none-any.whl"]}


@pytest.mark.slow
def test_the_wheel_installed_from_matches_and_others_do_not(
    clean_env: Venv, demo_wheel: Path, tmp_path: Path
) -> None:
    demo = _dist(clean_env, DEMO)
    assert wheel_matches_install(demo_wheel, demo)
    assert not wheel_matches_install(demo_wheel, _dist(clean_env, "six"))
    assert not wheel_matches_install(_altered(demo_wheel, tmp_path / "alt"), demo)
    broken = tmp_path / demo_wheel.name
    broken.write_bytes(b"not a zip")
    assert not wheel_matches_install(broken, demo)


@pytest.mark.slow
def test_original_at_hand_from_the_file_url_then_find_links_then_the_cache(
    clean_env: Venv, demo_wheel: Path, tmp_path: Path
) -> None:
    demo = _dist(clean_env, DEMO)
    assert file_url_path(demo.direct_url_str or "") == demo_wheel
    assert original_at_hand(demo, {}, {}) == demo_wheel
    key = (DEMO, Version("1.0+local"))
    other = _altered(demo_wheel, tmp_path / "other")
    copy = tmp_path / "cache" / demo_wheel.name
    copy.parent.mkdir()
    copy.write_bytes(demo_wheel.read_bytes())
    unpinned = dataclasses.replace(demo, direct_url=None)
    assert original_at_hand(unpinned, {key: [other]}, {key: [copy]}) == copy
    assert original_at_hand(unpinned, {key: [copy]}, {}) == copy
    assert original_at_hand(unpinned, {key: [other]}, {}) is None
    assert original_at_hand(unpinned, {(DEMO, Version("2.0")): [copy]}, {}) is None
    bad_version = dataclasses.replace(unpinned, version="not a version")
    assert original_at_hand(bad_version, {key: [copy]}, {key: [copy]}) is None


@pytest.fixture
def simple_index(demo_wheel: Path, tmp_path: Path) -> Iterator[str]:
    """A PEP 503 index on 127.0.0.1 (http.server in a thread) serving demo_wheel."""
    root = tmp_path / "index"
    project = root / "simple" / DEMO
    project.mkdir(parents=True)
    (project / demo_wheel.name).write_bytes(demo_wheel.read_bytes())
    digest = hashlib.sha256(demo_wheel.read_bytes()).hexdigest()
    (project / "index.html").write_text(
        f'<html><body><a href="{demo_wheel.name}#sha256={digest}">{demo_wheel.name}</a>'
        "</body></html>\n"
    )
    (root / "simple" / "index.html").write_text(f'<a href="{DEMO}/">{DEMO}</a>\n')

    with directory_server(root) as url:
        yield f"{url}/simple/"


@pytest.mark.slow
def test_pip_download_from_an_index_names_what_it_could_not_get(
    clean_env: Venv, demo_wheel: Path, simple_index: str, tmp_path: Path
) -> None:
    dest = tmp_path / "dest"
    dest.mkdir()
    assert pip_download(clean_env.python, [], dest, indexes=[simple_index]) == []
    missing = pip_download(
        clean_env.python,
        [f"{DEMO}==1.0+local", "repro-no-such-dist==9.9", f"{DEMO}==7.0"],
        dest,
        indexes=[simple_index],
    )
    assert missing == ["repro-no-such-dist==9.9", f"{DEMO}==7.0"]
    assert [p.name for p in dest.iterdir()] == [demo_wheel.name]
    assert (dest / demo_wheel.name).read_bytes() == demo_wheel.read_bytes()


@pytest.mark.slow
def test_fetch_from_indexes_keeps_the_matching_wheel_and_warns_on_the_rest(
    clean_env: Venv, demo_wheel: Path, simple_index: str, tmp_path: Path
) -> None:
    demo = _dist(clean_env, DEMO)
    digest = hashlib.sha256(demo_wheel.read_bytes()).hexdigest()
    out = tmp_path / "out"
    out.mkdir()
    good = IndexFile(demo_wheel.name, demo_wheel.as_uri(), digest)
    warnings: list[str] = []
    fetched = fetch_from_indexes(
        [demo], out, [], IndexReport(found={DEMO: [good]}), None, None, warnings
    )
    assert fetched == {DEMO: out / demo_wheel.name} and warnings == []
    assert (out / demo_wheel.name).read_bytes() == demo_wheel.read_bytes()
    assert [p.name for p in out.iterdir()] == [demo_wheel.name]  # no staging left

    # a digest the index gives that the file lacks: the download is refused, then pip
    # fetches the pin from the index by name
    lying = IndexFile(demo_wheel.name, demo_wheel.as_uri(), "0" * 64)
    again = tmp_path / "again"
    again.mkdir()
    warnings = []
    fetched = fetch_from_indexes(
        [demo],
        again,
        [simple_index],
        IndexReport(found={DEMO: [lying]}),
        clean_env.python,
        None,
        warnings,
    )
    assert fetched == {DEMO: again / demo_wheel.name}
    assert len(warnings) == 1 and warnings[0].startswith(f"{DEMO}: download failed, will rebuild:")
    assert "differs from the index's" in warnings[0]

    # a wheel of the same name and version built otherwise is not kept
    other = _altered(demo_wheel, tmp_path / "other")
    third = tmp_path / "third"
    third.mkdir()
    warnings = []
    item = IndexFile(other.name, other.as_uri(), None)
    fetched = fetch_from_indexes(
        [demo], third, [], IndexReport(found={DEMO: [item]}), None, None, warnings
    )
    assert fetched == {}
    assert warnings == [
        f"{DEMO} 1.0+local: the index's wheel differs from the installed files; "
        "rebuilt from RECORD instead"
    ]
    assert list(third.iterdir()) == []
