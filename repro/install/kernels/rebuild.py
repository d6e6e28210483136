"""The kernels step of unpack: carried kernel sources rebuilt for this box's GPUs.

After the pinned stack is installed, a distribution whose source the bundle carries
(kernels/<dist>/, env/kernels.toml's `[[sources]]`) is built again in the target venv,
so that it compiles against the venv's own torch and headers:

- which: `--rebuild-kernels auto` those with no code ("none", `repro.gpu.audit`) for
  some GPU of the box; `always` every carried one; `never` none (`decide_rebuilds`);
- how: the carried tree copied from the kept bundle into a scratch directory, the
  recipe's command run there (`{python}` the venv's interpreter, `{source}` the copy,
  `{out}` where the wheel goes), offline, with the arch variables set to this box's
  capabilities (`arch_variables`), under a timeout, its output kept in
  TARGET/.repro/kernels/<dist>/build.log;
- then the built wheel is judged: it must carry native code for every GPU of the box,
  each of its shared objects (`KernelBuildError` naming what it lacks otherwise);
- and it replaces the installed distribution (`replace_distribution`): the old files,
  those its RECORD lists, are moved aside, the new wheel is unpacked by repro's own
  installer (repro.wheel), and only then is the old copy removed. A failure, or a run
  killed half way (the journal is read again by the next run), leaves the venv as the
  install left it.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from packaging.utils import canonicalize_name, parse_wheel_filename

from repro.bundle import layout
from repro.bundle.kernels import KernelAudit, KernelSource, fill_placeholders
from repro.errors import InstallError, KernelBuildError
from repro.gpu.arch import Verdict, arch_compatible, sm_name
from repro.gpu.audit import judge_distribution
from repro.gpu.cubin import elf_archs, is_shared_object, wheel_archs
from repro.hashing import sha256_file
from repro.install.options import RebuildKernels
from repro.install.transaction.atomic import atomic_write
from repro.install.venv.tether import run_tethered
from repro.install.venv.vault import describe_interpreter, venv_scheme
from repro.wheel.audit import WheelPlan, plan_wheel
from repro.wheel.install import Installed, install_plan
from repro.wheel.record import read_dist_record

KERNELS_DIR = "kernels"  # TARGET/.repro/kernels/<dist>/: build.log, the built wheel
BUILD_LOG = "build.log"
JOURNAL = "replace.json"
BUILD_TIMEOUT = 3600.0
LOG_TAIL = 3000
# What would send the build to a network: never set for it.
_DROPPED = (
    "http_proxy",
    "https_proxy",
    "all_proxy",
    "ftp_proxy",
    "no_proxy",
    "PIP_INDEX_URL",
    "PIP_EXTRA_INDEX_URL",
    "PIP_FIND_LINKS",
    "UV_INDEX_URL",
    "UV_EXTRA_INDEX_URL",
    "PYTHONPATH",
    "PYTHONHOME",
)


@dataclass(frozen=True)
class Rebuild:
    """A carried source to build here, and why."""

    source: KernelSource
    reason: str


@dataclass(frozen=True)
class Rebuilt:
    """A distribution built here and installed in place of the bundle's."""

    name: str
    version: str
    wheel: str  # its file name
    sha256: str
    archs: tuple[str, ...]  # every arch its shared objects carry
    seconds: float
    log: str

    def to_facts(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "version": self.version,
            "wheel": self.wheel,
            "sha256": self.sha256,
            "archs": list(self.archs),
            "seconds": round(self.seconds, 1),
            "log": self.log,
        }


def decide_rebuilds(
    audit: KernelAudit | None,
    capabilities: Sequence[tuple[int, int]],
    mode: RebuildKernels,
) -> tuple[Rebuild, ...]:
    """The carried sources to build on a box of `capabilities`: under `auto` each whose
    distribution has no code for one of them (judged as `repro inspect --gpu` does),
    under `always` every one (a box with no GPU: none can be built, the caller
    refuses), under `never` none."""
    if audit is None or mode == "never":
        return ()
    caps = tuple(dict.fromkeys(capabilities))
    out: list[Rebuild] = []
    for source in sorted(audit.sources, key=lambda s: s.name):
        if mode == "always":
            out.append(Rebuild(source, "--rebuild-kernels always"))
            continue
        dist = audit.distribution(source.name)
        if dist is None or not dist.objects:
            continue
        missing = [
            cap
            for cap in caps
            if judge_distribution(dist, cap, rebuildable=True).verdict is Verdict.FAIL
        ]
        if missing:
            out.append(Rebuild(source, "no code for " + ", ".join(sm_name(c) for c in missing)))
    return tuple(out)


