from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import pytest

from repro.snapshot.facts.environment import probe_environment
from repro.snapshot.scan.compare import is_ignored, scan_environment
from repro.snapshot.scan.run import ScanRequest, scan_target
from repro.wheel.scripts import split_shebang
from tests.snapshot.conftest import PatchedEnv, Venv, make_venv, pip
from tests.support.run import run_repro


@pytest.mark.slow
def test_scan_finds_exactly_the_patches(patched_env: PatchedEnv) -> None:
    facts = probe_environment(patched_env.venv.python)
    report = scan_environment(facts, ignore=patched_env.ignore)
    assert {(p.dist, p.path, p.kind) for p in report.patched} == patched_env.expected
    assert not report.unreadable and not report.ambiguous_added
    assert "repro-demo-editable" in report.dists_scanned
    by_kind = {p.kind: p for p in report.patched}
    modified = by_kind["modified"]
    core = patched_env.venv.site_packages / "idna" / "core.py"
    assert modified.size == core.stat().st_size
    assert modified.pristine_sha256 and modified.patched_sha256
    assert modified.pristine_sha256 != modified.patched_sha256
    assert by_kind["deleted"].patched_sha256 is None and by_kind["deleted"].pristine_sha256
    assert by_kind["added"].pristine_sha256 is None and by_kind["added"].size == 13


@pytest.mark.slow
def test_scan_without_the_ignore_glob_reports_the_leftover(patched_env: PatchedEnv) -> None:
    facts = probe_environment(patched_env.venv.python)
    report = scan_environment(facts)
    found = {(p.dist, p.path, p.kind) for p in report.patched}
    assert found == patched_env.expected | {("attrs", patched_env.ignored_path, "added")}


@pytest.mark.slow
def test_scan_of_named_packages_only(patched_env: PatchedEnv) -> None:
    facts = probe_environment(patched_env.venv.python)
    report = scan_environment(facts, packages=["Packaging", "six", "not-installed"])
    assert report.dists_scanned == ("packaging", "six")
    assert report.dists_skipped == {"not-installed": "not installed"}
    assert [(p.dist, p.path) for p in report.patched] == [
        ("packaging", "packaging/_repro_added.py")
    ]


@pytest.mark.slow
def test_scan_cli_exit_codes_and_json(patched_env: PatchedEnv) -> None:
    python = str(patched_env.venv.python)
    dirty = run_repro("scan", "--python", python, "--json", "--ignore", "*.orig")
    assert dirty.returncode == 1, dirty.stderr
    document = json.loads(dirty.stdout)
    found = {(p["dist"], p["path"], p["kind"]) for p in document["patched"]}
    assert found == patched_env.expected
    one = run_repro("scan", "--python", python, "--json", "--ignore", "*.orig", "--jobs", "1")
    assert one.returncode == 1 and json.loads(one.stdout) == document  # same with one thread
    # small files hashed by two worker processes (by default only on 4 cores or more)
    procs = run_repro(
        "scan", "--python", python, "--json", "--ignore", "*.orig",
        env={"REPRO_HASH_PROCESSES": "2"},
    )  # fmt: skip
    assert procs.returncode == 1 and json.loads(procs.stdout) == document
    bad = run_repro("scan", "--python", python, env={"REPRO_HASH_PROCESSES": "many"})
    assert bad.returncode == 2 and b"REPRO_HASH_PROCESSES='many'" in bad.stderr
    clean = run_repro("scan", "--venv", str(patched_env.venv.root), "six", "--ignore", "*.orig")
    assert clean.returncode == 0, clean.stderr
    assert b"clean" in clean.stdout
    human = run_repro("scan", "--python", python)
    assert human.returncode == 1
    assert b"idna/core.py" in human.stdout and b"modified" in human.stdout
    # --python takes the venv directory too, and means the same
    by_dir = run_repro("scan", "--python", str(patched_env.venv.root))
    assert (by_dir.returncode, by_dir.stdout) == (1, human.stdout)
    missing = run_repro("scan", "--python", "/nonexistent/python")
    assert missing.returncode == 2 and b"/nonexistent/python" in missing.stderr


@pytest.mark.slow
def test_scan_of_the_real_sglang_wheel(sglang_env: Venv) -> None:
    facts = probe_environment(sglang_env.python)
    start = time.perf_counter()
    clean = scan_environment(facts, packages=["sglang"])
    elapsed = time.perf_counter() - start
    assert clean.clean and clean.files_checked > 3000
    target = sglang_env.site_packages / "sglang" / "srt" / "server_args.py"
    original = target.read_bytes()
    target.write_bytes(original.replace(b"def ", b"def  ", 1))
    try:
        report = scan_environment(facts)
    finally:
        target.write_bytes(original)
    assert [(p.dist, p.path, p.kind) for p in report.patched] == [
        ("sglang", "sglang/srt/server_args.py", "modified")
    ]
    print(f"sglang: {clean.files_checked} files, {clean.bytes_checked} bytes in {elapsed:.2f}s")


