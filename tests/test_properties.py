"""Property-based tests: the readers of untrusted input never crash.

Arbitrary bytes give a parsed result or a ReproError, never another exception; writing
then reading is the identity for arbitrary file names where the format allows them.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import re
import tarfile
import tempfile
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from packaging.utils import canonicalize_name

from repro.archive.reader import ArchiveLimits, iter_members
from repro.archive.tarformat import name_problem
from repro.archive.writer import DeterministicTarWriter, member_order
from repro.bundle.info import load_bundle_info
from repro.bundle.lock import read_requirements_lock
from repro.bundle.manifest import format_manifest, normalize_path, parse_manifest
from repro.bundle.patchset import load_patchset
from repro.errors import ReproError

SETTINGS = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])

# Names made of characters that break naive formats: space, newline, backslash, tab,
# CR, non-ASCII letters and symbols, lone surrogates excluded (not encodable as UTF-8).
name_chars = st.sampled_from([*list("ab Z_-.\\\n\t\r"), "é", "ß", "名", "🙂", "\xa0", "*", "#"])
components = st.text(name_chars, min_size=1, max_size=12).filter(lambda c: c not in (".", ".."))
rel_paths = st.lists(components, min_size=1, max_size=4).map("/".join)
toml_scalars = st.one_of(
    st.integers(), st.text(max_size=20), st.booleans(), st.floats(allow_nan=False)
)


# --- arbitrary bytes -----------------------------------------------------------------------


@SETTINGS
@given(st.binary(max_size=2000))
def test_manifest_reader_never_crashes(data: bytes) -> None:
    with contextlib.suppress(ReproError):
        parse_manifest(data, source="m")


@SETTINGS
@given(st.binary(max_size=2000))
def test_lock_reader_never_crashes(data: bytes) -> None:
    with tempfile.TemporaryDirectory() as temp:
        path = Path(temp) / "requirements.lock"
        path.write_bytes(data)
        with contextlib.suppress(ReproError):
            read_requirements_lock(path)


@SETTINGS
@given(
    st.lists(
        st.sampled_from(
            [
                "six==1.16.0",
                "--index-url https://x/simple",
                "-i",
                "--hash=sha256:" + "a" * 64,
                "\\",
                "#c",
                " ",
                "a==",
                "==1",
                "-e .",
                "A_b.c==2 \\",
                "--find-links",
                "pkg==1.0 ; x",
            ]
        ),
        max_size=12,
    ).map("\n".join)
)
def test_lock_reader_never_crashes_on_lock_like_text(text: str) -> None:
    with tempfile.TemporaryDirectory() as temp:
        path = Path(temp) / "requirements.lock"
        path.write_text(text)
        with contextlib.suppress(ReproError):
            read_requirements_lock(path)


@SETTINGS
@given(st.binary(max_size=2000))
def test_bundle_toml_and_patches_toml_never_crash_on_bytes(data: bytes) -> None:
    for load in (load_bundle_info, load_patchset):
        with contextlib.suppress(ReproError):
            load(data, source="t.toml")


def _toml_documents() -> st.SearchStrategy[str]:
    """TOML that parses, with the right keys and arbitrary value types."""
    keys = st.sampled_from(
        [
            "format_version",
            "name",
            "version",
            "created",
            "tool_version",
            "files",
            "dist",
            "path",
            "kind",
            "pristine_sha256",
            "patched_sha256",
            "source",
            "launch",
            "python",
        ]
    )
    value = st.one_of(
        toml_scalars.map(
            lambda v: repr(v).replace("'", '"') if isinstance(v, str) else str(v).lower()
        ),
        st.just("[]"),
        st.just("{}"),
        st.just("[{}]"),
        st.just("1"),
        st.just('"x"'),
        st.just('[{dist = "a", path = "../x", kind = "added"}]'),
        st.just("{commands = [1]}"),
        st.just('{commands = [{name = 1, port = "x"}]}'),
        st.just("[[1]]"),
        st.just("{python = 3, gpus = [1]}"),
        st.just("{rungs = 5}"),
        st.just('{gpus = [{name = "g", compute_capability = 9, memory_mib = "x"}]}'),
        st.just("[{name = 1}]"),
        st.just("1979-05-27T07:32:00Z"),
        st.just("-1"),
        st.just("9999999999999999999"),
    )
    line = st.tuples(keys, value).map(lambda kv: f"{kv[0]} = {kv[1]}")
    return st.lists(line, max_size=8, unique_by=lambda s: s.split(" = ")[0]).map("\n".join)


@SETTINGS
@given(_toml_documents())
def test_bundle_toml_and_patches_toml_never_crash_on_toml(text: str) -> None:
    for load in (load_bundle_info, load_patchset):
        with contextlib.suppress(ReproError):
            load(text.encode(), source="t.toml")


@SETTINGS
@given(st.binary(max_size=3000))
def test_archive_reader_never_crashes(data: bytes) -> None:
    _drain(data)


def _drain(data: bytes) -> None:
    try:
        for _member, stream in iter_members(
            io.BytesIO(data), source="a.tar", limits=ArchiveLimits(max_members=100)
        ):
            if stream is not None:
                stream.read()
    except ReproError:
        pass


@SETTINGS
@given(st.data())
def test_archive_reader_never_crashes_on_damaged_tar(data: st.DataObject) -> None:
    """A real tar, then bytes flipped, cut or spliced at arbitrary places."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for name in ("top/", "top/a", "top/ü b"):
            info = tarfile.TarInfo(name)
            info.type = tarfile.DIRTYPE if name.endswith("/") else tarfile.REGTYPE
            info.mode = 0o755 if info.isdir() else 0o644
            payload = name.encode() * 50
            info.size = 0 if info.isdir() else len(payload)
            tar.addfile(info, None if info.isdir() else io.BytesIO(payload))
    raw = bytearray(buffer.getvalue())
    for _ in range(data.draw(st.integers(1, 8))):
        at = data.draw(st.integers(0, len(raw) - 1))
        raw[at] = data.draw(st.integers(0, 255))
    cut = data.draw(st.integers(0, len(raw)))
    _drain(bytes(raw[:cut]))


