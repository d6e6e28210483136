"""repro.wheel.audit: what a wheel may write and what repro reads as one, through
repro's own installer (`install_wheel`, `install_from_vault`): hostile member names,
destinations the wheel does not own, two wheels writing one path, bounds on sizes and
ratios, zips whose headers disagree, malformed metadata. Each is refused, naming the
wheel, the member and the rule, before any byte reaches the venv."""

from __future__ import annotations

import hashlib
import os
import re
import stat
import zipfile
from pathlib import Path
from typing import Any

import pytest

from repro.errors import InstallError
from repro.install.venv.vault import (
    describe_interpreter,
    install_from_vault,
)
from repro.wheel.install import install_wheel
from tests.support.wheels import (
    RawMember,
    raw_member,
    raw_members,
    raw_wheel,
    raw_zip,
    wheel_files,
    write_wheel,
)
from tests.wheel.conftest import make_wheel, nothing_of_demo_in, scheme_of


@pytest.mark.parametrize(
    "member",
    ["../escape.py", "/abs/path.py", "demo/../../escape.py", "demo\\..\\x.py", "demo/./x.py"],
)
def test_a_member_that_could_leave_its_directory_is_refused(
    tmp_path: Path, venv: Path, member: str
) -> None:
    wheel = make_wheel(tmp_path, files={"demo/__init__.py": b"", member: b"owned\n"})
    with pytest.raises(InstallError, match="is not a safe relative path"):
        install_wheel(wheel, scheme_of(venv))
    assert not (tmp_path / "escape.py").exists()
    # the good member before the bad one was not written either
    assert nothing_of_demo_in(venv)


def test_a_symlink_member_and_an_unknown_scheme_are_refused(tmp_path: Path, venv: Path) -> None:
    link = make_wheel(
        tmp_path,
        files={"demo/__init__.py": b"", "demo/link": b"/etc/shadow"},
        modes={"demo/link": stat.S_IFLNK | 0o777},
    )
    with pytest.raises(InstallError, match="is a symbolic link"):
        install_wheel(link, scheme_of(venv))
    assert nothing_of_demo_in(venv)
    other = tmp_path / "other"
    other.mkdir()
    odd = make_wheel(other, files={"demo/__init__.py": b"", "demo-1.0.data/etc/passwd": b"x"})
    with pytest.raises(InstallError, match="unknown scheme"):
        install_wheel(odd, scheme_of(venv))
    assert nothing_of_demo_in(venv)


def test_a_bad_entry_point_refuses_the_wheel_before_any_file(tmp_path: Path, venv: Path) -> None:
    wheel = make_wheel(
        tmp_path, entry_points="[console_scripts]\ndemo-cli = demo:main\n../escape = demo:main\n"
    )
    with pytest.raises(InstallError, match="bad entry point"):
        install_wheel(wheel, scheme_of(venv))
    assert nothing_of_demo_in(venv)
    assert not (venv / "escape").exists()


# --- what a wheel may write (repro.wheel.audit) -----------------------------------


def venv_own_files(venv: Path) -> dict[str, tuple[bool, bytes]]:
    """The venv's own files as `python -m venv` made them: (a symlink?, its bytes)."""
    own = [venv / "pyvenv.cfg", *sorted((venv / "bin").iterdir())]
    return {
        p.name: (p.is_symlink(), os.readlink(p).encode() if p.is_symlink() else p.read_bytes())
        for p in own
    }


