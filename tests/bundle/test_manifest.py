"""repro.bundle.manifest against GNU `sha256sum -c` itself, plus round trips and units."""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from repro.bundle.manifest import MANIFEST_NAME, ManifestEntry, format_manifest, parse_manifest
from repro.bundle.manifestcheck import compare_digests
from repro.bundle.manifesttree import scan_tree, verify_directory, write_manifest
from repro.errors import InputError, ManifestError

SHA256SUM = shutil.which("sha256sum") or "/usr/bin/sha256sum"
ALPHA = b"alpha\n"
BETA = b"beta\n"
A = hashlib.sha256(ALPHA).hexdigest()
B = hashlib.sha256(BETA).hexdigest()
GNU_ENV = {"LC_ALL": "C.UTF-8", "PATH": "/usr/bin:/bin"}


@dataclass(frozen=True)
class Case:
    """A bundle directory (files, optionally symlinks and files outside it) and its
    manifest. `passes`: the verdict both tools must give. `stricter`: why repro
    deliberately fails where sha256sum passes (then `passes` is sha256sum's verdict)."""

    id: str
    manifest: bytes
    files: dict[str, bytes]
    passes: bool
    flags: tuple[str, ...] = ()
    stricter: str | None = None
    symlinks: dict[str, str] = field(default_factory=dict)
    outside: dict[str, bytes] = field(default_factory=dict)


def line(digest: str, name: bytes, marker: bytes = b" ") -> bytes:
    return digest.encode() + b" " + marker + name + b"\n"


TWO = {"a": ALPHA, "b": BETA}
GOOD = line(A, b"a") + line(B, b"b")

