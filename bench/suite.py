"""The comparisons of issues 8 and 23 on one environment size, and the limits they are held to.

Over 400 lines: every group is one function here, next to the untimed inputs and the
helpers they share, so that all contenders and their pairs read in one place.
"""

from __future__ import annotations

import compileall
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tarfile
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import repro
from bench.disk import allocated_bytes, disk_facts, preflight_need
from bench.envs import Workspace, _run, scaled_copy, site_packages, tree_bytes
from bench.measure import Contender, Series, alternate, paired_ratio
from bench.report import (
    PACK_NONE,
    PACK_PAGE_CACHE,
    PACK_REHASH,
    READ_HASH,
    ROUNDTRIP,
    ROUNDTRIP_STAGED,
    STREAM_PACK,
    STREAM_UNPACK,
    TAR_ROUNDTRIP,
    UNPACK_COLD_DIRECT,
    UNPACK_WARM_UV,
    WRITE_CEILING,
)
from bench.synthetic import scaled_workspace
from repro.errors import ReproError
from repro.hashing import default_jobs

Say = Callable[[str], None]
REPRO = (sys.executable, "-m", "repro")


@dataclass(frozen=True)
class Setup:
    """Inputs every group shares: built once per size, untimed."""

    workspace: Workspace
    work: Path
    bundle: Path  # the offline bundle (pack --wheels all); kept only for unpack
    bundle_bytes: int
    extracted: Path  # the bundle, extracted: what `check` and `sha256sum -c` read
    venv_tar: Path  # tar of the venv: what `tar xf` unpacks
    venv_files: Path  # NUL-separated list of the venv's regular files
    bundle_files: Path  # the same for the extracted bundle
    requirements: Path  # name==version of every distribution, for plain pip
    vault: Path  # the bundle's wheels


def hashlib_throughput(seconds: float = 1.0) -> float:
    """Bytes per second one core hashes with hashlib.sha256 (in memory: no reads)."""
    block = os.urandom(16 << 20)
    digest = hashlib.sha256()
    done = 0
    started = time.perf_counter()
    while time.perf_counter() - started < seconds:
        digest.update(block)
        done += len(block)
    return done / (time.perf_counter() - started)


def hashlib_parallel_throughput(threads: int, seconds: float = 1.0) -> float:
    """Bytes per second `threads` threads hash together, in memory: what the cores give now
    (on a shared machine less than single-core throughput x cores)."""
    block = os.urandom(16 << 20)
    stop = time.perf_counter() + seconds

    def work(_: int) -> int:
        digest = hashlib.sha256()
        done = 0
        while time.perf_counter() < stop:
            digest.update(block)
            done += len(block)
        return done

    started = time.perf_counter()
    with ThreadPoolExecutor(max_workers=threads) as pool:
        total = sum(pool.map(work, range(threads)))
    return total / (time.perf_counter() - started)


def _file_list(root: Path, into: Path) -> int:
    paths: list[bytes] = []
    for directory, _, names in os.walk(root):
        for name in names:
            path = Path(directory) / name
            if path.is_file() and not path.is_symlink():
                paths.append(os.fsencode(path))
    into.write_bytes(b"\0".join(sorted(paths)) + b"\0")
    return len(paths)


def _fresh(path: Path) -> Callable[[], None]:
    def remove() -> None:
        if path.exists() or path.is_symlink():
            if path.is_dir():
                shutil.rmtree(path)
            else:
                path.unlink()

    return remove


def _pack_reference(workspace: Workspace, bundle_dir: Path, say: Say) -> Path:
    say("packing the reference offline bundle (untimed)")
    shutil.rmtree(bundle_dir, ignore_errors=True)
    _run(
        [*REPRO, "pack", str(workspace.root), "-o", f"{bundle_dir}/", "--version", "1",
         "--wheels", "all", "--offline", "--json"],
        timeout=7200,
    )  # fmt: skip
    return bundle_dir / "bench-1.tar"


