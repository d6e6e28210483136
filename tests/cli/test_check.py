"""`repro check` through the real CLI, plus target dispatch and the progress bar."""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import os
import pty
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest
from rich.console import Console

from repro.bundle.manifest import MANIFEST_NAME
from repro.bundle.manifesttree import write_manifest
from repro.cli._progress import IMMEDIATE_BYTES, HashProgressBar, hash_progress
from repro.errors import ArchiveError, InputError
from repro.verbs.check import CheckOptions, TargetKind, check_target, classify_target
from tests.conftest import REPO_ROOT, read_pty
from tests.support.run import run_repro


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


@pytest.fixture
def bundle(tmp_path: Path) -> Path:
    root = tmp_path / "demo-1.0"
    (root / "env").mkdir(parents=True)
    (root / "bundle.toml").write_text('name = "demo"\n')
    (root / "env" / "requirements.lock").write_text("torch==2.13.0\n")
    (root / "files").mkdir()
    (root / "files" / "bench results.json").write_text("{}\n")
    write_manifest(root)
    return root


def test_good_bundle_directory_passes(bundle: Path) -> None:
    result = run_repro("check", str(bundle))
    assert result.returncode == 0, result.stderr
    assert b"OK: 3 verified" in result.stdout
    assert result.stderr == b""


def test_manifest_file_target_passes(bundle: Path) -> None:
    result = run_repro("check", MANIFEST_NAME, cwd=bundle)
    assert result.returncode == 0, result.stderr


def test_verbose_lists_verified_files_and_quiet_prints_nothing(bundle: Path) -> None:
    verbose = run_repro("check", "-v", str(bundle))
    assert verbose.returncode == 0
    for name in (b"bundle.toml", b"env/requirements.lock", b"files/bench results.json"):
        assert b"OK         " + name in verbose.stdout
    assert verbose.stderr == b""
    quiet = run_repro("check", "--quiet", str(bundle))
    assert (quiet.returncode, quiet.stdout, quiet.stderr) == (0, b"", b"")


def test_mismatch_names_file_and_both_digests(bundle: Path) -> None:
    (bundle / "env" / "requirements.lock").write_text("torch==2.12.0\n")
    result = run_repro("check", str(bundle))
    assert result.returncode == 1
    stdout = result.stdout.decode()
    assert "MISMATCH   env/requirements.lock" in stdout
    assert f"expected {sha(b'torch==2.13.0' + bytes([10]))}" in stdout
    assert f"actual   {sha(b'torch==2.12.0' + bytes([10]))}" in stdout
    assert "FAILED" in stdout


def test_all_problems_reported_at_once_in_json(bundle: Path) -> None:
    (bundle / "bundle.toml").write_text("tampered\n")
    (bundle / "files" / "bench results.json").unlink()
    (bundle / "files" / "new.txt").write_text("new\n")
    with (bundle / MANIFEST_NAME).open("ab") as stream:
        stream.write(b"not a checksum line\n")
    result = run_repro("check", "--json", str(bundle))
    assert result.returncode == 1
    document = json.loads(result.stdout)
    assert document["passed"] is False
    assert document["target"] == str(bundle)
    assert document["manifest"] == str(bundle / MANIFEST_NAME)
    assert (document["strict"], document["ignore_missing"]) == (False, False)
    assert document["counts"] == {
        "verified": 1,
        "mismatched": 1,
        "missing": 1,
        "unlisted": 1,
        "malformed": 1,
        "unreadable": 0,
        "rejected": 0,
    }
    assert document["verified"] == ["env/requirements.lock"]
    assert document["mismatched"][0]["path"] == "bundle.toml"
    assert document["mismatched"][0]["actual"] == sha(b"tampered\n")
    assert document["missing"] == ["files/bench results.json"]
    assert document["unlisted"] == [{"path": "files/new.txt", "kind": "file"}]
    assert document["malformed"][0]["line"] == 4
    assert document["malformed"][0]["text"] == "not a checksum line"


def test_json_on_success(bundle: Path) -> None:
    result = run_repro("check", "--json", "--strict", str(bundle))
    assert result.returncode == 0
    document = json.loads(result.stdout)
    assert document["passed"] is True
    assert document["counts"]["verified"] == 3
    assert sorted(document) == sorted(
        [
            "counts",
            "ignore_missing",
            "malformed",
            "manifest",
            "mismatched",
            "missing",
            "passed",
            "rejected",
            "strict",
            "target",
            "unlisted",
            "unreadable",
            "verified",
        ]
    )