CASES = [
    Case("plain", GOOD, TWO, True),
    Case("binary-marker", line(A, b"a", b"*") + line(B, b"b", b"*"), TWO, True),
    Case("uppercase-hex", line(A.upper(), b"a") + line(B, b"b"), TWO, True),
    Case("crlf", GOOD.replace(b"\n", b"\r\n"), TWO, True),
    Case("no-final-newline", GOOD[:-1], TWO, True),
    Case("comments-and-blanks", b"# made by hand\n\n" + GOOD + b"\r\n#x\n", TWO, True),
    Case("leading-whitespace", b"  \t" + GOOD, TWO, True),
    Case("tab-separator", A.encode() + b"\t a\n", {"a": ALPHA}, True),
    Case("tab-then-star", A.encode() + b"\t*a\n", {"a": ALPHA}, True),
    Case("tagged-bsd", b"SHA256 (a) = " + A.encode() + b"\n", {"a": ALPHA}, True),
    Case(
        "tagged-bsd-name-with-paren", b"SHA256 (x)y) = " + A.encode() + b"\n", {"x)y": ALPHA}, True
    ),
    Case("reversed-one-space", A.encode() + b" a\n", {"a": ALPHA}, True),
    # After a reversed line, "  b" keeps its leading space: a missing file " b".
    Case("reversed-then-standard", A.encode() + b" a\n" + line(B, b"b"), TWO, False),
    Case(
        "standard-then-reversed-is-malformed",
        line(A, b"a") + B.encode() + b" b\n",
        TWO,
        True,
        flags=(),
        stricter="file b is unlisted because its line is malformed",
    ),
    Case(
        "standard-then-reversed-strict",
        line(A, b"a") + B.encode() + b" b\n",
        TWO,
        False,
        flags=("--strict",),
    ),
    Case("escaped-newline", b"\\" + line(A, b"x\\ny"), {"x\ny": ALPHA}, True),
    Case("escaped-cr", b"\\" + line(A, b"x\\ry"), {"x\ry": ALPHA}, True),
    Case("escaped-backslash", b"\\" + line(A, b"x\\\\y"), {"x\\y": ALPHA}, True),
    Case("unescaped-backslash-is-literal", line(A, b"x\\y"), {"x\\y": ALPHA}, True),
    Case("unescaped-backslash-n-is-literal", line(A, b"x\\ny"), {"x\\ny": ALPHA}, True),
    Case("leading-and-trailing-spaces", line(A, b" a "), {" a ": ALPHA}, True),
    Case("trailing-space-not-trimmed", line(A, b"a "), {"a": ALPHA}, False, stricter=None),
    Case("non-ascii", line(A, "dé jà/ü".encode()), {"dé jà/ü": ALPHA}, True),
    Case("subdirectory", line(A, b"d/e/a"), {"d/e/a": ALPHA}, True),
    Case("dot-slash", line(A, b"./a"), {"a": ALPHA}, True),
    Case("double-slash", line(A, b"d//a"), {"d/a": ALPHA}, True),
    Case("mismatch", line(B, b"a") + line(B, b"b"), TWO, False),
    Case("missing", GOOD + line(A, b"gone"), TWO, False),
    Case("missing-ignored", GOOD + line(A, b"gone"), TWO, True, flags=("--ignore-missing",)),
    Case("nothing-verified-ignored", line(A, b"gone"), {}, False, flags=("--ignore-missing",)),
    Case("empty-manifest", b"", {}, False),
    Case("only-comments", b"# nothing\n", {}, False),
    Case("only-malformed", b"nonsense\n", {}, False),
    Case("short-digest", GOOD + line(A[:-1], b"x"), TWO, True),
    Case("short-digest-strict", GOOD + line(A[:-1], b"x"), TWO, False, flags=("--strict",)),
    Case("long-digest-strict", GOOD + line(A + "0", b"x"), TWO, False, flags=("--strict",)),
    Case("non-hex", GOOD + line("g" * 64, b"x"), TWO, True),
    Case("non-hex-strict", GOOD + line("g" * 64, b"x"), TWO, False, flags=("--strict",)),
    Case("bad-escape", GOOD + b"\\" + line(A, b"x\\ty"), TWO, True),
    Case("bad-escape-strict", GOOD + b"\\" + line(A, b"x\\ty"), TWO, False, flags=("--strict",)),
    Case(
        "trailing-backslash-strict", GOOD + b"\\" + line(A, b"x\\"), TWO, False, flags=("--strict",)
    ),
    Case("whitespace-only-line-strict", GOOD + b"   \n", TWO, False, flags=("--strict",)),
    Case("indented-hash-is-not-comment-strict", GOOD + b" # x\n", TWO, False, flags=("--strict",)),
    Case("no-name-separator-strict", GOOD + A.encode() + b"\n", TWO, False, flags=("--strict",)),
    Case(
        "tagged-without-equals-strict",
        GOOD + b"SHA256 (a) " + A.encode() + b"\n",
        TWO,
        False,
        flags=("--strict",),
    ),
    Case("symlink-inside-tree", GOOD + line(A, b"link"), TWO, True, symlinks={"link": "a"}),
    # Deliberately stricter than sha256sum:
    Case(
        "duplicate",
        GOOD + line(A, b"a"),
        TWO,
        True,
        stricter="a path listed twice is rejected",
    ),
    Case(
        "duplicate-after-normalizing",
        GOOD + line(A, b"./a"),
        TWO,
        True,
        stricter="a path listed twice is rejected",
    ),
    Case(
        "dotdot",
        GOOD + line(A, b"../outside"),
        TWO,
        True,
        stricter="'..' escapes the tree",
        outside={"outside": ALPHA},
    ),
    Case(
        "tilde",
        GOOD + line(A, b"~/a"),
        {**TWO, "~/a": ALPHA},
        True,
        stricter="a leading '~' is refused",
    ),
    Case(
        "symlink-escape",
        GOOD + line(A, b"evil"),
        TWO,
        True,
        stricter="a listed symlink resolving outside the tree is refused",
        symlinks={"evil": "../outside"},
        outside={"outside": ALPHA},
    ),
    Case(
        "unlisted-file",
        line(A, b"a"),
        TWO,
        True,
        stricter="b is in the tree but not in the manifest",
    ),
    Case(
        "unlisted-symlink",
        GOOD,
        TWO,
        True,
        stricter="a symlink in the tree that the manifest does not list",
        symlinks={"link": "a"},
    ),
    Case(
        "nul-in-name",
        line(A, b"a\0junk") + line(B, b"b"),
        TWO,
        True,
        stricter="a NUL byte makes the line malformed, so a is unlisted",
    ),
    # "DIGEST  " with no name is a reversed-layout line named " ": malformed after
    # standard lines, for both tools.
    Case("digest-two-spaces-no-name", GOOD + line(A, b""), TWO, True),
    Case(
        "empty-name-ignored-missing",
        GOOD + b"SHA256 () = " + A.encode() + b"\n",
        TWO,
        True,
        flags=("--ignore-missing",),
        stricter="a line without a file name is rejected",
    ),
]