def prepare(workspace: Workspace, work: Path, say: Say, groups: tuple[str, ...]) -> Setup:
    """Untimed inputs. The bundle tar and the venv tar are kept only where a selected group
    reads them (unpack), so a run of check and scan alone needs one copy of the bundle."""
    work.mkdir(parents=True, exist_ok=True)
    # repro as an install runs it: pip byte-compiles a package when it installs it, but an
    # editable checkout under PYTHONDONTWRITEBYTECODE=1 would compile every module again
    # on each start (~0.1 s of pack's fixed cost, measured)
    compileall.compile_dir(Path(repro.__file__).parent, quiet=1)
    bundle_dir = work / "bundle"
    bundle = bundle_dir / "bench-1.tar"
    extracted = work / "extracted"
    ready = work / "extracted.json"
    if not ready.exists():
        if not bundle.exists():
            bundle = _pack_reference(workspace, bundle_dir, say)
        shutil.rmtree(extracted, ignore_errors=True)
        extracted.mkdir()
        with tarfile.open(bundle) as archive:
            archive.extractall(extracted, filter="data")
        ready.write_text(json.dumps({"bundle_bytes": bundle.stat().st_size}))
    if "unpack" in groups and not bundle.exists():
        bundle = _pack_reference(workspace, bundle_dir, say)
    (top,) = list(extracted.iterdir())
    venv_tar = work / "venv.tar"
    if "unpack" in groups and not venv_tar.exists():
        say("writing the venv tar for the tar xf contender (untimed)")
        _run(["tar", "cf", str(venv_tar), "-C", str(workspace.root), "venv"], timeout=7200)
    venv_files = work / "venv-files.lst"
    _file_list(workspace.venv, venv_files)
    bundle_files = work / "bundle-files.lst"
    _file_list(top, bundle_files)
    freeze = _run(
        [str(workspace.python), "-m", "pip", "list", "--format=freeze", "--exclude", "pip",
         "--exclude", "setuptools", "--disable-pip-version-check"],
        timeout=300,
    )  # fmt: skip
    requirements = work / "requirements.txt"
    requirements.write_text(freeze)
    return Setup(
        workspace=workspace,
        work=work,
        bundle=bundle,
        bundle_bytes=int(json.loads(ready.read_text())["bundle_bytes"]),
        extracted=top,
        venv_tar=venv_tar,
        venv_files=venv_files,
        bundle_files=bundle_files,
        requirements=requirements,
        vault=top / "env" / "wheels",
    )


def _shell(script: str) -> tuple[str, ...]:
    return ("bash", "-c", f"set -euo pipefail; {script}")


def _q(path: Path) -> str:
    return "'" + str(path).replace("'", "'\\''") + "'"


def tool_venv(cache: Path, say: Say) -> Path | None:
    """The harness's own venv holding venv-pack; None when pip cannot install it."""
    venv = cache / "tools"
    binary = venv / "bin" / "venv-pack"
    if binary.exists():
        return binary
    say("installing venv-pack into the harness's tool venv")
    try:
        _run([sys.executable, "-m", "venv", str(venv)], timeout=300)
        _run([str(venv / "bin" / "python"), "-m", "pip", "install", "-q", "venv-pack"], timeout=900)
    except Exception as exc:  # reported, not fatal: the comparison is then left out
        say(f"venv-pack unavailable: {exc}")
        return None
    if not binary.exists():
        say(f"venv-pack unavailable: pip installed no {binary}")
        return None
    return binary


def group_check(s: Setup, runs: int, warmup: bool, say: Say) -> dict[str, Any]:
    root = s.extracted
    contenders = [
        Contender("repro check", (*REPRO, "check", "-q", str(root))),
        Contender("sha256sum -c", _shell("sha256sum -c --quiet --strict MANIFEST.sha256"), root),
        Contender("repro check --jobs 1", (*REPRO, "check", "-q", "--jobs", "1", str(root))),
        Contender("cat (read ceiling)", _shell(f"xargs -0 cat < {_q(s.bundle_files)} > /dev/null")),
        Contender(READ_HASH, (sys.executable, "-m", "bench.ceiling", str(s.bundle_files))),
    ]
    return _group("check", contenders, runs, warmup, say, pairs=[(0, 1), (0, 2), (0, 4)])


