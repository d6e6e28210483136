"""repro's own wheel installer (repro.install.wheelinstall, repro.install.vaultinstall)
on wheels built here with zipfile: every scheme, scripts, entry points, stored and
deflated members, hostile member names. The byte-for-byte comparison with uv and pip on
real PyPI wheels is tests/test_installer_parity.py."""

from __future__ import annotations

import base64
import csv
import hashlib
import os
import stat
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from repro.errors import InstallError
from repro.install.vaultinstall import (
    choose_wheels,
    describe_interpreter,
    install_from_vault,
    supported_tags,
    venv_scheme,
)
from repro.install.wheelinstall import Scheme, install_wheel, shebang
from repro.snapshot.lock import Pin


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