def build(tmp_path: Path, case: Case) -> Path:
    root = tmp_path / "bundle"
    root.mkdir()
    for name, content in {**case.files}.items():
        target = root / name
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(content)
    for name, content in case.outside.items():
        (tmp_path / name).write_bytes(content)
    for name, destination in case.symlinks.items():
        (root / name).symlink_to(destination)
    (root / MANIFEST_NAME).write_bytes(case.manifest)
    return root


def gnu_verdict(root: Path, flags: tuple[str, ...]) -> bool:
    result = subprocess.run(
        [SHA256SUM, "-c", *flags, MANIFEST_NAME],
        cwd=root,
        capture_output=True,
        env=GNU_ENV,
        timeout=60,
        check=False,
    )
    return result.returncode == 0


def repro_verdict(root: Path, flags: tuple[str, ...]) -> bool:
    report = verify_directory(root, root / MANIFEST_NAME, jobs=2)
    return report.passed(ignore_missing="--ignore-missing" in flags, strict="--strict" in flags)


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_same_verdict_as_gnu_sha256sum(tmp_path: Path, case: Case) -> None:
    root = build(tmp_path, case)
    assert gnu_verdict(root, case.flags) is case.passes
    if case.stricter is None:
        assert repro_verdict(root, case.flags) is case.passes
    else:
        # repro is deliberately stricter here: sha256sum passes, repro fails.
        assert case.passes
        assert repro_verdict(root, case.flags) is False, case.stricter


@pytest.mark.parametrize("case", [c for c in CASES if c.stricter], ids=lambda c: c.id)
def test_stricter_cases_fail_without_strict_and_say_why(tmp_path: Path, case: Case) -> None:
    root = build(tmp_path, case)
    report = verify_directory(root, root / MANIFEST_NAME, jobs=1)
    assert report.rejected or report.unlisted
    assert not report.passed(ignore_missing=True, strict=False)


AWKWARD_NAMES = [
    "plain",
    " leading space",
    "trailing space ",
    "two  spaces",
    "tab\tinside",
    "new\nline",
    "carriage\rreturn",
    "back\\slash",
    "\\leading-backslash",
    "all\\three\n\r",
    "*star",
    "#hash",
    "SHA256 (x) = y",
    "naïve/日本語/ü",
    "dir/sub dir/file",
    "undecodable-\udcff",
]


def test_format_is_byte_identical_to_gnu_output(tmp_path: Path) -> None:
    pairs = []
    for index, name in enumerate(AWKWARD_NAMES):
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        content = f"content {index}\n".encode()
        path.write_bytes(content)
        pairs.append((name, hashlib.sha256(content).hexdigest()))
    ours = format_manifest(pairs)
    ordered = sorted(AWKWARD_NAMES, key=lambda n: n.encode("utf-8", "surrogateescape"))
    gnu = subprocess.run(
        [SHA256SUM, "--", *ordered],
        cwd=tmp_path,
        capture_output=True,
        env=GNU_ENV,
        timeout=60,
        check=True,
    ).stdout
    assert ours == gnu
    (tmp_path / MANIFEST_NAME).write_bytes(ours)
    assert gnu_verdict(tmp_path, ("--strict",))
    assert verify_directory(tmp_path, tmp_path / MANIFEST_NAME, jobs=2).passed(
        ignore_missing=False, strict=True
    )