def group_scan(s: Setup, runs: int, warmup: bool, say: Say) -> dict[str, Any]:
    out = s.work / "pack-none"
    contenders = [
        Contender("repro scan", (*REPRO, "scan", "--venv", str(s.workspace.venv)), ok_codes=(0, 1)),
        Contender(
            "sha256sum (files)", _shell(f"xargs -0 sha256sum < {_q(s.venv_files)} >/dev/null")
        ),
        Contender("cat (read ceiling)", _shell(f"xargs -0 cat < {_q(s.venv_files)} > /dev/null")),
        # --rehash: every file read, as the scan reads it (not the scan cache's shortcut)
        Contender(
            PACK_NONE,
            (
                *REPRO,
                "pack",
                str(s.workspace.root),
                "-o",
                f"{out}/",
                "--version",
                "1",
                "--wheels",
                "none",
                "--offline",
                "--rehash",
            ),
            cleanup=_fresh(out),
        ),
    ]
    contenders.append(
        Contender(READ_HASH, (sys.executable, "-m", "bench.ceiling", str(s.venv_files)))
    )
    return _group("scan", contenders, runs, warmup, say, pairs=[(0, 1), (3, 0), (0, 4)])


def group_pack(
    s: Setup, runs: int, warmup: bool, say: Say, venv_pack: Path | None
) -> dict[str, Any]:
    out = s.work / "pack-all"
    tar = s.work / "tar-sha.tar"
    vp = s.work / "venv-pack.tar"

    def pack(*extra: str) -> tuple[str, ...]:
        return (
            *REPRO,
            "pack",
            str(s.workspace.root),
            "-o",
            f"{out}/",
            "--version",
            "1",
            "--wheels",
            "all",
            "--offline",
            *extra,
        )

    contenders = [
        Contender("repro pack --wheels all", pack(), cleanup=_fresh(out)),
        Contender(
            "tar cf + sha256sum",
            _shell(f"tar cf {_q(tar)} -C {_q(s.workspace.root)} venv && sha256sum {_q(tar)}"),
            cleanup=_fresh(tar),
        ),
        Contender("repro pack --wheels all --jobs 1", pack("--jobs", "1"), cleanup=_fresh(out)),
        # what writing the venv's bytes to one file costs on this disk, made durable as
        # repro makes its bundle (fsync before the rename), written past the page cache
        # as repro writes it (through the cache it cost ~2x on the 2-core machine)
        Contender(
            WRITE_CEILING,
            _shell(
                f"xargs -0 cat < {_q(s.venv_files)} | dd of={_q(tar)} bs=8M iflag=fullblock"
                f" oflag=direct status=none && sync {_q(tar)}"
            ),
            cleanup=_fresh(tar),
        ),
    ]
    # through the page cache (the bundle is written past it by default: on this kind of
    # VM a buffered write costs ~1.5 s of system time per GB)
    contenders.append(
        Contender(
            PACK_PAGE_CACHE,
            pack(),
            cleanup=_fresh(out),
            env={**os.environ, "REPRO_DIRECT_IO": "0"},
        )
    )
    pairs = [(0, 1), (0, 2), (0, 3), (4, 0)]
    if venv_pack is not None:
        contenders.append(
            Contender(
                "venv-pack --format tar",
                (
                    str(venv_pack),
                    "-p",
                    str(s.workspace.venv),
                    "-o",
                    str(vp),
                    "--format",
                    "tar",
                    "-q",
                ),
                cleanup=_fresh(vp),
            )
        )
        # venv-pack leaves its output in the page cache; repro fsyncs its bundle
        contenders.append(
            Contender(
                "venv-pack --format tar, then sync of its output",
                _shell(
                    f"{_q(venv_pack)} -p {_q(s.workspace.venv)} -o {_q(vp)} --format tar -q"
                    f" && sync {_q(vp)}"
                ),
                cleanup=_fresh(vp),
            )
        )
        pairs += [(0, 5), (0, 6), (4, 5)]
    # The contenders above find the scan cache warm (the warm-up run, or the run before,
    # packed the same files): what packing again costs. A first pack reads every file.
    contenders.append(Contender(PACK_REHASH, pack("--rehash"), cleanup=_fresh(out)))
    rehash = len(contenders) - 1
    pairs += [(rehash, 1), (0, rehash)]
    if venv_pack is not None:
        pairs.append((rehash, 5))
    return _group("pack", contenders, runs, warmup, say, pairs=pairs)