@pytest.mark.parametrize(
    ("path", "patterns", "ignored"),
    [
        ("pkg/__pycache__/mod.cpython-311.pyc", (), True),
        ("pkg/mod.pyc", (), True),
        ("pkg/mod.py", (), False),
        ("pkg/mod.py.orig", ("*.orig",), True),
        ("pkg/sub/mod.py", ("pkg/sub/*",), True),
        ("pkg/sub/mod.py", ("other/*",), False),
    ],
)
def test_is_ignored(path: str, patterns: tuple[str, ...], ignored: bool) -> None:
    assert is_ignored(path, patterns) is ignored


@pytest.mark.parametrize(
    ("data", "header", "body"),
    [
        (b"#!/v/bin/python\nimport x\n", b"#!/v/bin/python\n", b"import x\n"),
        (
            b"#!/bin/sh\n'''exec' /long path/python \"$0\" \"$@\"\n' '''\nimport x\n",
            b"#!/bin/sh\n'''exec' /long path/python \"$0\" \"$@\"\n' '''\n",
            b"import x\n",
        ),
        (b"#!python\n", b"#!python\n", b""),
    ],
)
def test_split_shebang(data: bytes, header: bytes, body: bytes) -> None:
    assert split_shebang(data) == (header, body)


def test_split_shebang_of_a_binary() -> None:
    assert split_shebang(b"\x7fELF...") is None


@pytest.mark.slow
def test_scan_cli_shows_diffs_against_the_downloaded_wheel(patched_env: PatchedEnv) -> None:
    result = run_repro("scan", "--python", str(patched_env.venv.python), "idna", "--diff", "--json")
    assert result.returncode == 1, result.stderr
    diffs = json.loads(result.stdout)["diffs"]
    assert list(diffs) == ["idna/core.py"]
    assert diffs["idna/core.py"].startswith("--- a/idna/core.py\n+++ b/idna/core.py\n")
    assert "+# patched by hand\n" in diffs["idna/core.py"]


@pytest.mark.slow
def test_scan_target_is_the_whole_verb_in_one_call(patched_env: PatchedEnv) -> None:
    """What `repro scan --venv V idna --diff --json` prints, from the library alone."""
    request = ScanRequest(venv=patched_env.venv.root, packages=["idna"], diffs=True)
    result = scan_target(request)
    assert result.python == patched_env.venv.python
    assert not result.report.clean
    assert result.diffs is not None and list(result.diffs) == ["idna/core.py"]
    cli = run_repro("scan", "--venv", str(patched_env.venv.root), "idna", "--diff", "--json")
    assert cli.returncode == 1, cli.stderr
    assert json.loads(cli.stdout) == result.to_json()


@pytest.mark.slow
def test_deferred_files_are_read_for_their_crc_and_a_changed_size_is_still_hashed(
    patched_env: PatchedEnv,
) -> None:
    """With defer_sha_from (pack writing to a file), files of the CRC distributions whose
    size is RECORD's are read for their CRC-32 only and taken at RECORD's digest; the
    patch that changed idna/core.py's size is hashed and found as without deferral."""
    facts = probe_environment(patched_env.venv.python)
    every = [d.name for d in facts.distributions]
    plain = scan_environment(facts, ignore=patched_env.ignore, crc_for=every)
    deferred = scan_environment(facts, ignore=patched_env.ignore, crc_for=every, defer_sha_from=1)
    assert {(p.dist, p.path, p.kind) for p in deferred.patched} == patched_env.expected
    assert deferred.deferred and not plain.deferred
    core = str(patched_env.venv.site_packages / "idna" / "core.py")
    assert core not in deferred.deferred
    assert deferred.digests[core].digest == plain.digests[core].digest
    for path in deferred.deferred:
        result = deferred.digests[path]
        assert result.sha_deferred and result.crc32 == plain.digests[path].crc32
        assert result.digest == plain.digests[path].digest  # unpatched: RECORD's is right


def test_an_unreadable_installed_file_is_reported_and_left_out_of_the_digests(
    tmp_path: Path, demo_wheel: Path
) -> None:
    """A file RECORD lists that cannot be read (here a directory where the file was:
    root reads any mode, so no chmod) is reported as unreadable, not as a patch, and the
    scan's digest table (what pack reuses) leaves it out."""
    venv = make_venv(Path(sys.executable), tmp_path / "venv")
    pip(venv, "install", "-q", "--no-index", str(demo_wheel))
    data = venv.site_packages / "demo_wheel" / "data.txt"
    data.unlink()
    data.mkdir()
    facts = probe_environment(venv.python)
    report = scan_environment(facts, packages=["repro-demo-wheel"])
    assert [(u.dist, u.path) for u in report.unreadable] == [
        ("repro-demo-wheel", "demo_wheel/data.txt")
    ]
    assert "directory" in report.unreadable[0].error.lower()
    assert str(data) not in report.digests
    init = str(venv.site_packages / "demo_wheel" / "__init__.py")
    assert report.digests[init].digest is not None
    assert report.patched == ()
