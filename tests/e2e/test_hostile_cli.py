"""Hostile bundles replayed against the real `repro unpack` and `repro check`, under three
interpreters: the default 3.11.7, pyenv's 3.10.13 and Debian's /usr/bin/python3 3.11.2
(whose tarfile has no extraction filters). Each must be refused with a clear message and
a non-zero exit, with nothing written outside the staging directory: no target, no
staging directory left, and the files around it (content, mode, mtime) unchanged."""

from __future__ import annotations

import io
import os
import subprocess
import sys
import tarfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.conftest import REPO_ROOT
from tests.support.bundles import TOP, archive_tree, make_bundle_tree
from tests.support.hostile_archives import CASES, ArchiveMaker

PYENV_310 = (
    Path(os.environ.get("PYENV_ROOT", Path.home() / ".pyenv")) / "versions/3.10.13/bin/python"
)
DEBIAN_PYTHON = Path("/usr/bin/python3")


# --- interpreters ------------------------------------------------------------------------


@dataclass(frozen=True)
class Interpreter:
    label: str
    python: Path
    pythonpath: bool  # run from the source tree (the default) or from an installed venv

    def repro(self, *args: str, cwd: Path) -> subprocess.CompletedProcess[bytes]:
        env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
        if self.pythonpath:
            env["PYTHONPATH"] = str(REPO_ROOT)
        return subprocess.run(
            [str(self.python), "-m", "repro", *args],
            capture_output=True,
            cwd=cwd,
            env=env,
            timeout=300,
            check=False,
        )


def _venv_with_repro(base: Path, root: Path) -> Path:
    subprocess.run([str(base), "-m", "venv", str(root)], check=True, timeout=300)
    python = root / "bin" / "python"
    subprocess.run(
        [str(python), "-m", "pip", "install", "-q", "-e", str(REPO_ROOT)],
        check=True,
        timeout=600,
        capture_output=True,
    )
    return python