def test_write_then_parse_is_identity_for_awkward_names() -> None:
    pairs = [
        (name, hashlib.sha256(name.encode("utf-8", "surrogateescape")).hexdigest())
        for name in AWKWARD_NAMES
    ]
    manifest = parse_manifest(format_manifest(pairs), source="m")
    assert not manifest.malformed and not manifest.rejected
    assert {(e.path, e.digest) for e in manifest.entries} == set(pairs)
    assert all(not e.binary for e in manifest.entries)


component = st.text(
    alphabet=st.characters(exclude_characters="/\0", exclude_categories=["Cs"]),
    min_size=1,
    max_size=12,
).filter(lambda c: c not in (".", "..") and not c.startswith("~"))
relative_path = st.lists(component, min_size=1, max_size=4).map("/".join)


@settings(max_examples=300, deadline=None)
@given(st.dictionaries(relative_path, st.binary(min_size=32, max_size=32), max_size=20))
def test_write_then_parse_roundtrip_property(files: dict[str, bytes]) -> None:
    pairs = [(path, raw.hex()) for path, raw in files.items()]
    data = format_manifest(pairs)
    manifest = parse_manifest(data, source="m")
    assert manifest.malformed == () and manifest.rejected == ()
    assert [(e.path, e.digest) for e in manifest.entries] == sorted(
        pairs, key=lambda p: p[0].encode()
    )
    assert format_manifest((e.path, e.digest) for e in manifest.entries) == data


PARSE_CASES = [
    (line(A, b"a"), ("a", A, False)),
    (line(A, b"a", b"*"), ("a", A, True)),
    (line(A.upper(), b"a"), ("a", A, False)),
    (b"\\" + line(A, b"a\\nb\\rc\\\\d"), ("a\nb\rc\\d", A, False)),
    (line(A, b" x "), (" x ", A, False)),
    (line(A, b"d/./e//f"), ("d/e/f", A, False)),
    (b"SHA256 (x y) = " + A.encode() + b"\n", ("x y", A, False)),
    (b"\\SHA256 (x\\ny) = " + A.encode() + b"\n", ("x\ny", A, False)),
    (line(A, b"\xff\xfe"), ("\udcff\udcfe", A, False)),
]


@pytest.mark.parametrize(("data", "expected"), PARSE_CASES)
def test_parse_entries(data: bytes, expected: tuple[str, str, bool]) -> None:
    manifest = parse_manifest(data, source="m")
    assert manifest.malformed == () and manifest.rejected == ()
    (entry,) = manifest.entries
    assert (entry.path, entry.digest, entry.binary) == expected


MALFORMED_CASES = [
    (line(A[:63], b"a"), "63 characters"),
    (line(A + "ab", b"a"), "66 characters"),
    (line("z" * 64, b"a"), "not hexadecimal"),
    (b"\\" + line(A, b"a\\x"), "bad escape"),
    (b"\\" + line(A, b"a\\"), "lone backslash"),
    (line(A, b"a\0b"), "NUL"),
    (b"   \n", "too short"),
    (A.encode() + b"\n", "too short"),
    (A.encode() + b"xx\n", "no space"),
    (b"SHA256 (a = " + A.encode() + b"\n", "no ')'"),
    (b"SHA256 (a) " + A.encode() + b"\n", "no '='"),
    (b"SHA256 a = " + A.encode() + b"\n", "SHA256"),
]


@pytest.mark.parametrize(("data", "reason"), MALFORMED_CASES)
def test_malformed_lines_are_reported_with_line_numbers(data: bytes, reason: str) -> None:
    manifest = parse_manifest(b"# header\n" + line(B, b"ok") + data, source="m")
    assert [e.path for e in manifest.entries] == ["ok"]
    (bad,) = manifest.malformed
    assert bad.lineno == 3
    assert reason in bad.reason


