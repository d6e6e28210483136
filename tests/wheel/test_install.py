"""repro's own wheel installer (repro.wheel.install) on wheels built here with zipfile:
every scheme, scripts and entry points, stored and deflated members streamed and hashed
as they are written, the installed RECORD. What the plan refuses before a byte is
written is tests/wheel/test_audit.py; the byte-for-byte comparison with uv and pip on
real PyPI wheels is tests/install/venv/test_installer_parity.py."""

from __future__ import annotations

import base64
import csv
import hashlib
import os
import re
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from repro.errors import InstallError
from repro.wheel.install import install_wheel
from repro.wheel.scheme import Scheme
from repro.wheel.scripts import shebang
from tests.support.wheels import (
    raw_members,
    raw_wheel,
    record_row,
    wheel_files,
    write_wheel,
)
from tests.wheel.conftest import make_wheel, nothing_of_demo_in, scheme_of


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