def arch_variables(capabilities: Sequence[tuple[int, int]], names: Sequence[str]) -> dict[str, str]:
    """Each of `names` set to this box's capabilities as its build system spells them:
    `TORCH_CUDA_ARCH_LIST=9.0;10.3`, `CUDAARCHS` and `CMAKE_CUDA_ARCHITECTURES=90;103`,
    `FLASHINFER_CUDA_ARCH_LIST=9.0 10.3`; any other name (a recipe's `arch_env`) the
    torch way."""
    caps = sorted(set(capabilities))
    dotted = [f"{major}.{minor}" for major, minor in caps]
    numbers = [f"{major}{minor}" for major, minor in caps]
    styles = {
        "CUDAARCHS": ";".join(numbers),
        "CMAKE_CUDA_ARCHITECTURES": ";".join(numbers),
        "FLASHINFER_CUDA_ARCH_LIST": " ".join(dotted),
    }
    return {name: styles.get(name, ";".join(dotted)) for name in dict.fromkeys(names)}


def build_environment(
    venv: Path,
    source: KernelSource,
    capabilities: Sequence[tuple[int, int]],
    base: Mapping[str, str],
) -> dict[str, str]:
    """The build's environment: `base` (this process's: CUDA_HOME, PATH and the
    compilers stay, so nvcc is found) less proxies, index URLs and PYTHONPATH; the venv's
    bin first on PATH (and CUDA_HOME/bin after it); pip held offline; the recipe's `env`;
    the arch variables last (this box's GPUs decide them)."""
    env = {k: v for k, v in base.items() if k not in _DROPPED and k.lower() not in _DROPPED}
    path = [str(venv / "bin"), *env.get("PATH", os.defpath).split(os.pathsep)]
    cuda_home = env.get("CUDA_HOME") or env.get("CUDA_PATH")
    if cuda_home:
        path.append(str(Path(cuda_home) / "bin"))
    env["PATH"] = os.pathsep.join(dict.fromkeys(p for p in path if p))
    env.update(
        {
            "VIRTUAL_ENV": str(venv),
            "PIP_NO_INDEX": "1",
            "PIP_DISABLE_PIP_VERSION_CHECK": "1",
            "PIP_NO_INPUT": "1",
            "PYTHONNOUSERSITE": "1",
        }
    )
    env.update(dict(source.env))
    env.update(arch_variables(capabilities, source.arch_env))
    return env


def fill_command(command: Sequence[str], *, python: Path, source: Path, out: Path) -> list[str]:
    values = {"{python}": str(python), "{source}": str(source), "{out}": str(out)}
    return fill_placeholders(command, values)


def kernels_dir(state_dir: Path, name: str) -> Path:
    return state_dir / KERNELS_DIR / name


def rebuild_distribution(
    rebuild: Rebuild,
    *,
    kept: Path,
    interpreter: Path,
    venv: Path,
    state_dir: Path,
    capabilities: Sequence[tuple[int, int]],
    timeout: float = BUILD_TIMEOUT,
    base_env: Mapping[str, str] | None = None,
) -> Rebuilt:
    """Build `rebuild`'s source here, judge the wheel, install it in place of the
    bundle's; see the module's docstring."""
    source = rebuild.source
    name = source.name
    home = kernels_dir(state_dir, name)
    home.mkdir(parents=True, exist_ok=True)
    recover_replacement(home)
    work = home / "work"
    shutil.rmtree(work, ignore_errors=True)
    tree, out = work / "source", work / "out"
    carried = layout.at(kept, layout.kernel_source(name).rstrip("/"))
    if not carried.is_dir():
        raise KernelBuildError(
            f"{name}: the kept bundle has no {layout.kernel_source(name)}, which "
            f"{layout.KERNELS_TOML} lists",
            hint="unpack again from the bundle file (--replace)",
        )
    shutil.copytree(carried, tree, symlinks=True)
    out.mkdir()
    argv = fill_command(source.command, python=interpreter, source=tree, out=out)
    env = build_environment(
        venv, source, capabilities, os.environ if base_env is None else base_env
    )
    log = home / BUILD_LOG
    started = time.monotonic()
    result = _run_build(argv, env, tree, timeout, log, source, name)
    seconds = time.monotonic() - started
    if result.returncode != 0:
        raise KernelBuildError(
            f"{name} {source.version}: the rebuild failed (exit {result.returncode}); "
            f"its output is in {log}:\n{_tail(result)}",
            hint="the build needs nvcc, the CUDA headers, Python.h and a C++ compiler "
            "on this box; fix the cause and run unpack again (it resumes here), or pass "
            "--rebuild-kernels never",
        )
    wheel = _built_wheel(out, name, log)
    archs = _judge_wheel(wheel, name, capabilities, log)
    home_wheel = home / wheel.name
    shutil.copyfile(wheel, home_wheel)

    def check(installed: Sequence[Path]) -> None:
        _judge_objects(installed, name, capabilities, log)

    replace_distribution(interpreter, name, home_wheel, home, check=check)
    shutil.rmtree(work, ignore_errors=True)
    version = str(parse_wheel_filename(wheel.name)[1])
    return Rebuilt(name, version, wheel.name, sha256_file(home_wheel), archs, seconds, str(log))


