"""Create a fresh venv and install exactly a bundle's lock into it.

Three installers: repro's own `vault` installer, which unpacks the vault's wheels
(repro.install.venv.vault; chosen by `auto` when the vault holds a wheel for every
pin), `uv pip sync` (fast, when uv is available) and pip-tools'
`pip-sync --python-executable`. Both install exactly the lock and resolve
nothing: uv pip sync never adds a listed requirement's dependencies, and pip-sync
is given `--pip-args --no-deps` (it runs `pip install -r`, which would otherwise
resolve them, and fail offline for an environment that is not dependency-complete).
Either way the installed set is read back through the new interpreter (started
without site processing: repro.install.venv.site) and compared with the lock.

Both installers start the new venv's interpreter with site processing (uv to query
it, pip-sync to run pip in it): `unpack --no-exec` lets them do so only while its
site-packages holds no startup file the bundle put there (repro.install.stages).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Literal
from urllib.parse import unquote, urlsplit

from packaging.utils import canonicalize_name

from repro.bundle.lock import Pin, read_requirements_lock, render_pins_only
from repro.errors import InstallError, UsageError
from repro.install.venv.site import read_installed
from repro.install.venv.tether import run_tethered
from repro.install.venv.vault import (
    choose_wheel_names,
    describe_interpreter,
    supported_tags,
    venv_scheme,
)
from repro.wheel.audit import check_claims, plan_wheel

Installer = Literal["vault", "uv", "pip"]
RequestedInstaller = Literal["auto", "vault", "uv", "pip"]
INSTALL_TIMEOUT = 3600
# Seeded into every venv by `python -m venv`; not an installed difference when the lock
# does not pin them.
BOOTSTRAP = frozenset({"pip", "setuptools", "wheel"})


@dataclass(frozen=True)
class InstallPlan:
    lock: Path
    wheels: Path | None
    indexes: tuple[str, ...]
    extra_indexes: tuple[str, ...]
    find_links: tuple[str, ...]
    offline: bool
    # pin name -> sha256 of the vault's wheels for it (env/vault.toml, verified with the
    # bundle): uv is given them so that its cache cannot stand in for the vault's bytes.
    vault_hashes: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    # Wheels only: no source distribution is built (a build backend is code the
    # bundle's sources choose, run on this box); `unpack --no-exec` sets it.
    binary_only: bool = False


@dataclass(frozen=True)
class InstalledSetDiff:
    missing: tuple[str, ...]
    extra: tuple[str, ...]
    wrong_version: tuple[tuple[str, str, str], ...]

    @property
    def clean(self) -> bool:
        return not (self.missing or self.extra or self.wrong_version)

    def describe(self) -> str:
        lines = [f"  - missing: {name}" for name in self.missing]
        lines += [f"  - not in the lock: {name}" for name in self.extra]
        lines += [
            f"  - {n}: lock pins {want}, installed {got}" for n, want, got in self.wrong_version
        ]
        return "\n".join(lines)


def find_uv() -> Path | None:
    """uv on PATH, or the binary of the `uv` package installed beside repro."""
    found = shutil.which("uv")
    if found:
        return Path(found)
    try:
        import uv  # type: ignore[import-not-found,unused-ignore]

        return Path(uv.find_uv_bin())
    except (ImportError, FileNotFoundError):
        return None


def choose_installer(
    requested: RequestedInstaller, vault_covers: Callable[[], bool] = lambda: False
) -> Installer:
    """The installer asked for; for `auto`, the vault's own wheels when they cover every
    pin (`vault_covers`), else uv when it is installed, else pip-sync."""
    if requested in ("pip", "vault"):
        return requested
    if requested == "auto" and vault_covers():
        return "vault"
    if find_uv() is not None:
        return "uv"
    if requested == "uv":
        raise UsageError(
            "--installer uv: uv is not installed", hint="pip install 'repro[uv]', or use pip"
        )
    return "pip"


INSTALL_HINT = (
    "the lines above are the installer's own; a missing wheel under --offline "
    "means the bundle was packed without it (pack with --wheels all)"
)


# pip-sync runs pip with check=True: a failed pip ends in a traceback of pip-sync's
# own (CalledProcessError) after pip's error lines, which say what went wrong.
_TRACEBACK = "Traceback (most recent call last):"
_CHAINED = (
    "During handling of the above exception, another exception occurred:",
    "The above exception was the direct cause of the following exception:",
)


def installer_lines(output: str) -> list[str]:
    """The installer's own lines: Python tracebacks left out, the exception of each
    kept unless it only says that a subprocess (pip) failed."""
    kept: list[str] = []
    in_traceback = False
    for line in output.splitlines():
        if line.strip() == _TRACEBACK:
            in_traceback = True
            continue
        if in_traceback:
            if not line or line[0].isspace():
                continue
            in_traceback = False
            if not line.startswith("subprocess.CalledProcessError"):
                kept.append(line)
            continue
        if line.strip() in _CHAINED:
            continue
        kept.append(line)
    while kept and not kept[-1].strip():
        kept.pop()
    return kept


def _run(
    argv: Sequence[str],
    *,
    what: str,
    env: Mapping[str, str] | None = None,
    hint: str | None = None,
    cwd: Path | None = None,
) -> str:
    try:
        # Tethered: a kill of repro (its PID alone included) ends the installer too,
        # so nothing writes into the venv after repro is gone.
        result = run_tethered(argv, timeout=INSTALL_TIMEOUT, env=env, cwd=cwd)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise InstallError(f"{what}: {exc}") from exc
    if result.returncode != 0:
        lines = installer_lines((result.stdout + "\n" + result.stderr).strip())
        tail = "\n".join(lines[-25:]) or "(no output)"
        raise InstallError(f"{what} failed (exit {result.returncode}):\n{tail}", hint=hint)
    return result.stdout


def create_venv(python: Path, target: Path, installer: Installer) -> Path:
    """A fresh venv at `target` made with `python`; returns its interpreter."""
    if installer == "vault":
        # No pip: the lock pins pip itself when the source had it; nothing else is needed.
        argv = [str(python), "-m", "venv", "--without-pip", str(target)]
        _run(argv, what=f"{python} -m venv {target}", env=_clean_env())
    elif installer == "uv":
        uv = find_uv()
        assert uv is not None
        # No --seed: seeding fetches pip from an index, which an air-gapped box has not;
        # the lock pins pip itself when the source had it, and uv needs no pip.
        argv = [str(uv), "venv", "--allow-existing", "--quiet", "--offline"]
        _run(
            [*argv, "--python", str(python), str(target)],
            what=f"uv venv {target}",
            env=_clean_env(),
        )
    else:
        _run([str(python), "-m", "venv", str(target)], what=f"{python} -m venv {target}")
    interpreter = target / "bin" / "python"
    if not interpreter.exists():
        raise InstallError(f"{target}: the new venv has no bin/python")
    return interpreter


def _source_args(plan: InstallPlan) -> list[str]:
    args: list[str] = []
    if plan.wheels is not None and plan.wheels.is_dir():
        args += ["--find-links", str(plan.wheels)]
    for link in plan.find_links:
        args += ["--find-links", link]
    if plan.offline:
        return [*args, "--no-index"]
    if plan.indexes:
        args += ["--index-url", plan.indexes[0]]
    for url in plan.extra_indexes:
        args += ["--extra-index-url", url]
    return args


# What would redirect where packages come from, what gets installed, or into which
# environment, or weaken how what is installed is checked. The rest of the caller's
# settings stay: UV_CACHE_DIR, XDG_CACHE_HOME, PIP_CACHE_DIR, proxies, certificates,
# timeouts, concurrency.
REDIRECTING_ENV = frozenset(
    {
        "VIRTUAL_ENV",
        # uv: indexes, links, configuration, resolution, the interpreter
        "UV_INDEX_URL", "UV_EXTRA_INDEX_URL", "UV_FIND_LINKS", "UV_INDEX", "UV_DEFAULT_INDEX",
        "UV_NO_INDEX", "UV_INDEX_STRATEGY", "UV_CONFIG_FILE", "UV_OVERRIDE", "UV_CONSTRAINT",
        "UV_BUILD_CONSTRAINT", "UV_TORCH_BACKEND", "UV_PRERELEASE", "UV_RESOLUTION",
        "UV_EXCLUDE_NEWER", "UV_PYTHON", "UV_SYSTEM_PYTHON", "UV_PROJECT_ENVIRONMENT",
        # pip: the same, and installs elsewhere than the venv
        "PIP_INDEX_URL", "PIP_EXTRA_INDEX_URL", "PIP_FIND_LINKS", "PIP_NO_INDEX",
        "PIP_CONFIG_FILE", "PIP_CONSTRAINT", "PIP_REQUIREMENT", "PIP_PRE", "PIP_ONLY_BINARY",
        "PIP_NO_BINARY", "PIP_TARGET", "PIP_PREFIX", "PIP_ROOT", "PIP_USER",
        # what would weaken the checks: hashes not verified, TLS not verified for a
        # host, builds that see the caller's packages
        "UV_NO_VERIFY_HASHES", "UV_INSECURE_HOST", "UV_NO_BUILD_ISOLATION",
        "PIP_TRUSTED_HOST", "PIP_NO_BUILD_ISOLATION",
    }
)  # fmt: skip


def _clean_env() -> dict[str, str]:
    """The installer's environment without what would redirect where packages come from.

    The bundle's lock says where packages come from; a stray PIP_INDEX_URL on the new
    box must not redirect the install. The user's cache settings are kept.
    """
    env = {k: v for k, v in os.environ.items() if k not in REDIRECTING_ENV}
    env["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
    return env


def install_lock(interpreter: Path, plan: InstallPlan, installer: Installer) -> None:
    """Install exactly `plan.lock` into the venv of `interpreter`, resolving nothing.

    The installer runs in an empty directory of its own: pip-sync lists the installed
    set from the target's sys.path, which starts with the working directory, and would
    try to uninstall any `*.egg-info` it finds there (a checkout's own, say).

    The installer is given a lock repro writes there from `plan.lock`'s pins and hashes
    only: an option line of the file (`--find-links`, `-c`, `${VAR}`...) never reaches
    it; where packages come from is `plan`'s sources, on argv.

    uv is also given the sha256 of each vault wheel: it caches a `--find-links` wheel
    by its directory and file name and serves the cached copy even after the file
    changed (a target unpacked again from a newer bundle, a reused path), so without
    the digest a rebuilt wheel of the same name and version would not be the one
    installed. pip reads the file itself; given a digest for some pins only it would
    demand one for every pin, so it gets the lock's own."""
    extra = plan.vault_hashes if installer == "uv" else None
    lock_pins = read_requirements_lock(plan.lock)
    audit_local_wheels(interpreter, plan, lock_pins.pins)
    pins_only = render_pins_only(lock_pins, extra)
    with tempfile.TemporaryDirectory(prefix="repro-install-") as neutral:
        lock = Path(neutral) / "lock" / "requirements.txt"
        lock.parent.mkdir()
        lock.write_text(pins_only, encoding="utf-8")
        plan = replace(
            plan,
            lock=lock,
            wheels=plan.wheels.resolve() if plan.wheels is not None else None,
        )
        work = Path(neutral) / "cwd"
        work.mkdir()
        _install(interpreter, plan, installer, cwd=work)


def _local_dirs(plan: InstallPlan) -> list[Path]:
    """The directories of wheels on this box that the installer is pointed at."""
    dirs = [plan.wheels] if plan.wheels is not None else []
    for link in plan.find_links:
        if link.startswith("file://"):
            dirs.append(Path(unquote(urlsplit(link).path)))
        elif "://" not in link:
            dirs.append(Path(link))
    return [d for d in dirs if d.is_dir()]


def audit_local_wheels(interpreter: Path, plan: InstallPlan, pins: Sequence[Pin]) -> None:
    """The local wheel pip-sync or uv would take for each pin, checked as the vault
    installer checks its own (repro.wheel.audit: where each file would go,
    the sizes and ranges of its members, two wheels writing one path) before either
    installer sees it: they would write the venv's own `pyvenv.cfg` or `bin/python`
    for a wheel that asks."""
    by_name: dict[str, Path] = {}
    for directory in _local_dirs(plan):
        for wheel in sorted(directory.glob("*.whl")):
            by_name.setdefault(wheel.name, wheel)
    if not by_name:
        return
    described = describe_interpreter(interpreter)
    chosen, _ = choose_wheel_names(pins, by_name, supported_tags(described))
    scheme = venv_scheme(interpreter, described)
    check_claims([plan_wheel(by_name[name], scheme) for name in chosen.values()])


def _install(interpreter: Path, plan: InstallPlan, installer: Installer, *, cwd: Path) -> None:
    env = _clean_env()
    if installer == "uv":
        uv = find_uv()
        assert uv is not None
        # `uv pip sync` installs the listed requirements and none of their
        # dependencies (no --strict: an incomplete lock is installed as it is).
        argv = [str(uv), "pip", "sync", "--python", str(interpreter), "--quiet"]
        argv += ["--no-config", "--index-strategy", "unsafe-best-match"]
        if plan.offline:
            argv += ["--offline"]
        if plan.binary_only:
            argv += ["--no-build"]
        argv += [*_source_args(plan), str(plan.lock)]
        _run(argv, what="uv pip sync", env=env, hint=INSTALL_HINT, cwd=cwd)
        return
    pip_sync = Path(sys.executable).with_name("pip-sync")
    base = [str(pip_sync)] if pip_sync.exists() else [sys.executable, "-m", "piptools", "sync"]
    argv = [*base, "--python-executable", str(interpreter), "-q"]
    # Exactly the lock, as uv does: pip installs the listed pins and resolves nothing.
    argv += ["--pip-args", "--no-deps --only-binary :all:" if plan.binary_only else "--no-deps"]
    argv += [*_source_args(plan), str(plan.lock)]
    env["PIP_CONFIG_FILE"] = os.devnull
    _run(argv, what="pip-sync", env=env, hint=INSTALL_HINT, cwd=cwd)


def compare_installed(pins: Mapping[str, str], installed: Mapping[str, str]) -> InstalledSetDiff:
    wanted = {canonicalize_name(name): version for name, version in pins.items()}
    missing = sorted(name for name in wanted if name not in installed)
    extra = sorted(name for name in installed if name not in wanted and name not in BOOTSTRAP)
    wrong = sorted(
        (name, wanted[name], installed[name])
        for name in wanted
        if name in installed and installed[name] != wanted[name]
    )
    return InstalledSetDiff(tuple(missing), tuple(extra), tuple(wrong))


def verify_installed(interpreter: Path, pins: Mapping[str, str]) -> InstalledSetDiff:
    diff = compare_installed(pins, read_installed(interpreter))
    if not diff.clean:
        raise InstallError(
            f"the installed set in {interpreter.parent.parent} differs from the lock:\n"
            + diff.describe()
        )
    return diff
