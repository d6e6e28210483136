"""repro's own wheel installer (repro.install.wheelinstall, repro.install.vaultinstall)
on wheels built here with zipfile: every scheme, scripts, entry points, stored and
deflated members, hostile member names. The byte-for-byte comparison with uv and pip on
real PyPI wheels is tests/test_installer_parity.py."""

from __future__ import annotations

import base64
import csv
import hashlib
import os
import re
import stat
import subprocess
import sys
import zipfile
from pathlib import Path
from typing import Any

import pytest

from repro.bundle.lock import Pin
from repro.errors import InstallError
from repro.install.vaultinstall import (
    choose_wheels,
    describe_interpreter,
    install_from_vault,
    supported_tags,
    venv_scheme,
)
from repro.install.wheelinstall import Scheme, install_wheel, shebang
from tests.hostilewheels import (
    RawMember,
    raw_member,
    raw_members,
    raw_wheel,
    raw_zip,
    record_row,
    wheel_files,
    write_wheel,
)


def record_of(files: dict[str, bytes]) -> bytes:
    rows = []
    for name, data in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        rows.append(f"{name},sha256={digest},{len(data)}")
    return ("\n".join(rows) + "\n").encode()


def make_wheel(
    directory: Path,
    name: str = "demo",
    version: str = "1.0",
    *,
    files: dict[str, bytes] | None = None,
    purelib: bool = True,
    entry_points: str = "",
    compression: int = zipfile.ZIP_STORED,
    modes: dict[str, int] | None = None,
    tag: str = "py3-none-any",
) -> Path:
    dist_info = f"{name}-{version}.dist-info"
    members = dict(files if files is not None else {f"{name}/__init__.py": b"VALUE = 1\n"})
    members[f"{dist_info}/METADATA"] = (
        f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n".encode()
    )
    root = "true" if purelib else "false"
    wheel_meta = f"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: {root}\nTag: {tag}\n"
    members[f"{dist_info}/WHEEL"] = wheel_meta.encode()
    if entry_points:
        members[f"{dist_info}/entry_points.txt"] = entry_points.encode()
    record = record_of(members) + f"{dist_info}/RECORD,,\n".encode()
    members[f"{dist_info}/RECORD"] = record
    path = directory / f"{name}-{version}-{tag}.whl"
    with zipfile.ZipFile(path, "w", compression) as archive:
        for member, data in members.items():
            info = zipfile.ZipInfo(member, date_time=(2020, 1, 1, 0, 0, 0))
            info.compress_type = compression
            info.external_attr = ((modes or {}).get(member, 0o644) | stat.S_IFREG) << 16
            archive.writestr(info, data)
    return path


@pytest.fixture()
def venv(tmp_path: Path) -> Path:
    target = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(target)], check=True)
    return target


def scheme_of(venv: Path) -> Scheme:
    python = venv / "bin" / "python"
    return venv_scheme(python, describe_interpreter(python))


def read_record(scheme: Scheme, dist_info: str) -> dict[str, tuple[str, str]]:
    text = (scheme.purelib / dist_info / "RECORD").read_text()
    return {row[0]: (row[1], row[2]) for row in csv.reader(text.splitlines())}