OWNED_BY_THE_VENV = [
    ({"demo-1.0.data/data/pyvenv.cfg": b"home = /tmp/evil\n"}, "", "pyvenv.cfg is the venv's own"),
    ({"demo-1.0.data/scripts/python": b"#!/bin/sh\n"}, "", "venv's own"),
    ({"demo-1.0.data/scripts/python3": b"#!/bin/sh\n"}, "", "venv's own"),
    ({"demo-1.0.data/data/bin/python3.11": b"#!/bin/sh\n"}, "", "venv's own"),
    ({"demo-1.0.data/data/bin/activate": b"evil\n"}, "", "venv's own"),
    ({"demo-1.0.data/scripts/Activate.ps1": b"evil\n"}, "", "venv's own"),
    ({}, "[console_scripts]\npython3 = demo:main\n", "venv's own"),
    ({}, "[gui_scripts]\nactivate = demo:main\n", "venv's own"),
    ({"demo-1.0.data/data/.repro/state.toml": b"x"}, "", "repro's own"),
    ({"demo-1.0.data/data/lib64": b"x"}, "", "a directory of the venv itself"),
    ({"demo-1.0.data/data/bin": b"x"}, "", "a directory of the venv itself"),
    ({"other-1.0.dist-info/METADATA": b"Name: other\n"}, "", "another distribution's .dist-info"),
    (
        {"demo-1.0.data/purelib/other-1.0.dist-info/RECORD": b""},
        "",
        "another distribution's .dist-info",
    ),
    ({"demo/x.py": b"", "demo-1.0.data/purelib/demo/x.py": b""}, "", "also written by its member"),
    ({"demo": b"", "demo/x.py": b""}, "", "is a directory of"),
]


@pytest.mark.parametrize(
    ("files", "entry_points", "rule"),
    OWNED_BY_THE_VENV,
    ids=[
        "pyvenv.cfg", "scripts-python", "scripts-python3", "data-bin-python3.11",
        "data-bin-activate", "Activate.ps1", "entry-point-python3", "entry-point-activate",
        "repro-state",
        "lib64", "bin", "other-dist-info", "other-dist-info-via-purelib", "twice-in-one-wheel",
        "file-and-directory",
    ],
)  # fmt: skip
def test_a_wheel_writing_what_it_does_not_own_is_refused_before_any_byte(
    tmp_path: Path, venv: Path, files: dict[str, bytes], entry_points: str, rule: str
) -> None:
    before = venv_own_files(venv)
    wheel = write_wheel(
        tmp_path,
        wheel_files(
            files={"demo/__init__.py": b"def main(): pass\n", **files}, entry_points=entry_points
        ),
    )
    with pytest.raises(InstallError, match=re.escape(rule)) as caught:
        install_wheel(wheel, scheme_of(venv))
    assert "demo-1.0-py3-none-any.whl" in str(caught.value)
    assert venv_own_files(venv) == before
    assert nothing_of_demo_in(venv)


def _two(vault: Path, first: dict[str, bytes], second: dict[str, bytes]) -> dict[str, Path]:
    (vault / "a").mkdir()
    (vault / "b").mkdir()
    alpha = write_wheel(vault / "a", wheel_files("alpha", files=first), "alpha")
    beta = write_wheel(vault / "b", wheel_files("beta", files=second), "beta")
    return {"alpha": alpha, "beta": beta}


def _digests(wheels: dict[str, Path]) -> dict[str, tuple[str]]:
    return {pin: (hashlib.sha256(p.read_bytes()).hexdigest(),) for pin, p in wheels.items()}


@pytest.mark.parametrize(
    "second",
    [
        {"shared/x.py": b"B\n"},
        {"beta-1.0.data/purelib/shared/x.py": b"B\n"},
        {"beta-1.0.data/data/lib64/python@V@/site-packages/shared/x.py": b"B\n"},
        {"shared/x.py/inner.py": b"B\n"},
    ],
    ids=["same-path", "via-purelib", "via-lib64", "file-as-directory"],
)
@pytest.mark.parametrize("reverse", [False, True], ids=["in-order", "reversed"])
def test_two_wheels_writing_one_path_are_refused_naming_both(
    tmp_path: Path, venv: Path, second: dict[str, bytes], reverse: bool
) -> None:
    python = venv / "bin" / "python"
    minor = "{}.{}".format(*describe_interpreter(python).version)
    second = {k.replace("@V@", minor): v for k, v in second.items()}
    wheels = _two(tmp_path, {"shared/x.py": b"A\n"}, second)
    if reverse:
        wheels = dict(reversed(list(wheels.items())))
    with pytest.raises(InstallError) as caught:
        install_from_vault(python, wheels, _digests(wheels))
    message = str(caught.value)
    assert "alpha 1.0" in message and "beta" in message, message
    assert not list(scheme_of(venv).purelib.glob("shared")), "refused before any byte"
    assert not list(scheme_of(venv).purelib.glob("alpha*"))


# --- bounds ---------------------------------------------------------------------------