def _run_build(
    argv: Sequence[str],
    env: Mapping[str, str],
    cwd: Path,
    timeout: float,
    log: Path,
    source: KernelSource,
    name: str,
) -> subprocess.CompletedProcess[str]:
    arch_lines = [f"{k}={env[k]}" for k in source.arch_env if k in env]
    header = "$ " + " ".join(argv) + "\n" + "".join(f"# {line}\n" for line in arch_lines)
    try:
        result = run_tethered(argv, timeout=timeout, env=env, cwd=cwd)
    except subprocess.TimeoutExpired as exc:
        log.write_text(header + f"# timed out after {timeout:.0f} s\n", encoding="utf-8")
        raise KernelBuildError(
            f"{name}: the rebuild ran past {timeout:.0f} s and was stopped; see {log}"
        ) from exc
    except OSError as exc:
        raise KernelBuildError(f"{name}: cannot run {argv[0]}: {exc.strerror or exc}") from exc
    log.write_text(
        header + result.stdout + ("\n# stderr\n" + result.stderr if result.stderr else ""),
        encoding="utf-8",
    )
    return result


def _tail(result: subprocess.CompletedProcess[str]) -> str:
    text = (result.stdout + result.stderr).strip()
    return text[-LOG_TAIL:]


def _built_wheel(out: Path, name: str, log: Path) -> Path:
    wheels = sorted(out.glob("*.whl"))
    mine = [w for w in wheels if canonicalize_name(w.name.split("-", 1)[0]) == name]
    if len(mine) != 1:
        found = ", ".join(w.name for w in wheels) or "no wheel"
        raise KernelBuildError(
            f"{name}: the rebuild made {found} in its output directory, not one wheel of "
            f"{name}; see {log}",
            hint="the recipe's command ([kernels.<dist>] command) must write the wheel into {out}",
        )
    return mine[0]


def _lacking(archs: Sequence[str], capabilities: Sequence[tuple[int, int]]) -> list[str]:
    return [
        sm_name(cap)
        for cap in capabilities
        if arch_compatible(cap, archs).verdict is not Verdict.PASS
    ]


def _judge_wheel(
    wheel: Path, name: str, capabilities: Sequence[tuple[int, int]], log: Path
) -> tuple[str, ...]:
    found = wheel_archs(wheel)
    archs = tuple(sorted(found.archs))
    lacking = _lacking(archs, capabilities)
    if lacking:
        raise KernelBuildError(
            f"{name}: the rebuilt wheel {wheel.name} has no native code for "
            f"{', '.join(lacking)} (it holds {', '.join(archs) or 'no GPU code'}); "
            f"nothing was installed; see {log}",
            hint="the build must read the arch variables (TORCH_CUDA_ARCH_LIST, CUDAARCHS, "
            "...) or name its own in [kernels.<dist>] arch_env",
        )
    return archs


def _judge_objects(
    installed: Sequence[Path], name: str, capabilities: Sequence[tuple[int, int]], log: Path
) -> None:
    """Each installed shared object that carries GPU code must be native on every GPU."""
    for path in installed:
        if not is_shared_object(path.name):
            continue
        archs = sorted(elf_archs(path))
        lacking = _lacking(archs, capabilities) if archs else []
        if lacking:
            raise KernelBuildError(
                f"{name}: {path.name} of the rebuilt wheel has no native code for "
                f"{', '.join(lacking)} (it holds {', '.join(archs)}); the installed "
                f"distribution was put back; see {log}"
            )