@pytest.mark.parametrize(
    "compression", [zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED], ids=["stored", "deflated"]
)
def test_every_scheme_scripts_and_entry_points(
    tmp_path: Path, venv: Path, compression: int
) -> None:
    files = {
        "demo/__init__.py": b"def main():\n    print('demo main')\n    return 0\n",
        "demo/tool.so": b"\x7fELF not really",
        "demo-1.0.data/scripts/hello": b"#!python\nimport sys\nprint('hello', sys.prefix)\n",
        "demo-1.0.data/scripts/plain.sh": b"#!/bin/sh\necho plain\n",
        "demo-1.0.data/headers/demo.h": b"#define DEMO 1\n",
        "demo-1.0.data/data/share/demo/notes.txt": b"notes\n",
        "demo-1.0.data/purelib/demo_extra.py": b"X = 2\n",
    }
    wheel = make_wheel(
        tmp_path,
        files=files,
        purelib=False,
        compression=compression,
        entry_points="[console_scripts]\ndemo-cli = demo:main\n",
        modes={"demo/tool.so": 0o755},
    )
    scheme = scheme_of(venv)
    installed = install_wheel(wheel, scheme)
    assert (installed.name, installed.version) == ("demo", "1.0")
    assert (scheme.platlib / "demo" / "tool.so").read_bytes() == files["demo/tool.so"]
    assert os.access(scheme.platlib / "demo" / "tool.so", os.X_OK)
    assert not os.access(scheme.platlib / "demo" / "__init__.py", os.X_OK)
    assert (scheme.purelib / "demo_extra.py").read_bytes() == b"X = 2\n"
    (header,) = (venv / "include" / "site").glob("python*/demo/demo.h")
    assert header.read_bytes() == b"#define DEMO 1\n"
    assert (venv / "share/demo/notes.txt").read_bytes() == b"notes\n"
    assert not list(scheme.platlib.glob("demo-1.0.data"))
    hello = venv / "bin" / "hello"
    assert hello.read_bytes().startswith(shebang(venv / "bin" / "python"))
    run = subprocess.run([str(hello)], capture_output=True, text=True, check=True)
    assert run.stdout.strip() == f"hello {venv}"
    assert (venv / "bin" / "plain.sh").read_bytes() == files["demo-1.0.data/scripts/plain.sh"]
    cli = subprocess.run([str(venv / "bin" / "demo-cli")], capture_output=True, text=True)
    assert (cli.returncode, cli.stdout) == (0, "demo main\n")
    record = read_record(scheme, "demo-1.0.dist-info")
    assert "../../../bin/demo-cli" in record
    assert "../../../bin/hello" in record
    assert record["demo-1.0.dist-info/INSTALLER"][0]
    assert (scheme.purelib / "demo-1.0.dist-info" / "INSTALLER").read_text() == "repro\n"
    for rel, (digest, size) in record.items():
        path = (scheme.platlib / rel).resolve()
        assert path.is_file(), rel
        if digest:
            data = path.read_bytes()
            want = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=")
            assert digest == f"sha256={want.decode()}", rel
            assert int(size) == len(data)


def test_a_long_interpreter_path_gets_the_sh_trampoline(tmp_path: Path) -> None:
    deep = tmp_path / ("d" * 60) / ("e" * 60) / "with space" / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(deep)], check=True)
    wheel = make_wheel(
        tmp_path, entry_points="[console_scripts]\ndemo-cli = demo:main\n",
        files={"demo/__init__.py": b"def main():\n    print('ran')\n"},
    )  # fmt: skip
    install_wheel(wheel, scheme_of(deep))
    script = deep / "bin" / "demo-cli"
    assert script.read_bytes().startswith(b"#!/bin/sh\n")
    run = subprocess.run([str(script)], capture_output=True, text=True, timeout=60)
    assert (run.returncode, run.stdout) == (0, "ran\n")


def nothing_of_demo_in(venv: Path) -> bool:
    """True when no file of the demo wheel reached the venv."""
    scheme = scheme_of(venv)
    return (
        not any(path.name.startswith("demo") for path in (scheme.purelib.iterdir()))
        and not (scheme.scripts / "demo-cli").exists()
    )


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


def test_choose_wheels_takes_the_pins_version_and_a_tag_this_python_takes(
    tmp_path: Path, venv: Path
) -> None:
    make_wheel(tmp_path, "demo", "1.0")
    make_wheel(tmp_path, "demo", "2.0")
    make_wheel(tmp_path, "native", "1.0", tag="cp27-cp27mu-manylinux1_x86_64")
    tags = supported_tags(describe_interpreter(venv / "bin" / "python"))
    pins = [Pin("demo", "2.0"), Pin("native", "1.0"), Pin("absent", "1")]
    choice = choose_wheels(pins, tmp_path, tags)
    assert choice.wheels == {"demo": tmp_path / "demo-2.0-py3-none-any.whl"}
    assert choice.missing == ("native==1.0", "absent==1")


