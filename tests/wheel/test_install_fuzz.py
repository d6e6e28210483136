"""install_wheel (repro.wheel.install) over random wheels: random member names and
schemes, RECORD rows right, wrong or missing, random entry points, and zip damage
(flipped bytes, truncation). Every outcome is either an install whose files all lie in
the venv and whose RECORD is what is on disk, or an InstallError; never another
exception, never a file outside the venv, never the venv's own files changed.

Each example gets a fresh venv layout (a real directory tree: the scheme of the test's
own interpreter below a new prefix, a `bin/python` link and a `pyvenv.cfg`), inside a
sandbox directory that must hold nothing else afterwards."""

from __future__ import annotations

import base64
import csv
import hashlib
import io
import os
import sys
import tempfile
import warnings
import zipfile
from pathlib import Path

from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from repro.errors import InstallError
from repro.wheel.install import install_wheel
from tests.support.wheels import record_row
from tests.wheel.conftest import venv_layout

DIST_INFO = "demo-1.0.dist-info"
DATA = "demo-1.0.data"

_text = st.text(
    alphabet=st.characters(blacklist_categories=["Cs"], max_codepoint=0x2FFF), max_size=12
)
_plain = st.sampled_from(["demo", "x.py", "pkg", "mod.py", "sub", "data.bin", "é.txt"])
_segment = st.one_of(
    *[_plain] * 8,
    st.sampled_from(["demo", "x.py", "pkg", "..", ".", "", "bin", "python", "python3",
                     "activate", "pyvenv.cfg", "lib64", "lib", "a\\b", "n\x00ul",
                     "other-1.0.dist-info"]),
    _text,
)  # fmt: skip


def _one_in(n: int) -> st.SearchStrategy[bool]:
    """True about once in n draws (integers(0, n) leans to 0, sampled_from does not)."""
    return st.sampled_from([False] * (n - 1) + [True])


_scheme_key = st.sampled_from(["purelib", "platlib", "scripts", "headers", "data", "etc"])


@st.composite
def member_names(draw: st.DrawFn) -> str:
    rest = "/".join(draw(st.lists(_segment, min_size=1, max_size=4)))
    kind = draw(st.sampled_from(["root", "root", "data", "data", "dist-info", "raw"]))
    if kind == "data":
        return f"{DATA}/{draw(_scheme_key)}/{rest}"
    if kind == "dist-info":
        return f"{DIST_INFO}/{rest}"
    if kind == "raw":
        return draw(st.sampled_from(["/abs.py", "../up.py", f"{DATA}/data/pyvenv.cfg"]))
    return rest


@st.composite
def entry_points(draw: st.DrawFn) -> bytes | None:
    if draw(st.booleans()):
        return None
    lines = ["[console_scripts]" if draw(st.booleans()) else "[gui_scripts]"]
    for _ in range(draw(st.integers(0, 3))):
        names = st.sampled_from(["pip", "pip3.7", "python", "demo-cli", "tool", "easy_install"])
        name = draw(st.one_of(names, names, _text))
        targets = st.sampled_from(["demo:main", "demo.x:a.b", "demo:main [extra]", "os;x:y"])
        target = draw(st.one_of(targets, targets, _text))
        lines.append(f"{name} = {target}")
    if draw(_one_in(5)):
        lines.append(draw(_text))
    return ("\n".join(lines) + "\n").encode("utf-8", "surrogatepass")


