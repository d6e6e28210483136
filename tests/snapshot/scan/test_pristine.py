from __future__ import annotations

import hashlib
import shutil
import subprocess
import zipfile
from pathlib import Path

import pytest

from repro.config import WorkspaceTarget
from repro.errors import ConfigError
from repro.snapshot.facts.environment import probe_environment
from repro.snapshot.scan.compare import PatchedFile, scan_environment
from repro.snapshot.scan.keptpatches import load_workspace_patches
from repro.snapshot.scan.pristine import PristineCache, make_diff, pristine_file
from tests.snapshot.conftest import PatchedEnv


def _modified(patched_env: PatchedEnv) -> PatchedFile:
    facts = probe_environment(patched_env.venv.python)
    report = scan_environment(facts, packages=["idna"])
    (item,) = [p for p in report.patched if p.kind == "modified"]
    return item


@pytest.mark.slow
def test_pristine_by_download_and_a_diff_that_patch_applies(
    patched_env: PatchedEnv, tmp_path: Path
) -> None:
    item = _modified(patched_env)
    cache = PristineCache(patched_env.venv.python, tmp_path / "downloads")
    original = pristine_file(
        item.dist, item.version, item.path, expected_sha256=item.pristine_sha256, cache=cache
    )
    assert original is not None
    assert hashlib.sha256(original).hexdigest() == item.pristine_sha256
    patched = (patched_env.venv.site_packages / item.path).read_bytes()
    diff = make_diff(original, patched, item.path)
    assert diff.startswith(f"--- a/{item.path}\n+++ b/{item.path}\n")
    assert "+# patched by hand\n" in diff
    tree = tmp_path / "tree"
    (tree / "idna").mkdir(parents=True)
    (tree / item.path).write_bytes(original)
    subprocess.run(["patch", "-p1", "-s"], input=diff.encode(), cwd=tree, check=True, timeout=60)
    assert (tree / item.path).read_bytes() == patched

    # the downloaded wheel and an unpacked tree of it also serve as --pristine
    (wheel,) = (tmp_path / "downloads").rglob("idna-*.whl")
    offline = PristineCache(patched_env.venv.python, tmp_path / "none", download=False)
    for source in (wheel, _unpack(wheel, tmp_path / "unpacked")):
        got = pristine_file(
            item.dist,
            item.version,
            item.path,
            expected_sha256=item.pristine_sha256,
            pristine=source,
            cache=offline,
        )
        assert got == original
    # a pristine tree whose file does not match RECORD is not used
    tampered = _unpack(wheel, tmp_path / "tampered")
    (tampered / item.path).write_bytes(b"not the original\n")
    rejected = pristine_file(
        item.dist,
        item.version,
        item.path,
        expected_sha256=item.pristine_sha256,
        pristine=tampered,
        cache=offline,
    )
    assert rejected is None


def _unpack(wheel: Path, target: Path) -> Path:
    with zipfile.ZipFile(wheel) as archive:
        archive.extractall(target)
    return target


@pytest.mark.slow
def test_pristine_from_pip_cache_layouts(patched_env: PatchedEnv, tmp_path: Path) -> None:
    """A test double of pip's cache directory (this machine's index proxy sends no cache
    headers, so pip never fills http-v2 here): the real wheel placed where pip keeps locally
    built wheels, and as an HTTP-cache `.body` file."""
    item = _modified(patched_env)
    downloads = tmp_path / "dl"
    PristineCache(patched_env.venv.python, downloads).wheels("idna", item.version)
    (wheel,) = downloads.rglob("idna-*.whl")
    for layout in ("wheels", "http-v2"):
        cache_dir = tmp_path / f"cache-{layout}"
        if layout == "wheels":
            target = cache_dir / "wheels" / "ab" / "cd" / wheel.name
        else:
            target = cache_dir / "http-v2" / "a" / "b" / "c" / "0123456789abcdef.body"
        target.parent.mkdir(parents=True)
        shutil.copyfile(wheel, target)
        (target.parent / "junk.body").write_bytes(b"not a zip")
        cache = PristineCache(
            patched_env.venv.python, tmp_path / "unused", pip_cache=cache_dir, download=False
        )
        data = pristine_file(
            "IDNA", item.version, item.path, expected_sha256=item.pristine_sha256, cache=cache
        )
        assert data is not None, layout
        assert hashlib.sha256(data).hexdigest() == item.pristine_sha256


def test_make_diff_edge_cases() -> None:
    assert (
        make_diff(b"\x00\x01", b"\x00\x02", "p/x.so")
        == "Binary files a/p/x.so and b/p/x.so differ\n"
    )
    diff = make_diff(b"a\nb", b"a\nc", "p/m.py")
    assert diff.endswith("-b\n\\ No newline at end of file\n+c\n\\ No newline at end of file\n")
    assert make_diff(b"same\n", b"same\n", "p/m.py") == ""


@pytest.mark.slow
def test_workspace_patches_are_mapped_through_the_config(
    patched_env: PatchedEnv, tmp_path: Path
) -> None:
    facts = probe_environment(patched_env.venv.python)
    patches = tmp_path / "patches"
    (patches / "full" / "python" / "idna").mkdir(parents=True)
    (patches / "diffs" / "python" / "idna").mkdir(parents=True)
    core = (patched_env.venv.site_packages / "idna" / "core.py").read_bytes()
    (patches / "full" / "python" / "idna" / "core.py").write_bytes(core)
    (patches / "diffs" / "python" / "idna" / "core.py.diff").write_text("--- a\n+++ b\n")
    (patches / "full" / "python" / "idna" / "extra.py").write_text("X = 1\n")
    mapping = {"python/idna": WorkspaceTarget(dist="idna", prefix="idna")}
    loaded = load_workspace_patches(patches, mapping, facts=facts)
    by_path = {p.file.path: p for p in loaded}
    assert set(by_path) == {"idna/core.py", "idna/extra.py"}
    core_patch = by_path["idna/core.py"]
    assert core_patch.file.kind == "modified" and core_patch.content == core
    assert core_patch.file.pristine_sha256 is not None
    assert core_patch.file.patched_sha256 == hashlib.sha256(core).hexdigest()
    assert core_patch.diff == "--- a\n+++ b\n"
    assert by_path["idna/extra.py"].file.kind == "added"
    assert by_path["idna/extra.py"].diff is None
    (patches / "full" / "stray.py").write_text("")
    with pytest.raises(ConfigError, match=r"no \[patches\.workspace\] map entry for: stray\.py"):
        load_workspace_patches(patches, mapping, facts=facts)