REJECTED_CASES = [
    (b"/etc/passwd", "absolute"),
    (b"../x", "'..'"),
    (b"a/../../x", "'..'"),
    (b"~/x", "'~'"),
    (b"~root/x", "'~'"),
    (b"./~/x", "'~'"),
    (b"dir/", "directory"),
    (b".", "directory"),
]


@pytest.mark.parametrize(("name", "reason"), REJECTED_CASES)
def test_rejected_names(name: bytes, reason: str) -> None:
    manifest = parse_manifest(line(B, b"ok") + line(A, name), source="m")
    assert [e.path for e in manifest.entries] == ["ok"]
    (rejected,) = manifest.rejected
    assert rejected.lineno == 2
    assert reason in rejected.reason


def test_duplicate_names_the_first_line() -> None:
    manifest = parse_manifest(line(A, b"a") + line(B, b"b") + line(A, b"./a"), source="m")
    (rejected,) = manifest.rejected
    assert (rejected.lineno, rejected.path) == (3, "a")
    assert "first on line 1" in rejected.reason


def test_reversed_layout_keeps_marker_in_later_names() -> None:
    manifest = parse_manifest(A.encode() + b" a\n" + line(B, b"b", b"*"), source="m")
    assert [e.path for e in manifest.entries] == ["a", "*b"]


@pytest.mark.parametrize(
    ("pairs", "message"),
    [
        ([("/abs", A)], "absolute"),
        ([("../x", A)], "'..'"),
        ([("./a", A)], "normalized"),
        ([("a//b", A)], "normalized"),
        ([("a", A), ("a", B)], "twice"),
        ([("a", A[:10])], "bad digest"),
        ([("a", "é" * 64)], "bad digest"),
        ([("a\0b", A)], "normalized"),
    ],
)
def test_format_refuses_what_it_cannot_write(pairs: list[tuple[str, str]], message: str) -> None:
    with pytest.raises(ManifestError, match=message):
        format_manifest(pairs)


def test_format_sorts_by_utf8_bytes_and_lowercases() -> None:
    data = format_manifest([("é", A.upper()), ("z", B), ("Z", A), ("a/b", B), ("a b", A)])
    names = [raw[66:] for raw in data.splitlines()]
    assert names == [b"Z", b"a b", b"a/b", b"z", "é".encode()]
    assert A.upper().encode() not in data


def test_compare_digests_is_pure_and_complete() -> None:
    manifest = parse_manifest(
        line(A, b"ok") + line(A, b"bad") + line(A, b"gone") + line(A, b"locked") + line(A, b"ln"),
        source="archive.tar!MANIFEST.sha256",
    )
    report = compare_digests(
        manifest,
        {"ok": A, "bad": B},
        present=["ok", "bad", "locked", "extra", MANIFEST_NAME, MANIFEST_NAME + ".sig"],
        unreadable={"locked": "Permission denied"},
        nonregular={"ln": "symlink", "dev": "device"},
    )
    assert report.verified == ("ok",)
    assert [(m.path, m.expected, m.actual) for m in report.mismatched] == [("bad", A, B)]
    assert report.missing == ("gone",)
    assert [(u.path, u.kind) for u in report.unlisted] == [("dev", "device"), ("extra", "file")]
    assert [(u.path, u.reason) for u in report.unreadable] == [
        ("ln", "not a regular file (symlink)"),
        ("locked", "Permission denied"),
    ]
    assert report.source == "archive.tar!MANIFEST.sha256"
    assert not report.passed(ignore_missing=True, strict=False)