# --- the replacement, as one transaction ---------------------------------------------


def _dist_info(plan: WheelPlan, name: str) -> Path | None:
    for directory in dict.fromkeys((plan.scheme.purelib, plan.scheme.platlib)):
        for candidate in sorted(directory.glob("*.dist-info")):
            if canonicalize_name(candidate.name.split("-", 1)[0]) == name:
                return candidate
    return None


def _old_files(plan: WheelPlan, name: str) -> list[Path]:
    """The installed files of `name`, as its RECORD lists them; each inside the venv."""
    dist_info = _dist_info(plan, name)
    if dist_info is None:
        raise KernelBuildError(f"{name}: not installed in the venv; nothing to replace")
    site = dist_info.parent
    prefix = Path(os.path.abspath(plan.scheme.data))
    files = []
    for entry in read_dist_record(dist_info):
        path = Path(os.path.normpath(site / entry.path))
        if not path.is_relative_to(prefix):
            raise KernelBuildError(
                f"{dist_info / 'RECORD'}: {entry.path} lies outside the venv {prefix}; "
                "refusing to remove it"
            )
        if path.is_file() or path.is_symlink():
            files.append(path)
    return files


def replace_distribution(
    interpreter: Path,
    name: str,
    wheel: Path,
    home: Path,
    *,
    check: Callable[[Sequence[Path]], None] | None = None,
) -> Installed:
    """Install `wheel` in place of the installed `name`: its old files (its RECORD's)
    moved into `home`/old first, a journal in `home` naming every move and every file
    the wheel writes, the wheel unpacked, `check` run over what it wrote; then the old
    copy removed. Any failure (or, through `recover_replacement`, a kill) puts the old
    distribution back and removes what the wheel wrote."""
    scheme = venv_scheme(interpreter, describe_interpreter(interpreter))
    plan = plan_wheel(wheel, scheme)
    old = _old_files(plan, name)
    aside = home / "old"
    shutil.rmtree(aside, ignore_errors=True)
    aside.mkdir(parents=True)
    moved = [(str(path), str(aside / str(index))) for index, path in enumerate(old)]
    new = [m.dest for m in plan.members] + [g.dest for g in plan.generated]
    atomic_write(home / JOURNAL, json.dumps({"moved": moved, "new": new}).encode())
    try:
        for original, backup in moved:
            os.rename(original, backup)
        installed = install_plan(plan)
        if check is not None:
            check([Path(m.dest) for m in plan.members])
    except BaseException:
        recover_replacement(home)
        raise
    (home / JOURNAL).unlink()
    shutil.rmtree(aside, ignore_errors=True)
    _remove_empty_parents([Path(p) for p, _ in moved], Path(scheme.data))
    return installed


def recover_replacement(home: Path) -> bool:
    """Undo a replacement the journal in `home` names (a failed or killed one): what the
    new wheel wrote removed, every old file moved back. True when there was one."""
    journal = home / JOURNAL
    if not journal.is_file():
        return False
    try:
        data = json.loads(journal.read_text(encoding="utf-8"))
        moved = [(str(a), str(b)) for a, b in data["moved"]]
        new = [str(p) for p in data["new"]]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise InstallError(
            f"{journal}: unreadable ({exc}); the venv may hold a half replaced distribution",
            hint="remove the target (or unpack with --replace) to build it again",
        ) from exc
    backups = dict(moved)
    for path in new:
        if path in backups and not os.path.lexists(backups[path]):
            continue  # never moved aside: still the old distribution's own file
        if os.path.lexists(path):
            os.unlink(path)
    for original, backup in moved:
        if os.path.lexists(backup):
            os.makedirs(os.path.dirname(original), exist_ok=True)
            os.replace(backup, original)
    journal.unlink()
    shutil.rmtree(home / "old", ignore_errors=True)
    return True


def _remove_empty_parents(paths: Sequence[Path], stop: Path) -> None:
    """Directories the old distribution's files left empty (the new wheel's are not)."""
    for directory in sorted({p.parent for p in paths}, key=lambda p: len(p.parts), reverse=True):
        current = directory
        while current != stop and current.is_relative_to(stop):
            try:
                current.rmdir()
            except OSError:
                break
            current = current.parent