def test_a_deflate_bomb_is_refused_naming_the_member(tmp_path: Path, venv: Path) -> None:
    files = {"demo/__init__.py": b"", "demo/zeros.bin": bytes(64 * 2**20)}
    wheel = write_wheel(tmp_path, wheel_files(files=files), compression=zipfile.ZIP_DEFLATED)
    assert wheel.stat().st_size < 2**20
    with pytest.raises(InstallError, match=r"'demo/zeros\.bin': inflates .* \(more than 200x\)"):
        install_wheel(wheel, scheme_of(venv))
    assert nothing_of_demo_in(venv)


def test_a_small_wheel_of_text_is_fine_whatever_its_ratio(tmp_path: Path, venv: Path) -> None:
    files = {"demo/__init__.py": b"", "demo/table.txt": b"0123456789abcdef\n" * 200_000}
    wheel = write_wheel(tmp_path, wheel_files(files=files), compression=zipfile.ZIP_DEFLATED)
    assert (3 * 2**20) / wheel.stat().st_size > 200
    install_wheel(wheel, scheme_of(venv))
    assert (scheme_of(venv).purelib / "demo/table.txt").read_bytes() == files["demo/table.txt"]


def _raw_demo(extra: dict[str, bytes], method: int = zipfile.ZIP_STORED) -> list[RawMember]:
    return raw_members(wheel_files(files={"demo/__init__.py": b"", **extra}), method)


def test_many_central_entries_aliasing_one_stored_member_are_refused(
    tmp_path: Path, venv: Path
) -> None:
    """The issue's example: 300 names in the central directory, one stored member's
    bytes; before, each was copied (the disk filled, exit 0)."""
    big = bytes(2**20)
    members = _raw_demo({"demo/big.bin": big})
    target = next(m for m in members if m.name == "demo/big.bin")
    aliases = []
    offset = 0
    for member in members:
        if member is target:
            break
        offset += 30 + len(member.name.encode()) + len(member.data)
    for index in range(300):
        alias = raw_member(f"demo/copy{index}.bin", big)
        alias.declared = {"offset": offset}
        aliases.append(alias)
    wheel = raw_wheel(tmp_path, members, aliases)
    with pytest.raises(InstallError, match=r"local header names another member|overlap"):
        install_wheel(wheel, scheme_of(venv))
    same = raw_member("demo/big.bin", big)
    same.declared = {"offset": offset}
    wheel = raw_wheel(tmp_path, members, [same])
    with pytest.raises(InstallError, match="listed twice in the central directory"):
        install_wheel(wheel, scheme_of(venv))
    assert nothing_of_demo_in(venv)


def test_a_member_inside_another_members_bytes_is_refused(tmp_path: Path, venv: Path) -> None:
    """`inner`'s own local header agrees with its central entry, but its bytes lie inside
    `outer`'s stored data: the same bytes twice."""
    inner = raw_member("demo/inner.py", b"INNER = 1\n")
    inner_local = b"".join(raw_zip([inner]).partition(b"PK\x01\x02")[:1])
    files = {"demo/outer.bin": inner_local, "demo/inner.py": b"INNER = 1\n"}
    members = _raw_demo(files)
    offsets = {}
    at = 0
    for member in members:
        offsets[member.name] = at
        at += 30 + len(member.name.encode()) + len(member.data)
    members = [m for m in members if m.name != "demo/inner.py"]
    inner.declared = {"offset": offsets["demo/outer.bin"] + 30 + len(b"demo/outer.bin")}
    wheel = raw_wheel(tmp_path, members, [inner])
    with pytest.raises(InstallError, match=r"'demo/inner\.py': its bytes overlap those of"):
        install_wheel(wheel, scheme_of(venv))
    assert nothing_of_demo_in(venv)