def test_strict_makes_malformed_lines_fatal(bundle: Path) -> None:
    with (bundle / MANIFEST_NAME).open("ab") as stream:
        stream.write(sha(b"x")[:60].encode() + b"  a name long enough for the length check\n")
    lenient = run_repro("check", str(bundle))
    assert lenient.returncode == 0
    assert b"MANIFEST.sha256:4: digest has 60 characters, expected 64" in lenient.stdout
    strict = run_repro("check", "--strict", str(bundle))
    assert strict.returncode == 1
    assert b"MANIFEST.sha256:4:" in strict.stdout


def test_ignore_missing(bundle: Path) -> None:
    (bundle / "bundle.toml").unlink()
    assert run_repro("check", str(bundle)).returncode == 1
    result = run_repro("check", "--ignore-missing", str(bundle))
    assert result.returncode == 0, result.stderr
    assert b"1 missing (ignored)" in result.stdout


def test_ignore_missing_fails_when_nothing_verified(tmp_path: Path) -> None:
    (tmp_path / MANIFEST_NAME).write_bytes(sha(b"x").encode() + b"  gone\n")
    result = run_repro("check", "--ignore-missing", str(tmp_path))
    assert result.returncode == 1
    assert b"no file was verified" in result.stdout


def test_unlisted_file_fails(bundle: Path) -> None:
    (bundle / "env" / "stray.pyc").write_bytes(b"\0")
    result = run_repro("check", str(bundle))
    assert result.returncode == 1
    assert b"UNLISTED   env/stray.pyc" in result.stdout


def test_symlink_escaping_the_tree_is_refused(bundle: Path, tmp_path: Path) -> None:
    secret = tmp_path / "secret"
    secret.write_bytes(b"outside\n")
    (bundle / "link").symlink_to(secret)
    with (bundle / MANIFEST_NAME).open("ab") as stream:
        stream.write(sha(b"outside\n").encode() + b"  link\n")
    result = run_repro("check", str(bundle))
    assert result.returncode == 1
    stdout = result.stdout.decode()
    assert "REJECTED" in stdout
    assert f"link: resolves through a symlink to {secret}, outside the tree" in stdout


def test_path_escapes_fail_even_without_strict(bundle: Path) -> None:
    with (bundle / MANIFEST_NAME).open("ab") as stream:
        stream.write(sha(b"x").encode() + b"  ../../etc/passwd\n")
        stream.write(sha(b"x").encode() + b"  bundle.toml\n")
    result = run_repro("check", "--ignore-missing", str(bundle))
    assert result.returncode == 1
    stdout = result.stdout.decode()
    assert "MANIFEST.sha256:4: ../../etc/passwd: '..' component escapes the tree" in stdout
    assert "MANIFEST.sha256:5: bundle.toml: listed twice (first on line 1)" in stdout


def test_missing_target_is_exit_2_naming_it(tmp_path: Path) -> None:
    missing = tmp_path / "no-such-bundle"
    result = run_repro("check", str(missing))
    assert result.returncode == 2
    assert f"{missing}: no such file or directory".encode() in result.stderr
    assert b"Traceback" not in result.stderr


def test_directory_without_manifest_is_exit_2(tmp_path: Path) -> None:
    result = run_repro("check", str(tmp_path))
    assert result.returncode == 2
    assert f"{tmp_path}: no MANIFEST.sha256 in this directory".encode() in result.stderr


def test_archive_made_by_another_tar_writer_is_checked(bundle: Path, tmp_path: Path) -> None:
    archive = tmp_path / "bundle.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        tar.add(bundle, arcname=bundle.name)
    result = run_repro("check", str(archive))
    assert result.returncode == 0, result.stderr.decode()
    assert b"OK" in result.stdout


def test_bad_jobs_is_usage_error(bundle: Path) -> None:
    result = run_repro("check", "--jobs", "0", str(bundle))
    assert result.returncode == 2


def test_jobs_one_gives_same_result(bundle: Path) -> None:
    result = run_repro("check", "--jobs", "1", "--json", str(bundle))
    assert json.loads(result.stdout)["counts"]["verified"] == 3


def test_worker_processes_report_what_threads_report(tmp_path: Path) -> None:
    """A bundle directory of many small files (one tampered, one missing, one unlisted)
    checked with its hashing in two worker processes and in threads only: the same report."""
    root = tmp_path / "many-1"
    for index in range(600):
        path = root / "files" / f"d{index % 9}" / f"f{index}.txt"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(os.urandom(index * 7))
    write_manifest(root)
    (root / "files" / "d3" / "f12.txt").write_bytes(b"tampered")
    (root / "files" / "d4" / "f13.txt").unlink()
    (root / "files" / "new.txt").write_text("unlisted\n")
    reports = []
    for setting in ("2", "0"):
        result = run_repro("check", "--json", str(root), env={"REPRO_HASH_PROCESSES": setting})
        assert result.returncode == 1, result.stderr.decode()
        reports.append(json.loads(result.stdout))
    assert reports[0] == reports[1]
    counts = reports[0]["counts"]
    assert counts["verified"] == 598
    assert (counts["mismatched"], counts["missing"], counts["unlisted"]) == (1, 1, 1)


