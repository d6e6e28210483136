"""The patch transaction against a real site-packages installed by pip."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from repro.bundle.patchset import PatchEntry, PatchSet, dump_patchset, load_patchset
from repro.diffapply import unified_diff
from repro.errors import InstallError, PatchConflictError
from repro.hashing import sha256_bytes, sha256_file
from repro.install.transaction import patching
from repro.install.transaction.atomic import atomic_write, exclusive_lock

IDNA = "idna==3.10"


@pytest.fixture(scope="session")
def idna_wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    wheels = tmp_path_factory.mktemp("wheels")
    subprocess.run(
        [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "-d", str(wheels), IDNA],
        check=True,
    )
    return wheels


@pytest.fixture
def site(tmp_path: Path, idna_wheel: Path) -> Path:
    target = tmp_path / "site-packages"
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "-q", "--no-index", "--no-deps",
         "--find-links", str(idna_wheel), "--target", str(target), IDNA],
        check=True,
    )  # fmt: skip
    return target


def _edit_line(text: str, old: str, new: str) -> str:
    assert old in text
    return text.replace(old, new, 1)


def make_patchset(site: Path, bundle: Path) -> PatchSet:
    """Three patched files (two modified, one added) plus one deleted, as pack writes them."""
    entries = []
    edits = {
        "idna/core.py": ("import bisect\n", "import bisect\nPATCHED_CORE = True\n"),
        "idna/codec.py": ("import codecs\n", "import codecs\nPATCHED_CODEC = True\n"),
    }
    for path, (old, new) in edits.items():
        pristine = (site / path).read_text()
        patched = _edit_line(pristine, old, new)
        full = bundle / "full/idna" / path
        full.parent.mkdir(parents=True, exist_ok=True)
        full.write_text(patched)
        diff = bundle / "diffs/idna" / f"{path}.diff"
        diff.parent.mkdir(parents=True, exist_ok=True)
        diff.write_text(unified_diff(pristine, patched, path))
        entries.append(
            PatchEntry("idna", "3.10", path, "modified", sha256_bytes(pristine.encode()),
                       sha256_bytes(patched.encode()), has_diff=True)
        )  # fmt: skip
    added = b"EXTRA = 1\n"
    (bundle / "full/idna/idna/extra.py").write_bytes(added)
    entries.append(PatchEntry("idna", "3.10", "idna/extra.py", "added", None, sha256_bytes(added)))
    deleted = site / "idna/py.typed"
    entries.append(
        PatchEntry("idna", "3.10", "idna/py.typed", "deleted", sha256_file(deleted), None)
    )
    (bundle / "patches.toml").write_bytes(dump_patchset(entries))
    return load_patchset((bundle / "patches.toml").read_bytes(), source="patches.toml")


def snapshot(site: Path) -> dict[str, tuple[bytes, int, int]]:
    out = {}
    for path in sorted((site / "idna").iterdir()):
        if path.is_file():
            st = path.stat()
            out[path.name] = (path.read_bytes(), st.st_mode, st.st_mtime_ns)
    return out


def apply(site: Path, bundle: Path, patchset: PatchSet, **kw: object) -> patching.PatchResult:
    return patching.apply_patches(
        patchset, bundle, site, python=Path(sys.executable), state_dir=site.parent / ".repro",
        **kw,  # type: ignore[arg-type]
    )  # fmt: skip


def test_apply_then_second_run_changes_nothing(site: Path, tmp_path: Path) -> None:
    bundle = tmp_path / "patches"
    patchset = make_patchset(site, bundle)
    result = apply(site, bundle, patchset)
    assert set(result.written) == {"idna/core.py", "idna/codec.py", "idna/extra.py"}
    assert result.deleted == ("idna/py.typed",)
    for entry in patchset.entries:
        target = site / entry.path
        if entry.kind == "deleted":
            assert not target.exists()
        else:
            assert sha256_file(target) == entry.patched_sha256
    before = snapshot(site)
    again = apply(site, bundle, patchset)
    assert not again.changed
    assert len(again.skipped) == 4
    assert snapshot(site) == before


def test_drifted_target_is_patched_through_its_diff(site: Path, tmp_path: Path) -> None:
    bundle = tmp_path / "patches"
    patchset = make_patchset(site, bundle)
    core = site / "idna/core.py"
    core.write_text("# local drift\n" + core.read_text())
    result = apply(site, bundle, patchset)
    assert result.via_diff == ("idna/core.py",)
    text = core.read_text()
    assert text.startswith("# local drift\n") and "PATCHED_CORE = True" in text


def test_conflict_leaves_every_file_untouched(site: Path, tmp_path: Path) -> None:
    bundle = tmp_path / "patches"
    patchset = make_patchset(site, bundle)
    core = site / "idna/core.py"
    core.write_text(core.read_text().replace("import bisect\n", "import bisect as b\n"))
    extra = site / "idna/extra.py"
    extra.write_text("something else\n")
    before = snapshot(site)
    with pytest.raises(PatchConflictError) as info:
        apply(site, bundle, patchset)
    message = str(info.value)
    assert "2 patch conflict(s)" in message
    assert "idna 3.10: idna/core.py" in message and "idna/extra.py" in message
    assert "pristine " in message and "found " in message
    assert snapshot(site) == before


def test_failure_after_second_of_three_files_restores_all(site: Path, tmp_path: Path) -> None:
    bundle = tmp_path / "patches"
    patchset = make_patchset(site, bundle)
    before = snapshot(site)
    calls: list[Path] = []

    def failing_writer(path: Path, data: bytes, mode: int) -> None:
        calls.append(path)
        if len(calls) == 3:
            raise OSError(28, "No space left on device")
        atomic_write(path, data, mode=mode)

    with pytest.raises(InstallError, match="every file was restored"):
        apply(site, bundle, patchset, writer=failing_writer)
    assert len(calls) == 3
    assert {name: v[0] for name, v in snapshot(site).items()} == {
        name: v[0] for name, v in before.items()
    }
    assert not (site.parent / ".repro" / patching.JOURNAL).exists()


def test_syntax_error_is_caught_with_target_interpreter(site: Path, tmp_path: Path) -> None:
    bundle = tmp_path / "patches"
    patchset = make_patchset(site, bundle)
    broken = b"def f(:\n"
    (bundle / "full/idna/idna/extra.py").write_bytes(broken)
    entries = [
        PatchEntry("idna", "3.10", e.path, e.kind, e.pristine_sha256, sha256_bytes(broken))
        if e.path == "idna/extra.py"
        else e
        for e in patchset.entries
    ]
    before = snapshot(site)
    with pytest.raises(PatchConflictError, match=r"idna/extra.py:1"):
        apply(site, bundle, PatchSet(tuple(entries)))
    assert snapshot(site) == before


def test_unpatch_restores_exact_bytes_and_modes(site: Path, tmp_path: Path) -> None:
    bundle = tmp_path / "patches"
    patchset = make_patchset(site, bundle)
    os.chmod(site / "idna/codec.py", 0o640)
    before = {k: v[:2] for k, v in snapshot(site).items()}
    apply(site, bundle, patchset)
    restored = patching.unpatch(site.parent / ".repro", site)
    assert len(restored) == 4
    assert {k: v[:2] for k, v in snapshot(site).items()} == before


def test_version_mismatch_is_a_conflict(site: Path, tmp_path: Path) -> None:
    bundle = tmp_path / "patches"
    patchset = make_patchset(site, bundle)
    other = PatchSet(
        tuple(
            PatchEntry(e.dist, "3.9", e.path, e.kind, e.pristine_sha256, e.patched_sha256)
            for e in patchset.entries
        )
    )
    with pytest.raises(PatchConflictError, match=r"installed version is 3\.10"):
        apply(site, bundle, other)


def test_symlink_out_of_site_packages_refused(site: Path, tmp_path: Path) -> None:
    bundle = tmp_path / "patches"
    patchset = make_patchset(site, bundle)
    outside = tmp_path / "outside"
    outside.mkdir()
    victim = outside / "core.py"
    victim.write_text("precious\n")
    (site / "idna/core.py").unlink()
    (site / "idna/core.py").symlink_to(victim)
    with pytest.raises(PatchConflictError, match="outside"):
        apply(site, bundle, patchset)
    assert victim.read_text() == "precious\n"


KILLER = textwrap.dedent(
    """
    import os, signal, sys
    from pathlib import Path
    from repro.install.transaction import patching
    from repro.bundle.patchset import load_patchset
    site, bundle = Path(sys.argv[1]), Path(sys.argv[2])
    calls = []
    def writer(path, data, mode):
        calls.append(path)
        patching.atomic_write(path, data, mode=mode)
        if len(calls) == 2:
            os.kill(os.getpid(), signal.SIGKILL)
    ps = load_patchset((bundle / "patches.toml").read_bytes(), source="patches.toml")
    patching.apply_patches(ps, bundle, site, python=Path(sys.executable),
                           state_dir=site.parent / ".repro", writer=writer)
    """
)


def test_killed_midway_then_rerun_converges(site: Path, tmp_path: Path) -> None:
    bundle = tmp_path / "patches"
    patchset = make_patchset(site, bundle)
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[3]))
    killed = subprocess.run(
        [sys.executable, "-c", KILLER, str(site), str(bundle)], env=env, check=False
    )
    assert killed.returncode == -9
    assert (site.parent / ".repro" / patching.JOURNAL).exists()
    result = apply(site, bundle, patchset)
    assert result.recovered
    for entry in patchset.entries:
        if entry.kind != "deleted":
            assert sha256_file(site / entry.path) == entry.patched_sha256


def test_lock_refuses_a_second_patcher(site: Path, tmp_path: Path) -> None:
    bundle = tmp_path / "patches"
    patchset = make_patchset(site, bundle)
    state = site.parent / ".repro"
    with exclusive_lock(state / patching.LOCK, what="patching"):
        script = (
            "from pathlib import Path\n"
            "from repro.install.transaction.atomic import exclusive_lock\n"
            f"with exclusive_lock(Path({str(state / patching.LOCK)!r}), what='patching'): pass\n"
        )
        env = dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[3]))
        other = subprocess.run(
            [sys.executable, "-c", script], env=env, capture_output=True, text=True, check=False
        )
        assert other.returncode != 0
        assert "another repro process is patching" in other.stderr
    assert apply(site, bundle, patchset).changed