def test_install_from_vault_checks_each_wheels_hash_and_drops_it(
    tmp_path: Path, venv: Path
) -> None:
    vault = tmp_path / "vault"
    vault.mkdir()
    good = make_wheel(vault, "demo", "1.0")
    other = make_wheel(vault, "other", "1.0", files={"other.py": b"Y = 1\n"})
    digests = {p: hashlib.sha256(p.read_bytes()).hexdigest() for p in (good, other)}
    python = venv / "bin" / "python"
    result = install_from_vault(
        python,
        {"demo": good, "other": other},
        {"demo": (digests[good],), "other": (digests[other],)},
        drop=True,
    )
    assert sorted(i.name for i in result.installed) == ["demo", "other"]
    assert not good.exists() and not other.exists()
    # a wheel whose bytes are not the ones vault.toml lists is not installed
    changed = make_wheel(vault, "third", "1.0", files={"third.py": b"Z = 1\n"})
    with pytest.raises(InstallError, match=r"is not the one env/vault\.toml lists for third"):
        install_from_vault(python, {"third": changed}, {"third": ("0" * 64,)})
    assert not list(scheme_of(venv).purelib.glob("third*"))


# --- what a wheel may write (repro.install.wheelaudit) -----------------------------------


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


def test_a_deflated_member_longer_than_declared_is_cut_and_refused(
    tmp_path: Path, venv: Path
) -> None:
    """Both headers say 10 bytes; the stream inflates to 1 MiB: never more than 10 are
    written, and the wheel's files are removed."""
    files = wheel_files(files={"demo/a.py": b"A = 1\n", "demo/data.bin": bytes(2**20)})
    record = files["demo-1.0.dist-info/RECORD"]
    files["demo-1.0.dist-info/RECORD"] = record.replace(b",1048576\n", b",\n")  # no size
    members = raw_members(files, zipfile.ZIP_DEFLATED)
    target = next(m for m in members if m.name == "demo/data.bin")
    target.usize = 10
    wheel = raw_wheel(tmp_path, members)
    with pytest.raises(InstallError, match=r"'demo/data\.bin': inflates past the 10 bytes"):
        install_wheel(wheel, scheme_of(venv))
    assert nothing_of_demo_in(venv)
    assert not (scheme_of(venv).purelib / "demo" / "a.py").exists()


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
    case("record-fields", "RECORD:1: 2 fields", wheel_files(record=b"demo/__init__.py,x\n"))
    case(
        "wheel-version",
        "Wheel-Version",
        {**wheel_files(), "demo-1.0.dist-info/WHEEL": b"Wheel-Version: 9.0\n"},
    )
    # a central directory entry "needs version 8.4" to extract: zipfile raises
    # NotImplementedError (found by tests/test_wheel_fuzz.py)
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


# --- RECORD integrity ---------------------------------------------------------------------


@pytest.mark.parametrize(
    "compression", [zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED], ids=["stored", "deflated"]
)
@pytest.mark.parametrize(
    ("record", "rule"),
    [
        (b"demo/__init__.py,sha256=AAAA,10\n", "its bytes hash to sha256="),
        (b"demo/__init__.py,sha256=AAAA,99\n", "RECORD says '99' bytes"),
        (b"demo/__init__.py,md5=AAAA,10\n", "is not one repro checks"),
        (b"", "no RECORD row lists it"),
    ],
    ids=["hash", "size", "md5", "no-row"],
)
def test_a_member_unlike_its_record_row_is_refused(
    tmp_path: Path, venv: Path, compression: int, record: bytes, rule: str
) -> None:
    files = wheel_files(files={"demo/__init__.py": b"VALUE = 1\n", "demo/ok.py": b"OK = 1\n"})
    rows = [
        record_row(n, d)
        for n, d in files.items()
        if n not in ("demo/__init__.py",) and not n.endswith("RECORD")
    ]
    files["demo-1.0.dist-info/RECORD"] = record + ("\n".join(rows) + "\n").encode()
    wheel = write_wheel(tmp_path, files, compression=compression)
    with pytest.raises(InstallError, match=re.escape(rule)) as caught:
        install_wheel(wheel, scheme_of(venv))
    assert "'demo/__init__.py'" in str(caught.value)
    assert nothing_of_demo_in(venv)
    assert not (scheme_of(venv).purelib / "demo").exists() or not any(
        (scheme_of(venv).purelib / "demo").iterdir()
    )


