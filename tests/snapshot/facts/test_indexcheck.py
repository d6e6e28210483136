"""Tests of repro.snapshot.facts.indexcheck: can the indexes serve the pins, for this target."""

from __future__ import annotations

import platform
import socket
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from repro.errors import ProbeError
from repro.snapshot.facts.indexcheck import (
    IndexFile,
    InterpreterFacts,
    check_index,
    generic_abis,
    interpreter_facts,
    select_files,
    tags_for,
)
from tests.support.httpfiles import directory_server

GLIBC_X86 = InterpreterFacts(
    "cpython", (3, 11), "linux", "x86_64", "linux-x86_64", "glibc", (2, 28)
)
TAGS = tags_for(GLIBC_X86)
SHA = "ab" * 32


@pytest.mark.parametrize(
    ("facts", "first", "included", "excluded"),
    [
        (
            GLIBC_X86,
            "cp311-cp311-manylinux_2_28_x86_64",
            ["cp311-abi3-manylinux2014_x86_64", "cp39-abi3-manylinux1_x86_64", "py3-none-any"],
            ["cp311-cp311-manylinux_2_29_x86_64", "cp312-cp312-manylinux_2_28_x86_64"],
        ),
        (
            InterpreterFacts(
                "cpython", (3, 12), "linux", "arm64", "linux-aarch64", "glibc", (2, 17)
            ),
            "cp312-cp312-manylinux_2_17_aarch64",
            ["cp312-cp312-manylinux2014_aarch64", "cp312-cp312-linux_aarch64"],
            ["cp312-cp312-manylinux_2_16_aarch64", "cp312-cp312-manylinux2010_aarch64"],
        ),
        (
            InterpreterFacts("cpython", (3, 11), "linux", "x86_64", "linux-x86_64"),
            "cp311-cp311-linux_x86_64",
            ["py311-none-any"],
            ["cp311-cp311-manylinux_2_17_x86_64"],
        ),
        (
            InterpreterFacts("cpython", (3, 11), "windows", "AMD64", "win-amd64"),
            "cp311-cp311-win_amd64",
            ["py3-none-win_amd64"],
            ["cp311-cp311-win32"],
        ),
    ],
)
def test_tags_for(
    facts: InterpreterFacts, first: str, included: list[str], excluded: list[str]
) -> None:
    tags = [str(t) for t in tags_for(facts)]
    assert tags[0] == first
    assert set(included) <= set(tags)
    assert not set(excluded) & set(tags)


def test_a_pypy_targets_tags_carry_no_abi_of_the_packing_interpreter() -> None:
    """A PyPy 3.10 target accepts pp310-pypy310_pp73 wheels; the ABI of the interpreter
    pack runs on (cp311 here) is nothing the target can load. Fails today: tags_for
    passes abis=None to packaging.tags.generic_tags, which fills in the running
    interpreter's ABI."""
    pypy = InterpreterFacts("pypy", (3, 10), "linux", "x86_64", "linux-x86_64", "glibc", (2, 17))
    tags = [str(t) for t in tags_for(pypy)]
    assert "pp310-none-manylinux_2_17_x86_64" in tags
    assert [t for t in tags if t.startswith("pp310-cp")] == []
    with_abi = InterpreterFacts(
        "pypy",
        (3, 10),
        "linux",
        "x86_64",
        "linux-x86_64",
        "glibc",
        (2, 17),
        ext_suffix=".pypy310-pp73-x86_64-linux-gnu.so",
    )
    tags = [str(t) for t in tags_for(with_abi)]
    assert tags[0] == "pp310-pypy310_pp73-manylinux_2_17_x86_64"
    assert "pp310-none-manylinux_2_17_x86_64" in tags
    assert [t for t in tags if t.startswith("pp310-cp")] == []


@pytest.mark.parametrize(
    ("suffix", "abis"),
    [
        (".pypy310-pp73-x86_64-linux-gnu.so", ["pypy310_pp73"]),
        (".cpython-312-x86_64-linux-gnu.so", ["cp312"]),
        (".cp312-win_amd64.pyd", ["cp312"]),
        (".graalpy-241-310-native-x86_64-linux.so", ["graalpy_241_310"]),
        (".so", []),
        (None, []),
    ],
)
def test_generic_abis_of_an_extension_suffix(suffix: str | None, abis: list[str]) -> None:
    assert generic_abis(suffix) == abis


def test_the_real_interpreters_abi_matches_packaging() -> None:
    """The target's suffix read by the real probe script gives the ABI packaging gives
    for the same (CPython) interpreter."""
    from packaging.tags import sys_tags

    facts = interpreter_facts(Path(sys.executable))
    assert generic_abis(facts.ext_suffix) == [next(iter(sys_tags())).abi]


def test_interpreter_facts_of_a_real_interpreter() -> None:
    facts = interpreter_facts(Path(sys.executable))
    assert facts.implementation == sys.implementation.name
    assert facts.python_version == sys.version_info[:2]
    assert facts.machine == platform.machine()
    assert facts.system == platform.system().lower()
    assert (facts.libc, facts.libc_version) == (
        "glibc",
        tuple(map(int, platform.libc_ver()[1].split(".")[:2])),
    )


@pytest.mark.parametrize(
    ("python", "message"),
    [
        ("/nonexistent/bin/python", r"cannot run /nonexistent/bin/python"),
        ("/bin/false", r"/bin/false failed to report its platform \(exit 1\)"),
        ("/bin/echo", r"/bin/echo printed unreadable platform facts"),
    ],
)
def test_an_interpreter_that_cannot_say_is_named(python: str, message: str) -> None:
    with pytest.raises(ProbeError, match=message):
        interpreter_facts(Path(python))