def _preflight_need(unpack: tuple[str, ...], fresh: Path, say: Say) -> tuple[int, str]:
    """Preflight's stated need for `unpack` into `fresh`: one dry run, untimed."""
    say("unpack: preflight's stated disk need (--dry-run --json, untimed)")
    try:
        stdout = _run([*unpack, "--dry-run", "--json"], timeout=3600)
    finally:
        _fresh(fresh)()
    source = "repro unpack --dry-run --json"
    try:
        report = json.loads(stdout)
    except json.JSONDecodeError as exc:
        raise ReproError(f"{source}: stdout is not JSON ({exc}): {stdout[:300]!r}") from exc
    return preflight_need(report, source=source)


def group_unpack(s: Setup, runs: int, warmup: bool, say: Say) -> dict[str, Any]:
    """Unpack against tar xf and pip; for the plain unpack also the disk it takes, against
    the venv's size and against what its preflight says it needs (bench/disk.py)."""
    fresh = s.work / "fresh"

    def make_dir() -> None:
        fresh.mkdir()

    unpack = (*REPRO, "unpack", str(s.bundle), "--target", str(fresh), "--offline",
              "--no-smoke", "--cpu")  # fmt: skip
    # the cold-cache contenders measure uv's cache, so they name uv: the default
    # installer need not be uv
    unpack_uv = (*unpack, "--installer", "uv")
    cold = s.work / "xdg-cold"

    def cold_cache() -> None:
        cold.mkdir()

    def cleanup_cold() -> None:
        _fresh(fresh)()
        _fresh(cold)()

    contenders = [
        Contender("repro unpack --offline", unpack, cleanup=_fresh(fresh), disk=s.work),
        Contender(
            "tar xf",
            ("tar", "xf", str(s.venv_tar), "-C", str(fresh)),
            prepare=make_dir,
            cleanup=_fresh(fresh),
        ),
        Contender(
            "venv + pip install --no-index",
            _shell(
                f"{_q(Path(sys.executable))} -m venv {_q(fresh)} && {_q(fresh)}/bin/pip install -q "
                f"--disable-pip-version-check --no-index --find-links {_q(s.vault)} "
                f"-r {_q(s.requirements)}"
            ),
            cleanup=_fresh(fresh),
        ),
        # a fresh box: uv's cache (XDG_CACHE_HOME/uv; repro strips UV_* variables) is empty,
        # so every wheel is unzipped, not linked from the cache the warm-up filled
        Contender(
            "repro unpack --offline, cold uv cache",
            unpack_uv,
            prepare=cold_cache,
            cleanup=cleanup_cold,
            env={**os.environ, "XDG_CACHE_HOME": str(cold)},
        ),
        Contender(
            UNPACK_COLD_DIRECT,
            unpack_uv,
            prepare=cold_cache,
            cleanup=cleanup_cold,
            env={**os.environ, "XDG_CACHE_HOME": str(cold), "REPRO_DIRECT_IO": "1"},
        ),
        # uv with the cache the warm-up (or the run before) filled: the vault installer's
        # own rival on a box that installed these wheels before
        Contender(UNPACK_WARM_UV, unpack_uv, cleanup=_fresh(fresh)),
    ]
    pairs = [(0, 1), (0, 2), (3, 1), (3, 2), (4, 1), (4, 2), (0, 5), (0, 3), (5, 1)]
    need, detail = _preflight_need(unpack, fresh, say)
    venv_bytes = allocated_bytes(s.workspace.venv)
    result = _group("unpack", contenders, runs, warmup, say, pairs=pairs)
    first = result["contenders"][0]
    result["disk"] = disk_facts(
        first["name"], first["disk_peak_bytes_runs"], venv_bytes, need, detail, s.work
    )
    return result