@pytest.fixture(scope="session", params=["3.11.7", "3.10.13", "debian-3.11.2"])
def interpreter(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Interpreter:
    label = str(request.param)
    if label == "3.11.7":
        return Interpreter(label, Path(sys.executable), pythonpath=True)
    base = PYENV_310 if label == "3.10.13" else DEBIAN_PYTHON
    python = _venv_with_repro(base, tmp_path_factory.mktemp(f"venv-{label}") / "venv")
    return Interpreter(label, python, pythonpath=False)


# --- cases -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Hostile:
    id: str
    build: Callable[[Path], Path]  # writes the hostile bundle under a directory, returns it
    words: str  # the message must say this


def _bytes_case(data: Callable[[], bytes]) -> Callable[[Path], Path]:
    def build(where: Path) -> Path:
        path = where / "bundle.tar"
        path.write_bytes(data())
        return path

    return build


def _base() -> ArchiveMaker:
    return ArchiveMaker().top().add(f"{TOP}/ok.txt", data=b"fine\n")


def _symlink_chain() -> bytes:
    return (
        _base()
        .add(f"{TOP}/current", type=tarfile.SYMTYPE, linkname=".")
        .add(f"{TOP}/parent", type=tarfile.SYMTYPE, linkname="current/..")
        .add(f"{TOP}/parent/evil", data=b"pwned")
        .bytes()
    )


def _hardlink_to_symlink() -> bytes:
    return (
        _base()
        .add(f"{TOP}/sym", type=tarfile.SYMTYPE, linkname="/etc/passwd")
        .add(f"{TOP}/hard", type=tarfile.LNKTYPE, linkname=f"{TOP}/sym")
        .bytes()
    )


def _deep_chain() -> bytes:
    """CPython's test_deep_symlink shape: directories and symlinks nested until the
    resolved path is past PATH_MAX, then a link that climbs out."""
    maker = _base()
    path = TOP
    for level in range(20):
        path = f"{path}/{chr(97 + level) * 240}"
        maker.add(f"{path}/", type=tarfile.DIRTYPE)
        maker.add(f"{path}/l", type=tarfile.SYMTYPE, linkname="../" * (level + 2))
    return maker.add(f"{path}/l/escaped", data=b"x").bytes()


def _huge_claimed_size() -> bytes:
    info = tarfile.TarInfo(f"{TOP}/huge")
    info.size = 1 << 40  # 1 TiB claimed, no data follows
    top = tarfile.TarInfo(f"{TOP}/")
    top.type, top.mode = tarfile.DIRTYPE, 0o755
    return (
        top.tobuf(format=tarfile.PAX_FORMAT) + info.tobuf(format=tarfile.PAX_FORMAT) + bytes(1024)
    )


def _many_members() -> bytes:
    """200,001 tiny members: one past the reader's default limit of 200,000."""
    out = io.BytesIO()
    top = tarfile.TarInfo(f"{TOP}/")
    top.type, top.mode = tarfile.DIRTYPE, 0o755
    out.write(top.tobuf(format=tarfile.USTAR_FORMAT))
    for index in range(200_001):
        info = tarfile.TarInfo(f"{TOP}/d/{index}")
        info.type, info.mode = tarfile.DIRTYPE, 0o755
        out.write(info.tobuf(format=tarfile.USTAR_FORMAT))
    out.write(bytes(1024))
    return out.getvalue()


def _tree_case(rel: str, data: bytes) -> Callable[[Path], Path]:
    def build(where: Path) -> Path:
        tree = make_bundle_tree(where / "src", files={rel: data})
        return archive_tree(tree, where / "bundle.tar")

    return build


def _manifest_outside(where: Path) -> Path:
    tree = make_bundle_tree(where / "src")
    manifest = tree / "MANIFEST.sha256"
    manifest.write_bytes(manifest.read_bytes() + b"0" * 64 + b"  ../outside.txt\n")
    return archive_tree(tree, where / "bundle.tar")


_PATCH = (
    'format_version = 1\n\n[[files]]\ndist = "idna"\nversion = "3.7"\npath = "{path}"\n'
    'kind = "added"\npatched_sha256 = "' + "a" * 64 + '"\n'
)
PATCHES = "patches/patches.toml"
_UNIT = (
    "[Unit]\nDescription=x\n[Service]\nExecStart=/bin/true\n[Install]\nWantedBy=multi-user.target\n"
)

ARCHIVE_CASES = [
    Hostile(c.id, _bytes_case(c.build), c.member)
    for c in CASES
    if not c.limits and c.id not in ("not-an-archive", "empty-file")
]
CONTENT_CASES = [
    Hostile("symlink-chain-current-parent", _bytes_case(_symlink_chain), f"{TOP}/current"),
    Hostile(
        "hardlink-relative-out",
        _bytes_case(
            lambda: _base().add(f"{TOP}/h", type=tarfile.LNKTYPE, linkname="../../x").bytes()
        ),
        "hard link",
    ),
    Hostile("hardlink-to-symlink", _bytes_case(_hardlink_to_symlink), f"{TOP}/sym"),
    Hostile("deep-symlink-chain-past-path-max", _bytes_case(_deep_chain), "symbolic link"),
    Hostile("huge-claimed-size", _bytes_case(_huge_claimed_size), "over the limit"),
    Hostile("manifest-lists-path-outside", _manifest_outside, "../outside.txt"),
    Hostile(
        "bundle-toml-wrong-types",
        _tree_case("bundle.toml", b"format_version = 1\nname = 5\nversion = [1]\n"),
        "bundle.toml",
    ),
    Hostile(
        "bundle-toml-future-format",
        _tree_case("bundle.toml", b'format_version = 99\nname = "demo"\n'),
        "newer than this repro supports",
    ),
    Hostile(
        "patch-path-dotdot", _tree_case(PATCHES, _PATCH.format(path="../../x").encode()), "'..'"
    ),
    Hostile(
        "patch-path-absolute", _tree_case(PATCHES, _PATCH.format(path="/etc/x").encode()), "/etc/x"
    ),
    Hostile(
        "unit-alias-other-name",
        _tree_case("services/app.service", (_UNIT + "Alias=sshd.service\n").encode()),
        "would also be installed as 'sshd.service'",
    ),
    Hostile(
        "unit-not-a-unit-name",
        _tree_case("services/app.conf", _UNIT.encode()),
        "is not a systemd unit name",
    ),
]

ARCHIVE_ONLY = [*ARCHIVE_CASES, *CONTENT_CASES[:5], CONTENT_CASES[5]]  # check sees these
ALL_CASES = [*ARCHIVE_CASES, *CONTENT_CASES]


# --- the outside world ---------------------------------------------------------------------


def tree_state(root: Path) -> dict[str, tuple[str, int, int, bytes | str]]:
    """Every path under root: kind, mode, mtime (ns) and content (or link target)."""
    state: dict[str, tuple[str, int, int, bytes | str]] = {}
    for path in sorted(root.rglob("*")):
        info = path.lstat()
        rel = path.relative_to(root).as_posix()
        if path.is_symlink():
            state[rel] = ("link", info.st_mode, info.st_mtime_ns, os.readlink(path))
        elif path.is_dir():
            state[rel] = ("dir", info.st_mode, info.st_mtime_ns, b"")
        else:
            state[rel] = ("file", info.st_mode, info.st_mtime_ns, path.read_bytes())
    return state


@dataclass(frozen=True)
class World:
    root: Path  # holds the bundle, an outside directory with a canary, the target's parent
    dest: Path  # the target's parent: holds a sibling file
    outside: Path

    @property
    def target(self) -> Path:
        return self.dest / "target"


def make_world(tmp_path: Path) -> World:
    world = World(tmp_path, tmp_path / "dest", tmp_path / "outside")
    world.dest.mkdir()
    world.outside.mkdir()
    canary = world.outside / "canary.txt"
    canary.write_bytes(b"canary\n")
    canary.chmod(0o640)
    os.utime(canary, ns=(1_000_000_000, 1_000_000_000))
    sibling = world.dest / "sibling.txt"
    sibling.write_bytes(b"sibling\n")
    os.utime(sibling, ns=(2_000_000_000, 2_000_000_000))
    (world.outside / "etc").mkdir()
    return world


def assert_refused(proc: subprocess.CompletedProcess[bytes], words: str) -> None:
    """Refused with `words` said: an error on stderr, or a verb's report of the problems
    (check's goes to stdout, where its results go)."""
    err = proc.stderr.decode("utf-8", "replace")
    out = proc.stdout.decode("utf-8", "replace")
    assert proc.returncode != 0, err
    assert "Traceback" not in err + out, err
    assert words in err + out, err + out


def _unpack_refused(
    interpreter: Interpreter, world: World, bundle: Path, words: str, *, target_exists: bool = False
) -> None:
    before = tree_state(world.root)
    proc = interpreter.repro(
        "unpack", str(bundle), "--target", str(world.target), "--cpu", cwd=world.dest
    )
    assert_refused(proc, words)
    assert "repro: error:" in proc.stderr.decode("utf-8", "replace")
    assert world.target.is_symlink() == target_exists
    after = tree_state(world.root)
    # The staging directory is made and removed in the target's parent, which changes
    # that directory's mtime and nothing else: no entry is left, none is changed.
    before.pop("dest"), after.pop("dest")
    assert after == before


@pytest.mark.slow
@pytest.mark.parametrize("case", ALL_CASES, ids=[c.id for c in ALL_CASES])
def test_unpack_refuses(interpreter: Interpreter, tmp_path: Path, case: Hostile) -> None:
    world = make_world(tmp_path)
    bundle = case.build(world.root)
    _unpack_refused(interpreter, world, bundle, case.words)


@pytest.mark.slow
@pytest.mark.parametrize("case", ARCHIVE_ONLY, ids=[c.id for c in ARCHIVE_ONLY])
def test_check_refuses(interpreter: Interpreter, tmp_path: Path, case: Hostile) -> None:
    world = make_world(tmp_path)
    bundle = case.build(world.root)
    before = tree_state(world.root)
    assert_refused(interpreter.repro("check", str(bundle), cwd=world.dest), case.words)
    assert tree_state(world.root) == before


@pytest.fixture(scope="session")
def many_members(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("many") / "bundle.tar"
    path.write_bytes(_many_members())
    return path


@pytest.mark.slow
def test_many_tiny_members_refused(
    interpreter: Interpreter, tmp_path: Path, many_members: Path
) -> None:
    world = make_world(tmp_path)
    _unpack_refused(interpreter, world, many_members, "past the limit of 200000 members")
    assert_refused(interpreter.repro("check", str(many_members), cwd=world.dest), "past the limit")


@pytest.mark.slow
def test_destination_symlink_is_not_written_through(
    interpreter: Interpreter, tmp_path: Path
) -> None:
    """The target path is a symlink to a directory outside: a good bundle must not be
    unpacked through it."""
    world = make_world(tmp_path)
    bundle = archive_tree(make_bundle_tree(world.root / "src"), world.root / "bundle.tar")
    world.target.symlink_to(world.outside)
    _unpack_refused(interpreter, world, bundle, "is a symbolic link", target_exists=True)


@pytest.mark.slow
def test_a_good_bundle_passes_the_same_path(interpreter: Interpreter, tmp_path: Path) -> None:
    """The control: the base every case changes one thing in is accepted (dry run)."""
    world = make_world(tmp_path)
    bundle = archive_tree(make_bundle_tree(world.root / "src"), world.root / "bundle.tar")
    proc = interpreter.repro("check", str(bundle), cwd=world.dest)
    assert proc.returncode == 0, proc.stderr.decode()
    proc = interpreter.repro(
        "unpack", str(bundle), "--target", str(world.target), "--cpu", "--dry-run", cwd=world.dest
    )
    assert proc.returncode == 0, proc.stderr.decode()
    assert not world.target.exists()