# --- round trips ---------------------------------------------------------------------------


@SETTINGS
@given(
    st.dictionaries(
        rel_paths, st.binary(min_size=32, max_size=32).map(lambda b: b.hex()), max_size=8
    )
)
def test_manifest_round_trip_for_arbitrary_names(digests: dict[str, str]) -> None:
    listed = {}
    for path, digest in digests.items():
        alone = parse_manifest(format_manifest([(path, digest)]), source="m")
        if alone.rejected:  # names the manifest refuses ('.', '..', absolute) are not listed
            continue
        listed[normalize_path(path)] = digest
    manifest = parse_manifest(format_manifest(listed.items()), source="m")
    assert not manifest.malformed and not manifest.rejected
    assert {e.path: e.digest for e in manifest.entries} == listed


@SETTINGS
@given(st.dictionaries(rel_paths, st.binary(max_size=64), max_size=6))
def test_archive_round_trip_for_arbitrary_names(files: dict[str, bytes]) -> None:
    admitted: dict[str, bytes] = {}
    folded: set[str] = set()
    for rel in sorted(files, key=member_order):
        prefixes = {"/".join(rel.split("/")[:i]) for i in range(1, rel.count("/") + 2)}
        if name_problem(rel) is not None or any(p.casefold() in folded for p in prefixes):
            continue
        if any(other.startswith(rel + "/") or rel.startswith(other + "/") for other in admitted):
            continue
        admitted[rel] = files[rel]
        folded |= {p.casefold() for p in prefixes}
    out = io.BytesIO()
    with DeterministicTarWriter(out, top="t-1", mtime=0) as writer:
        for rel in sorted(admitted, key=member_order):
            writer.add_bytes(rel, admitted[rel])
    read = {}
    for member, stream in iter_members(io.BytesIO(out.getvalue()), source="t.tar"):
        if stream is not None:
            read[member.name] = stream.read()
    assert read == admitted
    for rel, data in admitted.items():
        assert writer.digests[rel] == hashlib.sha256(data).hexdigest()


# --- names ---------------------------------------------------------------------------------


@SETTINGS
@given(st.text(st.sampled_from([*"aZ09-_.", "İ", "ß", "K", "\u212a", "é"]), max_size=16))
def test_name_normalisation_is_pep_503(name: str) -> None:
    """Every name repro compares (pins, vault wheels, patched distributions) goes through
    `packaging.utils.canonicalize_name`: PEP 503's `re.sub(r"[-_.]+", "-", name).lower()`,
    which repro's own `normalize_name` was, the same for every string."""
    assert canonicalize_name(name) == re.sub(r"[-_.]+", "-", name).lower()