def group_roundtrip(s: Setup, runs: int, warmup: bool, say: Say) -> dict[str, Any]:
    """The streamed round trip: pack of the workspace (the inputs of group_pack's
    `--wheels all`) piped into unpack of a fresh target, against tar piped into tar of the
    same venv. pipefail: either side failing fails the run. Each side is also timed
    alone (pack into /dev/null; the bundle that pack streams, kept as a file, cat into
    unpack), so the results say which one sets the round trip's pace."""
    fresh = s.work / "roundtrip"
    streamed = s.work / "roundtrip.tar"
    python = _q(Path(sys.executable))

    def make_dir() -> None:
        fresh.mkdir()

    pack = f"{python} -m repro pack {_q(s.workspace.root)} -o - --version 1 --wheels all --offline"
    unpack = f"{python} -m repro unpack - --target {_q(fresh)} --offline --no-smoke --cpu"
    say("roundtrip: the bundle pack -o - streams, kept as a file (untimed)")
    _run(["bash", "-c", f"set -euo pipefail; {pack} > {_q(streamed)}"], timeout=7200)
    contenders = [
        Contender(ROUNDTRIP, _shell(f"{pack} | {unpack}"), cleanup=_fresh(fresh)),
        Contender(
            TAR_ROUNDTRIP,
            _shell(f"tar cf - -C {_q(s.workspace.root)} venv | tar xf - -C {_q(fresh)}"),
            prepare=make_dir,
            cleanup=_fresh(fresh),
        ),
        # the floor of a round trip that verifies before it installs: the bundle received
        # into staging, verified, the preflight passed; nothing installed
        Contender(ROUNDTRIP_STAGED, _shell(f"{pack} | {unpack} --dry-run"), cleanup=_fresh(fresh)),
        Contender(STREAM_PACK, _shell(f"{pack} > /dev/null")),
        Contender(STREAM_UNPACK, _shell(f"cat {_q(streamed)} | {unpack}"), cleanup=_fresh(fresh)),
    ]
    try:
        return _group(
            "roundtrip", contenders, runs, warmup, say, pairs=[(0, 1), (2, 1), (3, 0), (4, 0)]
        )
    finally:
        _fresh(streamed)()


