"""Tests of repro.bundle.lock: requirements.lock and pylock.toml, rendered and read."""

from __future__ import annotations

from pathlib import Path

import pytest
from packaging.pylock import Pylock
from packaging.requirements import Requirement

from repro import _toml
from repro.bundle.lock import (
    DistFile,
    IndexConfig,
    LockFile,
    LockOption,
    Pin,
    check_pylock,
    parse_requirements_lock,
    read_requirements_lock,
    render_pins_only,
    render_pylock,
    render_requirements_lock,
)
from repro.errors import InputError, PylockError

H1, H2, H3 = "1" * 64, "2" * 64, "3" * 64
PINS = (Pin("torch", "2.9.0+cu130"), Pin("numpy", "2.1.0"))
INDEXES = IndexConfig(
    index_url="https://pypi.org/simple",
    extra_index_urls=("https://download.pytorch.org/whl/cu130",),
    find_links=("https://h/links",),
    local=("file:///src/wheels",),
)


def test_render_then_parse_round_trips_with_hashes() -> None:
    text = render_requirements_lock(
        PINS, INDEXES, hashes={"Torch": [H2, H1, H1], "numpy": [H3]}, source="/v"
    )
    lock = parse_requirements_lock(text, source="requirements.lock")
    assert lock.pins == (Pin("numpy", "2.1.0"), Pin("torch", "2.9.0+cu130"))  # sorted
    assert lock.hashes == {"numpy": (H3,), "torch": (H1, H2)}
    assert lock.indexes == IndexConfig(
        "https://pypi.org/simple", ("https://download.pytorch.org/whl/cu130",), ("https://h/links",)
    )
    assert [o.line for o in lock.options] == [5, 6, 7]
    assert "# source-only location, not portable: file:///src/wheels" in text
    pins = [Requirement(line.rstrip(" \\")) for line in text.splitlines() if "==" in line]
    assert [(r.name, str(r.specifier)) for r in pins] == [
        ("numpy", "==2.1.0"),
        ("torch", "==2.9.0+cu130"),
    ]


def test_hashes_only_when_every_pin_has_one() -> None:
    text = render_requirements_lock(PINS, IndexConfig(), hashes={"torch": [H1]})
    assert "--hash" not in text
    assert parse_requirements_lock(text, source="l").hashes == {}


def test_render_pins_only_adds_extra_hashes_once() -> None:
    lock = LockFile(IndexConfig(index_url="https://x"), PINS, {"torch": (H1,)})
    assert render_pins_only(lock, {"torch": (H1, H2), "numpy": (H3,)}) == (
        f"torch==2.9.0+cu130 --hash=sha256:{H1} --hash=sha256:{H2}\n"
        f"numpy==2.1.0 --hash=sha256:{H3}\n"
    )


def test_short_options_and_comments() -> None:
    text = "-i https://a\n-f=https://b  # links\n# comment\nA_B==1.0 # trailing\n"
    lock = parse_requirements_lock(text, source="l")
    assert lock.options == (
        LockOption(1, "--index-url", "https://a"),
        LockOption(2, "--find-links", "https://b"),
    )
    assert lock.pins == (Pin("a-b", "1.0"),)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("--index-url\n", "l:1: option --index-url needs exactly one value"),
        ("--trusted-host h\n", "l:1: unsupported option --trusted-host"),
        ("a>=1\n", "l:1: 'a>=1' is not an exact pin"),
        ("-e ./src\n", "l:1: option -e needs exactly one value|unsupported option -e"),
        ("a==${V}\n", r"l:1: 'a==\$\{V\}' is not an exact pin"),
        ("a==1\nA==2\n", "l:2: a is pinned twice \\(first on line 1\\)"),
        ("a==1 --hash=md5:00\n", "l:1: '--hash=md5:00' is not --hash=sha256:<64 hex>"),
        (f"a==1 --hash=sha256:{H1}\nb==2\n", "l: some pins have --hash and some do not \\(b\\)"),
    ],
)
def test_malformed_locks(text: str, message: str) -> None:
    with pytest.raises(InputError, match=message):
        parse_requirements_lock(text, source="l")


def test_read_requirements_lock(tmp_path: Path) -> None:
    path = tmp_path / "requirements.lock"
    path.write_text("a==1\n")
    assert read_requirements_lock(path).pins == (Pin("a", "1"),)
    path.write_bytes(b"\xff\n")
    with pytest.raises(InputError, match=f"cannot read {path}"):
        read_requirements_lock(path)


def test_render_pylock_is_read_by_packaging() -> None:
    files = {
        "torch": [
            DistFile(
                "torch-2.9.0+cu130-cp312-cp312-linux_x86_64.whl",
                H1,
                url="https://dl/t.whl",
                size=10,
            )
        ],
        "numpy": [
            DistFile("numpy-2.1.0.zip", H2, url="https://f/n.zip"),
            DistFile("numpy-2.1.0.tar.gz", H3, url="https://f/n.tar.gz"),
        ],
    }
    text = render_pylock(
        (*PINS, Pin("six", "1.16.0")),
        INDEXES,
        requires_python=">=3.10",
        files=files,
        index_of={"torch": "https://download.pytorch.org/whl/cu130"},
    )
    lock = Pylock.from_dict(_toml.loads(text))
    lock.validate()
    by_name = {str(p.name): p for p in lock.packages}
    assert sorted(by_name) == ["numpy", "torch"]
    assert (
        by_name["numpy"].sdist is not None and by_name["numpy"].sdist.name == "numpy-2.1.0.tar.gz"
    )
    assert by_name["torch"].index == "https://download.pytorch.org/whl/cu130"
    wheels = by_name["torch"].wheels
    assert wheels is not None and wheels[0].hashes == {"sha256": H1} and wheels[0].size == 10
    assert _toml.loads(text)["tool"]["repro"]["unlisted"] == ["six"]


def test_check_pylock_refuses_what_packaging_refuses() -> None:
    with pytest.raises(PylockError, match=r"x\.toml: not a valid PEP 751 lock"):
        check_pylock('lock-version = "1.0"\npackages = "no"\n', "x.toml")
    with pytest.raises(PylockError, match=r"x\.toml: not a valid PEP 751 lock"):
        check_pylock("lock-version = ", "x.toml")