@st.composite
def wheels(draw: st.DrawFn) -> bytes:
    files: dict[str, bytes] = {"demo/__init__.py": b"def main(): pass\n"}
    for _ in range(draw(st.integers(0, 4))):
        files[draw(member_names())] = draw(st.binary(max_size=300))
    metadata = b"Metadata-Version: 2.1\nName: demo\nVersion: 1.0\n"
    files[f"{DIST_INFO}/METADATA"] = metadata
    if not draw(_one_in(10)):  # now and then no WHEEL at all
        files[f"{DIST_INFO}/WHEEL"] = draw(
            st.sampled_from(
                [
                    b"Wheel-Version: 1.0\nRoot-Is-Purelib: true\n",
                    b"Wheel-Version: 1.0\nRoot-Is-Purelib: true\n",
                    b"Wheel-Version: 1.0\nRoot-Is-Purelib: false\n",
                    b"Wheel-Version: 2.0\n",
                    b"\xff\xfe garbage",
                ]
                + [b"Wheel-Version: 1.0\nRoot-Is-Purelib: true\n"] * 6
            )
        )
    points = draw(entry_points())
    if points is not None:
        files[f"{DIST_INFO}/entry_points.txt"] = points
    rows: list[str] = []
    for name, data in files.items():
        how = draw(st.sampled_from(["right"] * 12 + ["hash", "size", "missing"]))
        if how == "right":
            rows.append(record_row(name, data))
        elif how == "hash":
            rows.append(record_row(name, data + b"x").rsplit(",", 1)[0] + f",{len(data)}")
        elif how == "size":
            rows.append(record_row(name, data).rsplit(",", 1)[0] + f",{len(data) + 1}")
    if draw(_one_in(10)):
        rows.append(draw(_text))
    record = ("\n".join(rows) + f"\n{DIST_INFO}/RECORD,,\n").encode("utf-8", "surrogatepass")
    files[f"{DIST_INFO}/RECORD"] = record
    method = draw(st.sampled_from([zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED]))
    buffer = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # duplicate names are part of the game
        with zipfile.ZipFile(buffer, "w", method) as archive:
            for name, data in files.items():
                if name.partition("\0")[0]:  # zipfile cuts a name at NUL; none is no member
                    archive.writestr(name, data)
    raw = bytearray(buffer.getvalue())
    damage = draw(st.sampled_from(["none"] * 4 + ["flip", "truncate"]))
    if damage == "flip":
        for _ in range(draw(st.integers(1, 4))):
            at = draw(st.integers(0, len(raw) - 1))
            raw[at] ^= draw(st.integers(1, 255))
    elif damage == "truncate":
        raw = raw[: draw(st.integers(0, len(raw) - 1))]
    return bytes(raw)


def _files(root: Path) -> set[Path]:
    return {
        Path(dirpath, name)
        for dirpath, dirs, names in os.walk(root)
        for name in names + [d for d in dirs if Path(dirpath, d).is_symlink()]
    }


def _b64(data: bytes) -> str:
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


@settings(
    max_examples=250,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(wheels())
def test_a_random_wheel_installs_inside_the_venv_or_is_refused(data: bytes) -> None:
    with tempfile.TemporaryDirectory(prefix="repro-fuzz-") as temp:
        sandbox = Path(temp)
        prefix = sandbox / "venv"
        scheme = venv_layout(prefix)
        wheel = sandbox / "wheel" / "demo-1.0-py3-none-any.whl"
        wheel.parent.mkdir()
        wheel.write_bytes(data)
        before = _files(sandbox)
        try:
            install_wheel(wheel, scheme)
        except InstallError as exc:
            event(f"refused: {exc.message.split(': ')[-1].split(' (')[0][:40]}")
            ok = False
        else:
            event("installed")
            ok = True
        after = _files(sandbox)
        assert {p for p in after if prefix not in p.parents} == {wheel}, "a file outside the venv"
        assert (prefix / "pyvenv.cfg").read_text() == "home = /usr/bin\n"
        assert os.readlink(prefix / "bin" / "python") == sys.executable
        if not ok:
            assert after == before, "a refused wheel left files"
            return
        record = scheme.purelib / DIST_INFO / "RECORD"
        rows = list(csv.reader(io.StringIO(record.read_text(encoding="utf-8"), newline="")))
        listed = {os.path.normpath(scheme.purelib / row[0]): row for row in rows}
        assert len(listed) == len(rows), "a path listed twice"
        assert {str(p) for p in after - before} == set(listed)
        for path, (_, digest, size) in listed.items():
            content = Path(path).read_bytes()
            if path != str(record):
                assert (digest, size) == (_b64(content), str(len(content))), path