def _file(name: str) -> IndexFile:
    return IndexFile(name, f"https://files.example/{name}", SHA)


@pytest.mark.parametrize(
    ("filenames", "chosen", "has_wheel"),
    [
        (["Demo_Pkg-1.0-py3-none-any.whl", "demo-pkg-1.0.tar.gz"], 2, True),
        (["demo_pkg-1.0-cp311-cp311-manylinux_2_17_x86_64.whl"], 1, True),
        (["demo_pkg-1.0-cp312-cp312-manylinux_2_17_x86_64.whl"], 0, False),  # other Python
        (["demo_pkg-1.0-cp311-cp311-manylinux_2_34_x86_64.whl"], 0, False),  # newer glibc
        (["demo_pkg-1.0.tar.gz"], 1, False),  # an sdist only
        (["demo_pkg-1.0.1-py3-none-any.whl", "demo_pkg-1.0rc1-py3-none-any.whl"], 0, False),
        (["other-1.0-py3-none-any.whl", "not a file name", "demo_pkg-1.0-bad.whl"], 0, False),
        (["demo_pkg-1.0.0-py3-none-any.whl"], 1, True),  # 1.0.0 == 1.0
    ],
)
def test_select_files(filenames: list[str], chosen: int, has_wheel: bool) -> None:
    picked, wheel = select_files([_file(n) for n in filenames], "Demo.Pkg", "1.0", TAGS)
    assert (len(picked), wheel) == (chosen, has_wheel)


def _simple_tree(root: Path) -> Path:
    """A PEP 503 simple index: demo-pkg has a wheel and an sdist of 1.0, onlysdist an sdist."""
    (root / "demo-pkg").mkdir(parents=True)
    (root / "demo-pkg" / "index.html").write_text(
        "<!DOCTYPE html><html><body>\n"
        f'<a href="../../files/demo_pkg-1.0-py3-none-any.whl#sha256={SHA}">'
        "demo_pkg-1.0-py3-none-any.whl</a><br>\n"
        '<a href="/files/demo_pkg-1.0.tar.gz#md5=00">demo_pkg-1.0.tar.gz</a><br>\n'
        '<a href="/files/demo_pkg-0.9-py3-none-any.whl">demo_pkg-0.9-py3-none-any.whl</a>\n'
        "</body></html>\n"
    )
    (root / "onlysdist").mkdir()
    (root / "onlysdist" / "index.html").write_text(
        '<a href="/files/onlysdist-2.0.tar.gz">onlysdist-2.0.tar.gz</a>\n'
    )
    return root


@pytest.fixture
def http_index(tmp_path: Path) -> Iterator[str]:
    root = tmp_path / "www"
    _simple_tree(root / "simple")
    with directory_server(root) as url:
        yield f"{url}/simple/"


def test_check_index_against_a_real_simple_index(http_index: str) -> None:
    pins = [("Demo_Pkg", "1.0"), ("onlysdist", "2.0"), ("absent", "1.0"), ("demo-pkg", "0.8")]
    report = check_index(pins[:3], [http_index], tags=TAGS, jobs=2)
    host = http_index.removesuffix("/simple/")
    assert report.found == {
        "demo-pkg": [
            IndexFile(
                "demo_pkg-1.0-py3-none-any.whl", f"{host}/files/demo_pkg-1.0-py3-none-any.whl", SHA
            ),
            IndexFile("demo_pkg-1.0.tar.gz", f"{host}/files/demo_pkg-1.0.tar.gz", None),
        ]
    }
    assert report.serves("Demo.Pkg") and not report.serves("onlysdist")
    assert report.missing == ["onlysdist", "absent"]
    assert report.index_of == {"demo-pkg": http_index}
    assert report.errors == []
    assert check_index(pins[3:], [http_index], tags=TAGS).missing == ["demo-pkg"]


def test_with_sdists_an_sdist_counts(http_index: str) -> None:
    report = check_index([("onlysdist", "2.0")], [http_index], tags=TAGS, sdists=True)
    assert [f.filename for f in report.found["onlysdist"]] == ["onlysdist-2.0.tar.gz"]


def test_a_file_index_is_read_from_disk(tmp_path: Path) -> None:
    root = _simple_tree(tmp_path / "simple")
    report = check_index([("demo-pkg", "1.0")], [root.as_uri()], tags=TAGS)
    (wheel, _sdist) = report.found["demo-pkg"]
    assert wheel.sha256 == SHA
    assert wheel.url == (tmp_path / "files" / "demo_pkg-1.0-py3-none-any.whl").as_uri()


def test_an_unreachable_index_is_reported_once_and_the_next_one_asked(
    tmp_path: Path, http_index: str
) -> None:
    with socket.socket() as sock:  # a port nobody listens on
        sock.bind(("127.0.0.1", 0))
        dead = f"http://127.0.0.1:{sock.getsockname()[1]}/simple/"
    pins = [("demo-pkg", "1.0"), ("onlysdist", "2.0"), ("absent", "1")]
    report = check_index(pins, [dead, http_index], tags=TAGS, timeout=5)
    assert len(report.errors) == 1
    assert report.errors[0].startswith(f"{dead}: cannot connect")
    assert report.index_of == {"demo-pkg": http_index}