def test_awkward_names_are_shown_on_one_line(tmp_path: Path) -> None:
    (tmp_path / "new\nline").write_bytes(b"a")
    write_manifest(tmp_path)
    (tmp_path / "new\nline").write_bytes(b"b")
    result = run_repro("check", str(tmp_path))
    assert result.returncode == 1
    assert b"MISMATCH   'new\\nline'" in result.stdout


def test_no_progress_output_when_stderr_is_not_a_terminal(bundle: Path) -> None:
    result = run_repro("check", str(bundle))
    assert b"\x1b[" not in result.stderr


def test_progress_bar_on_a_terminal(bundle: Path) -> None:
    """Runs the CLI with stderr on a real pseudo-terminal."""
    main, secondary = pty.openpty()
    env = dict(os.environ, PYTHONPATH=str(REPO_ROOT), TERM="xterm", COLUMNS="100")
    with subprocess.Popen(
        [sys.executable, "-m", "repro", "check", str(bundle)],
        stdout=subprocess.PIPE,
        stderr=secondary,
        env=env,
    ) as process:
        os.close(secondary)
        output = read_pty(main)
        assert process.stdout is not None
        stdout = process.stdout.read()
        assert process.wait(timeout=60) == 0
    os.close(main)
    # the verdict is the result: stdout; the terminal (stderr) had the bar, if any
    assert b"OK: 3 verified" in stdout
    assert b"OK: 3 verified" not in output


def test_progress_bar_renders_bytes_and_rate() -> None:
    buffer = io.StringIO()
    console = Console(file=buffer, force_terminal=True, width=120)
    with hash_progress(console) as bar:
        assert isinstance(bar, HashProgressBar)
        bar.start(IMMEDIATE_BYTES, 2)
        bar.advance(IMMEDIATE_BYTES // 2)
        bar.advance(IMMEDIATE_BYTES // 2)
    rendered = buffer.getvalue()
    assert "hashing 2 files" in rendered
    assert "268.4 MB" in rendered


def test_no_progress_bar_without_terminal() -> None:
    console = Console(file=io.StringIO(), force_terminal=False)
    with hash_progress(console) as bar:
        assert bar is None


@pytest.mark.parametrize(
    ("name", "content", "kind"),
    [
        (MANIFEST_NAME, sha(b"x").encode() + b"  a\n", TargetKind.MANIFEST),
        ("SHA256SUMS", sha(b"x").encode() + b"  a\n", TargetKind.MANIFEST),
        ("empty.sha256", b"", TargetKind.MANIFEST),
        ("notes.txt", b"just some text\n", TargetKind.ARCHIVE),
        ("bundle.tar.zst", b"", TargetKind.ARCHIVE),
        ("noext", gzip.compress(b"x", mtime=0), TargetKind.ARCHIVE),
        ("noext2", b"\x28\xb5\x2f\xfd" + b"\0" * 10, TargetKind.ARCHIVE),
    ],
)
def test_classify_target(tmp_path: Path, name: str, content: bytes, kind: TargetKind) -> None:
    (tmp_path / name).write_bytes(content)
    assert classify_target(str(tmp_path / name)) is kind


def test_classify_plain_tar_by_content(tmp_path: Path) -> None:
    (tmp_path / "f").write_bytes(b"x")
    with tarfile.open(tmp_path / "renamed.sha256", "w") as tar:
        tar.add(tmp_path / "f", arcname="f")
    assert classify_target(str(tmp_path / "renamed.sha256")) is TargetKind.ARCHIVE


def test_classify_directory_and_stdin(tmp_path: Path) -> None:
    assert classify_target(str(tmp_path)) is TargetKind.DIRECTORY
    assert classify_target("-") is TargetKind.ARCHIVE
    with pytest.raises(InputError, match="no such file"):
        classify_target(str(tmp_path / "missing"))


def test_check_target_dispatches_archives_to_the_archive_reader(tmp_path: Path) -> None:
    junk = tmp_path / "junk.tar"
    junk.write_bytes(b"not an archive" * 100)
    with pytest.raises(ArchiveError, match=r"junk\.tar"):
        check_target(str(junk), CheckOptions())