def test_passed_rules() -> None:
    manifest = parse_manifest(line(A, b"a") + line(B, b"b") + b"junk\n", source="m")
    everything = compare_digests(manifest, {"a": A, "b": B}, present=["a", "b"])
    assert everything.passed(ignore_missing=False, strict=False)
    assert not everything.passed(ignore_missing=False, strict=True)
    partial = compare_digests(manifest, {"a": A}, present=["a"])
    assert partial.missing == ("b",)
    assert not partial.passed(ignore_missing=False, strict=False)
    assert partial.passed(ignore_missing=True, strict=False)
    nothing = compare_digests(manifest, {}, present=[])
    assert not nothing.passed(ignore_missing=True, strict=False)


def test_to_json_shape() -> None:
    manifest = parse_manifest(line(A, b"a\xff") + line(A, b"../x") + b"junk\n", source="m")
    document = compare_digests(manifest, {"a\udcff": B}, present=["a\udcff", "u"]).to_json()
    assert document["counts"] == {
        "verified": 0,
        "mismatched": 1,
        "missing": 0,
        "unlisted": 1,
        "malformed": 1,
        "unreadable": 0,
        "rejected": 1,
    }
    assert document["mismatched"] == [{"path": "a\\xff", "expected": A, "actual": B}]
    assert document["rejected"][0]["line"] == 2
    assert document["malformed"][0] == {
        "line": 3,
        "text": "junk",
        "reason": document["malformed"][0]["reason"],
    }
    assert document["unlisted"] == [{"path": "u", "kind": "file"}]


def make_tree(root: Path) -> None:
    (root / "env" / "wheels").mkdir(parents=True)
    (root / "env" / "pip-freeze.txt").write_text("torch==2.13.0\n")
    (root / "env" / "wheels" / "k-1.0-py3-none-any.whl").write_bytes(os.urandom(4096))
    (root / "bundle.toml").write_text("format_version = 1\n")
    (root / "odd name\n.txt").write_text("odd\n")


def test_write_manifest_then_verify_and_gnu_agree(tmp_path: Path) -> None:
    make_tree(tmp_path)
    (tmp_path / (MANIFEST_NAME + ".sig")).write_text("signature\n")
    written = write_manifest(tmp_path, jobs=2)
    assert written == tmp_path / MANIFEST_NAME
    manifest = parse_manifest(written.read_bytes(), source=str(written))
    assert [e.path for e in manifest.entries] == [
        "bundle.toml",
        "env/pip-freeze.txt",
        "env/wheels/k-1.0-py3-none-any.whl",
        "odd name\n.txt",
    ]
    assert gnu_verdict(tmp_path, ("--strict",))
    report = verify_directory(tmp_path, written, jobs=2)
    assert report.passed(ignore_missing=False, strict=True)
    assert len(report.verified) == 4
    assert list(tmp_path.glob(".MANIFEST.*")) == []


def test_write_manifest_is_deterministic(tmp_path: Path) -> None:
    make_tree(tmp_path)
    first = write_manifest(tmp_path).read_bytes()
    assert write_manifest(tmp_path, jobs=1).read_bytes() == first


def test_write_manifest_refuses_symlinks(tmp_path: Path) -> None:
    make_tree(tmp_path)
    (tmp_path / "env" / "link").symlink_to("pip-freeze.txt")
    with pytest.raises(ManifestError, match=r"env/link: is a symlink"):
        write_manifest(tmp_path)


def test_verify_reports_every_problem_at_once(tmp_path: Path) -> None:
    make_tree(tmp_path)
    write_manifest(tmp_path)
    (tmp_path / "bundle.toml").write_text("format_version = 2\n")
    (tmp_path / "env" / "pip-freeze.txt").unlink()
    (tmp_path / "env" / "extra.txt").write_text("x")
    (tmp_path / "env" / "wheels" / "k-1.0-py3-none-any.whl").unlink()
    (tmp_path / "env" / "wheels" / "k-1.0-py3-none-any.whl").mkdir()
    os.mkfifo(tmp_path / "fifo")
    (tmp_path / "odd name\n.txt").unlink()
    (tmp_path / "odd name\n.txt").symlink_to(tmp_path.parent)
    report = verify_directory(tmp_path, tmp_path / MANIFEST_NAME, jobs=2)
    assert report.verified == ()
    assert [m.path for m in report.mismatched] == ["bundle.toml"]
    assert report.missing == ("env/pip-freeze.txt",)
    assert [(u.path, u.kind) for u in report.unlisted] == [
        ("env/extra.txt", "file"),
        ("fifo", "fifo"),
    ]
    assert [(u.path, u.reason) for u in report.unreadable] == [
        ("env/wheels/k-1.0-py3-none-any.whl", "is a directory")
    ]
    assert [(r.path, r.lineno) for r in report.rejected] == [("odd name\n.txt", 4)]
    assert "outside the tree" in report.rejected[0].reason