def group_scaling_pack(s: Setup, runs: int, warmup: bool, say: Say, copies: int) -> dict[str, Any]:
    """A first pack and a scan of the real venv and of a synthetic one `copies` times
    larger, made of copies of every distribution (bench/synthetic.py), alternated in one
    group, so each ratio Nx / 1x is paired; and tar cf + sha256sum of the large one. Its
    workspace is removed afterwards: at full size it is `copies` x 5.6 GB."""
    say(f"building the synthetic {copies}x environment (untimed)")
    scaled = scaled_workspace(s.workspace, s.work / f"scaled-venv-{copies}x", copies)
    out = s.work / f"pack-{copies}x"
    tar = s.work / f"tar-sha-{copies}x.tar"

    def pack(workspace: Workspace, *extra: str) -> tuple[str, ...]:
        return (*REPRO, "pack", str(workspace.root), "-o", f"{out}/", "--version", "1",
                "--wheels", "all", "--offline", "--rehash", *extra)  # fmt: skip

    big = f"{copies}x"
    contenders = [
        Contender(f"{PACK_REHASH} 1x", pack(s.workspace), cleanup=_fresh(out)),
        Contender(f"{PACK_REHASH} {big}", pack(scaled), cleanup=_fresh(out)),
        Contender(
            f"{PACK_REHASH} 1x --jobs 1", pack(s.workspace, "--jobs", "1"), cleanup=_fresh(out)
        ),
        Contender(
            f"{PACK_REHASH} {big} --jobs 1", pack(scaled, "--jobs", "1"), cleanup=_fresh(out)
        ),
        Contender(
            "repro scan 1x", (*REPRO, "scan", "--venv", str(s.workspace.venv)), ok_codes=(0, 1)
        ),
        Contender(
            f"repro scan {big}", (*REPRO, "scan", "--venv", str(scaled.venv)), ok_codes=(0, 1)
        ),
        Contender(
            f"tar cf + sha256sum {big}",
            _shell(f"tar cf {_q(tar)} -C {_q(scaled.root)} venv && sha256sum {_q(tar)}"),
            cleanup=_fresh(tar),
        ),
    ]
    files, size = tree_bytes(scaled.venv)
    try:
        pairs = [(1, 0), (3, 2), (5, 4), (0, 2), (1, 3), (1, 6)]
        result = _group("scaling-pack", contenders, runs, warmup, say, pairs=pairs)
    finally:
        _fresh(scaled.root)()
    result["payload"] = {"files": files, "bytes": size, "copies": copies}
    return result


def group_scaling(s: Setup, runs: int, warmup: bool, say: Say, copies: int) -> dict[str, Any]:
    """check on a synthetic bundle `copies` times larger, made of copies of the real one."""
    big = scaled_copy(s.extracted, s.work / f"scaled-{copies}x", copies)
    contenders = [
        Contender(f"repro check {copies}x", (*REPRO, "check", "-q", str(big))),
        Contender(
            f"repro check {copies}x --jobs 1", (*REPRO, "check", "-q", "--jobs", "1", str(big))
        ),
        Contender(
            f"sha256sum -c {copies}x", _shell("sha256sum -c --quiet MANIFEST.sha256"), cwd=big
        ),
    ]
    files, size = tree_bytes(big)
    result = _group("scaling", contenders, runs, warmup, say, pairs=[(0, 2), (0, 1)])
    result["payload"] = {"files": files, "bytes": size, "copies": copies}
    return result


def _group(
    name: str,
    contenders: list[Contender],
    runs: int,
    warmup: bool,
    say: Say,
    *,
    pairs: list[tuple[int, int]],
) -> dict[str, Any]:
    say(f"{name}: {', '.join(c.name for c in contenders)}")
    series: list[Series] = alternate(contenders, runs, warmup=warmup, say=say)
    return {
        "contenders": [item.summary() for item in series],
        "ratios": [
            {"a": series[a].name, "b": series[b].name, **paired_ratio(series[a], series[b])}
            for a, b in pairs
        ],
    }


def facts(s: Setup) -> dict[str, Any]:
    venv_count, venv_size = tree_bytes(s.workspace.venv)
    bundle_count, bundle_size = tree_bytes(s.extracted)
    site = site_packages(s.workspace.python)
    return {
        "workspace": str(s.workspace.root),
        "packages": list(s.workspace.packages),
        "venv_files": venv_count,
        "venv_bytes": venv_size,
        "site_packages": str(site),
        "bundle_bytes": s.bundle_bytes,
        "bundle_files": bundle_count,
        "bundle_payload_bytes": bundle_size,
    }


def machine() -> dict[str, Any]:
    model = ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    sha256sum = subprocess.run(
        ["sha256sum", "--version"], capture_output=True, text=True, timeout=30, check=False
    ).stdout.splitlines()
    return {
        "hostname": os.uname().nodename,
        "cpu": model,
        "cores": default_jobs(),
        "python": sys.version.split()[0],
        "sha256sum": sha256sum[0] if sha256sum else "",
        "load_average": list(os.getloadavg()),
    }