def test_the_installed_record_lists_each_path_once_as_written(tmp_path: Path, venv: Path) -> None:
    files = wheel_files(
        files={
            "demo/__init__.py": b"def main(): pass\n",
            "demo-1.0.data/scripts/s": b"#!python\nprint(1)\n",
        },
        entry_points="[console_scripts]\ndemo-cli = demo:main\n",
    )
    dist = "demo-1.0.dist-info"
    files[f"{dist}/RECORD"] += files[f"{dist}/RECORD"]  # every row twice, the same
    files[f"{dist}/INSTALLER"] = b"pip\n"  # the installer writes its own
    files[f"{dist}/RECORD"] += record_row(f"{dist}/INSTALLER", b"pip\n").encode() + b"\n"
    wheel = write_wheel(tmp_path, files)
    scheme = scheme_of(venv)
    install_wheel(wheel, scheme)
    text = (scheme.purelib / dist / "RECORD").read_text()
    rows = list(csv.reader(text.splitlines()))
    paths = [row[0] for row in rows]
    assert len(paths) == len(set(paths)), paths
    assert (scheme.purelib / dist / "INSTALLER").read_text() == "repro\n"
    for path, digest, size in rows:
        data = (scheme.purelib / path).read_bytes()
        if path != f"{dist}/RECORD":
            assert (digest, size) == tuple(record_row(path, data).split(",")[1:]), path


# --- parity with pip: pip's versioned script names ----------------------------------------


def test_pip_gets_pip_pip3_and_pip3_x_of_the_target_as_pip_writes(tmp_path: Path) -> None:
    """pip's own wheel (the one ensurepip carries), installed by pip itself (`python -m
    venv` bootstraps it) and by repro: the same scripts in bin/, `pip3.X` of the venv's
    Python whatever versioned names the wheel's entry_points.txt lists."""
    import ensurepip

    (bundled,) = (Path(ensurepip.__file__).parent / "_bundled").glob("pip-*.whl")
    by_pip = tmp_path / "by-pip"
    subprocess.run([sys.executable, "-m", "venv", str(by_pip)], check=True, timeout=300)
    by_repro = tmp_path / "by-repro"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(by_repro)], check=True)
    install_wheel(bundled, scheme_of(by_repro))
    pip_names = sorted(p.name for p in (by_pip / "bin").glob("pip*"))
    repro_names = sorted(p.name for p in (by_repro / "bin").glob("pip*"))
    minor = "{}.{}".format(*sys.version_info[:2])
    assert repro_names == pip_names == sorted(["pip", f"pip{sys.version_info[0]}", f"pip{minor}"])
    # and for a wheel listing another Python's names only
    other = write_wheel(
        tmp_path,
        wheel_files("pip", "99.0", {"pip/__init__.py": b"def main(): pass\n"},
                    entry_points="[console_scripts]\npip = pip:main\npip3.7 = pip:main\n"
                    "easy_install-2.7 = pip:main\neasy_install = pip:main\n"),
        "pip", "99.0",
    )  # fmt: skip
    fresh = tmp_path / "fresh"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(fresh)], check=True)
    install_wheel(other, scheme_of(fresh))
    names = sorted(p.name for p in (fresh / "bin").iterdir() if p.name.startswith(("pip", "easy")))
    assert names == sorted(
        ["pip", f"pip{sys.version_info[0]}", f"pip{minor}", "easy_install", f"easy_install-{minor}"]
    )


@pytest.mark.parametrize(
    "compression", [zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED], ids=["stored", "deflated"]
)
@pytest.mark.parametrize(
    "script",
    [b"#!python\n" + b"# long\n" * 600_000, b"#!python", b"#!py", b"", b"\x7fELF" + bytes(3 << 20)],
    ids=["long-python", "python-only", "short", "empty", "binary"],
)
def test_scripts_are_streamed_with_the_python_line_rewritten(
    tmp_path: Path, venv: Path, compression: int, script: bytes
) -> None:
    files = wheel_files(files={"demo/__init__.py": b"", "demo-1.0.data/scripts/tool": script})
    scheme = scheme_of(venv)
    install_wheel(write_wheel(tmp_path, files, compression=compression), scheme)
    want = script
    if script.startswith(b"#!python"):
        want = shebang(scheme.python) + script.partition(b"\n")[2]
    assert (venv / "bin" / "tool").read_bytes() == want
    record = read_record(scheme, "demo-1.0.dist-info")["../../../bin/tool"]
    assert record == tuple(record_row("x", want).split(",")[1:])
