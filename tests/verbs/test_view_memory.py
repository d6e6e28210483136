"""`repro inspect`, `diff` and `sbom` hold a fixed budget of member bytes in memory,
whatever the bundle (repro.verbs.view.MemberBudget).

A real bundle (tests/support/bundles.py) given 300 members of 2 MiB of zeros under files/ (each
at the size a shown member may have), re-manifested and written as a .tar.gz of a few
MB: the peak RSS of the real CLI in a subprocess, as the kernel counts it
(RUSAGE_CHILDREN of a wrapper process that runs only that command), stays under a
fixed bound (before: 548 MiB for inspect). A member the verbs parse that is larger than
their limit is an error naming it and the limit.
"""

from __future__ import annotations

import hashlib
import io
import sys
import tarfile
from pathlib import Path

import pytest

from repro.bundle.limits import KEEP_LIMIT, PARSED_LIMIT, SHOWN_BUDGET
from repro.bundle.manifest import MANIFEST_NAME, format_manifest
from tests.conftest import REPO_ROOT
from tests.support.bundles import TOP, make_bundle_tree

BLOBS = 300
RSS_BOUND_MIB = 200
_WRAPPER = (
    "import resource, subprocess, sys\n"
    "done = subprocess.run(sys.argv[2:], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)\n"
    "peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss\n"
    "open(sys.argv[1], 'w').write(str(peak))\n"
    "sys.stderr.write(done.stderr.decode())\n"
    "sys.exit(done.returncode)\n"
)


class _Zeros(io.RawIOBase):
    """`size` zero bytes, read in chunks: the archive is written without 600 MiB on disk."""

    def __init__(self, size: int) -> None:
        self.left = size

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: memoryview) -> int:  # type: ignore[override]
        count = min(len(buffer), self.left)
        buffer[:count] = bytes(count)
        self.left -= count
        return count


def _bundle_of_zeros(tmp_path: Path, extra: dict[str, bytes] | None = None) -> Path:
    """The base bundle plus BLOBS members of KEEP_LIMIT zeros under files/, manifested,
    as one .tar.gz; `extra` adds or replaces small members."""
    tree = make_bundle_tree(tmp_path / "base", files=extra or {}, manifest=False)
    small = {p.relative_to(tree).as_posix(): p.read_bytes() for p in tree.rglob("*") if p.is_file()}
    zero_digest = hashlib.sha256(bytes(KEEP_LIMIT)).hexdigest()
    blobs = [f"files/blob-{index:03d}.bin" for index in range(BLOBS)]
    digests = [(rel, hashlib.sha256(data).hexdigest()) for rel, data in small.items()]
    manifest = format_manifest([*digests, *((rel, zero_digest) for rel in blobs)])
    archive = tmp_path / f"{TOP}.tar.gz"
    with tarfile.open(archive, "w:gz", format=tarfile.PAX_FORMAT, compresslevel=1) as out:
        for rel, data in sorted(small.items()):
            info = tarfile.TarInfo(f"{TOP}/{rel}")
            info.size = len(data)
            out.addfile(info, io.BytesIO(data))
        for rel in blobs:
            info = tarfile.TarInfo(f"{TOP}/{rel}")
            info.size = KEEP_LIMIT
            out.addfile(info, io.BufferedReader(_Zeros(KEEP_LIMIT)))
        info = tarfile.TarInfo(f"{TOP}/{MANIFEST_NAME}")
        info.size = len(manifest)
        out.addfile(info, io.BytesIO(manifest))
    assert archive.stat().st_size < 16 << 20  # a small download, a large inflation
    return archive


def _peak_rss_mib(tmp_path: Path, *args: str) -> tuple[int, float, str]:
    """Run the real CLI once under a wrapper; its exit code, peak RSS and stderr."""
    import subprocess

    peak_file = tmp_path / "peak"
    command = [sys.executable, "-m", "repro", *args]
    done = subprocess.run(
        [sys.executable, "-c", _WRAPPER, str(peak_file), *command],
        capture_output=True,
        timeout=600,
        cwd=tmp_path,  # `-m` puts the working directory first on sys.path
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(REPO_ROOT), "HOME": str(tmp_path)},
        check=False,
    )
    return done.returncode, int(peak_file.read_text()) / 1024, done.stderr.decode()


@pytest.mark.timeout(900)
def test_inspect_diff_and_sbom_hold_a_fixed_budget_of_member_bytes(tmp_path: Path) -> None:
    assert SHOWN_BUDGET < RSS_BOUND_MIB << 20
    archive = _bundle_of_zeros(tmp_path)
    for args, codes in (
        (("inspect", str(archive)), (0,)),
        (("inspect", "--json", str(archive)), (0,)),
        (("diff", str(archive), str(archive)), (0,)),
        (("sbom", str(archive), "-o", str(tmp_path / "sbom.json")), (0,)),
    ):
        code, peak, err = _peak_rss_mib(tmp_path, *args)
        assert code in codes, (args, err)
        assert "Traceback" not in err
        assert peak < RSS_BOUND_MIB, f"{args[0]}: {peak:.0f} MiB peak RSS"


def test_a_parsed_member_over_its_limit_is_an_error_naming_it(tmp_path: Path) -> None:
    """A bundle.toml of 17 MiB (a comment, then the real table): refused, never parsed."""
    base = make_bundle_tree(tmp_path / "probe", manifest=False)
    padded = b"#" + b"x" * (PARSED_LIMIT + (1 << 20)) + b"\n" + (base / "bundle.toml").read_bytes()
    archive = _bundle_of_zeros(tmp_path, {"bundle.toml": padded})
    for verb in ("inspect", "sbom"):
        code, _, err = _peak_rss_mib(tmp_path, verb, str(archive))
        assert code == 2, err
        assert f"{TOP}.tar.gz:bundle.toml: {len(padded)} bytes, over the 16 MiB" in err
        assert "Traceback" not in err