def test_listed_fifo_is_not_opened(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "pipe")
    (tmp_path / "a").write_bytes(ALPHA)
    (tmp_path / MANIFEST_NAME).write_bytes(line(A, b"a") + line(A, b"pipe"))
    report = verify_directory(tmp_path, tmp_path / MANIFEST_NAME, jobs=1)
    assert [(u.path, u.reason) for u in report.unreadable] == [
        ("pipe", "not a regular file (fifo)")
    ]


def test_other_manifest_name_is_exempt_from_unlisted(tmp_path: Path) -> None:
    (tmp_path / "a").write_bytes(ALPHA)
    (tmp_path / "SHA256SUMS").write_bytes(line(A, b"a"))
    (tmp_path / "SHA256SUMS.sig").write_bytes(b"sig")
    report = verify_directory(tmp_path, tmp_path / "SHA256SUMS", jobs=1)
    assert report.passed(ignore_missing=False, strict=True)


def test_unreadable_manifest_is_input_error(tmp_path: Path) -> None:
    with pytest.raises(InputError, match=r"MANIFEST.sha256: cannot read manifest"):
        verify_directory(tmp_path, tmp_path / MANIFEST_NAME, jobs=1)


def test_scan_tree_does_not_follow_symlinked_directories(tmp_path: Path) -> None:
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "f").write_bytes(b"x")
    (tmp_path / "dl").symlink_to("d")
    tree = scan_tree(tmp_path)
    assert tree.files == frozenset({"d/f"})
    assert dict(tree.nonregular) == {"dl": "symlink"}


def test_manifest_entry_equality_ignores_line_number() -> None:
    assert ManifestEntry("a", A, False, 3) == ManifestEntry("a", A, False, 9)


def test_known_digests_are_taken_and_every_other_file_is_hashed(tmp_path: Path) -> None:
    """An unpack hands the digests it took while extracting: those files are not read
    back (a known digest that disagrees is a mismatch, though the file on disk matches);
    files without one are hashed from disk as always (a changed one is caught)."""
    files = {"a.bin": b"alpha" * 1000, "b.bin": b"beta", "sub/c.txt": b"gamma"}
    for rel, data in files.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_bytes(data)
    manifest = format_manifest(
        (rel, hashlib.sha256(data).hexdigest()) for rel, data in sorted(files.items())
    )
    (tmp_path / MANIFEST_NAME).write_bytes(manifest)
    truth = {rel: hashlib.sha256(data).hexdigest() for rel, data in files.items()}
    assert verify_directory(tmp_path, tmp_path / MANIFEST_NAME, jobs=2, known=truth).passed(
        ignore_missing=False, strict=True
    )
    wrong = {**truth, "a.bin": hashlib.sha256(b"not what was written").hexdigest()}
    report = verify_directory(tmp_path, tmp_path / MANIFEST_NAME, jobs=2, known=wrong)
    assert [m.path for m in report.mismatched] == ["a.bin"]
    (tmp_path / "b.bin").write_bytes(b"changed after extraction")
    partial = {"a.bin": truth["a.bin"]}
    report = verify_directory(tmp_path, tmp_path / MANIFEST_NAME, jobs=2, known=partial)
    assert [m.path for m in report.mismatched] == ["b.bin"]