@pytest.mark.parametrize(
    ("where", "change", "rule"),
    [
        ("local", {"usize": 5}, "local header's CRC-32 or sizes differ"),
        ("local", {"crc": 1}, "local header's CRC-32 or sizes differ"),
        ("local", {"method": 8}, "another compression method"),
        ("local", {"name": "demo/other.py"}, "names another member"),
        ("both", {"csize": 2**30, "usize": 2**30}, "runs past the members' area"),
        ("declared", {"method": 12}, "compression method 12"),
    ],
    ids=["size", "crc", "method", "name", "past-the-end", "bzip2"],
)
def test_local_headers_and_the_central_directory_must_agree(
    tmp_path: Path, venv: Path, where: str, change: dict[str, object], rule: str
) -> None:
    members = _raw_demo({"demo/data.bin": b"payload " * 100})
    target = next(m for m in members if m.name == "demo/data.bin")
    for side in ("local", "declared") if where == "both" else (where,):
        getattr(target, side).update(change)
    wheel = raw_wheel(tmp_path, members)
    with pytest.raises(InstallError, match=re.escape(rule)):
        install_wheel(wheel, scheme_of(venv))
    assert nothing_of_demo_in(venv)


# --- malformed wheels: an InstallError, never a traceback ----------------------------------


def _flip_in(data: bytes, needle: bytes) -> bytes:
    at = data.index(needle) + 2
    return data[:at] + bytes([data[at] ^ 0xFF]) + data[at + 1 :]


def test_malformed_wheels_end_in_install_errors(tmp_path: Path, venv: Path) -> None:
    scheme = scheme_of(venv)
    cases: dict[str, tuple[Path, str]] = {}

    def case(label: str, rule: str, members: dict[str, bytes], **kwargs: Any) -> Path:
        (tmp_path / label).mkdir()
        path = write_wheel(tmp_path / label, members, **kwargs)
        cases[label] = (path, rule)
        return path

    not_zip = case("not-a-zip", "not a readable zip", {})
    not_zip.write_bytes(b"this is not a zip file at all\n" * 10)
    no_wheel = wheel_files()
    del no_wheel["demo-1.0.dist-info/WHEEL"]
    case("no-WHEEL", "demo-1.0.dist-info/WHEEL: missing", no_wheel)
    bad_crc = case(
        "bad-crc", "member 'demo/__init__.py'",
        wheel_files(files={"demo/__init__.py": b"VALUE = 12345678\n" * 50}),
        compression=zipfile.ZIP_DEFLATED,
    )  # fmt: skip
    data = bad_crc.read_bytes()
    at = data.index(b"demo/__init__.py") + len(b"demo/__init__.py") + 5
    bad_crc.write_bytes(data[:at] + bytes([data[at] ^ 0x01]) + data[at + 1 :])
    case("ini", "entry_points.txt: not UTF-8 INI", wheel_files(entry_points="no section\n"))
    case(
        "nul",
        "bad entry point",
        wheel_files(entry_points="[console_scripts]\nde\0mo = demo:main\n"),
    )
    case(
        "code",
        "bad entry point",
        wheel_files(entry_points="[console_scripts]\nx = os;import evil:main\n"),
    )
    case("record-utf8", "RECORD: not UTF-8 CSV", wheel_files(record=b"demo/\xff,,\n"))
    fields = wheel_files(record=b"demo/__init__.py,x\n")
    case("record-fields", "RECORD:1: expected 3 fields", fields)
    case(
        "wheel-version",
        "Wheel-Version",
        {**wheel_files(), "demo-1.0.dist-info/WHEEL": b"Wheel-Version: 9.0\n"},
    )
    # a central directory entry "needs version 8.4" to extract: zipfile raises
    # NotImplementedError (found by tests/wheel/test_install_fuzz.py)
    version = case("zip-version", "a zip feature no installer reads", wheel_files())
    data = version.read_bytes()
    at = data.index(b"PK\x01\x02") + 6  # the first entry's "version needed to extract"
    version.write_bytes(data[:at] + (84).to_bytes(2, "little") + data[at + 2 :])
    (tmp_path / "nul-name").mkdir()  # zipfile would cut the name at the NUL: "demo/x.py"
    nul = wheel_files(files={"demo/__init__.py": b"", "demo/x.py\0.txt": b"X = 1\n"})
    cases["nul-name"] = (raw_wheel(tmp_path / "nul-name", raw_members(nul)), "safe relative")
    for label, (path, rule) in cases.items():
        with pytest.raises(InstallError, match=re.escape(rule)):
            install_wheel(path, scheme)
        assert nothing_of_demo_in(venv), label
