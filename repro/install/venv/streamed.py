"""The vault installer at work while a bundle streams in (`pack -o - | unpack -`).

A stream's manifest is its last member, so nothing can be verified before the whole
bundle has arrived; the vault's wheels come early (env/wheels/ sorts before files/,
patches/ and services/). Waiting for the manifest and only then unpacking 7 GB of wheels
makes the two add up, and writes the wheels' bytes to the disk once more than needed.

So, for a fresh target and the vault installer, each wheel is unpacked as soon as it is
written into staging: into a venv prefix inside the staging area, with scripts pointed
at the interpreter the venv will have at its final place. Which wheels to take is
chosen at the first wheel from the members before it: bundle.toml, env/requirements.lock
and the wheels' names (format 5: bundle.toml's `[vault]`; before: env/vault.toml). The
wheel's digest (taken as it was written) must be one env/vault.toml lists for its pin:
checked at once where env/vault.toml came first (formats 1 to 4), else when it arrives,
after the wheels (format 5: it is a trailing member, written once pack had hashed the
wheels as it wrote them). Unless --keep-bundle, the wheel file is removed once unpacked
(before the page cache has written it back), the verification counting it by that
digest. Nothing leaves staging before the manifest verifies, every digest was checked
and the preflight passes; then the venv is made at the target and the staged files are
moved into it (`adopt`). A failure before that leaves the staging directory to be
removed, as for any stream.

Not used for a bundle whose signature must be checked (nothing of it is parsed before
the signature is), for a dry run, for another installer, or for a target that exists.
"""

from __future__ import annotations

import errno
import os
import shutil
import stat
import threading
import time
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

from packaging.utils import canonicalize_name

from repro.bundle import layout
from repro.bundle.info import BundleInfo, load_bundle_info
from repro.bundle.lock import read_requirements_lock
from repro.bundle.vault import load_vault
from repro.errors import InstallError
from repro.install.read.contents import hashes_by_pin
from repro.install.options import UnpackOptions
from repro.install.preflight import find_python
from repro.install.read.staging import create_staging_dir
from repro.install.state import STATE_DIR
from repro.install.venv.vault import (
    MAX_WORKERS,
    choose_wheel_names,
    describe_interpreter,
    supported_tags,
    venv_scheme,
)
from repro.install.deploy.restore import venv_dir
from repro.wheel.audit import Claims, plan_wheel
from repro.wheel.install import Installed, install_plan
from repro.wheel.scheme import Scheme

_WHEELS = f"{layout.WHEELS}/"
_SCHEME_DIRS = ("purelib", "platlib", "scripts")


@dataclass(frozen=True)
class StagedVenv:
    """A venv's files unpacked in staging, to be moved into a venv made at `venv`."""

    python: Path  # the base interpreter the venv is to be made with
    venv: Path  # where the venv will be
    prefix: Path  # the staged files, laid out as below `venv`
    layout: Mapping[str, str]  # purelib, platlib, scripts relative to the venv
    installed: tuple[Installed, ...]
    seconds: float  # from the first wheel's arrival to the last one unpacked


def relative_layout(scheme: Mapping[str, str]) -> dict[str, str]:
    """purelib, platlib and scripts relative to the scheme's prefix."""
    prefix = scheme["prefix"]
    return {key: os.path.relpath(scheme[key], prefix) for key in _SCHEME_DIRS}


@dataclass
class _Plan:
    python: Path
    venv: Path
    scheme: Scheme  # the staged prefix's directories, scripts pointed at the venv
    layout: dict[str, str]
    wanted: dict[str, str]  # wheel file name -> pin
    # pin (normalized) -> sha256s vault.toml lists; None until it arrives (format 5)
    hashes: dict[str, tuple[str, ...]] | None
    keep: frozenset[str]  # wheel file names never removed (the preflight inspects them)


@dataclass
class StreamedInstall:
    """Unpacks vault wheels as `on_written` hears of them; see the module's docstring.
    `place` is told where in the staging area the staged venv's files go."""

    options: UnpackOptions
    prefix: Path | None = None
    _plan: _Plan | None = None
    _off: bool = False
    _pool: ThreadPoolExecutor | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _installed: list[Installed] = field(default_factory=list)
    _consumed: set[str] = field(default_factory=set)
    # every destination of the wheels unpacked so far: a later wheel may not write one
    _claims: Claims = field(default_factory=Claims)
    # the wheels taken before env/vault.toml arrived: (file name, pin, digest)
    _unchecked: list[tuple[str, str, str]] = field(default_factory=list)
    _error: BaseException | None = None
    _failed: threading.Event = field(default_factory=threading.Event)
    _started: float = 0.0
    _finished: float = 0.0

    @staticmethod
    def wanted_for(options: UnpackOptions) -> bool:
        """Whether a run with these options may install while the bundle streams in."""
        return (
            options.installer in ("auto", "vault")
            and not options.dry_run
            and not options.signature.active
            and (options.target is None or _fresh(options.target, options.replace))
        )

    # -- while the stream is read ---------------------------------------------------

    def place(self, prefix: Path) -> None:
        """The staged venv goes to `prefix`: a path in the staging area, made here
        (exclusively, 0700: repro.install.read.staging.create_staging_dir) before any byte of
        the stream is read, and removed with the staging area."""
        create_staging_dir(prefix)
        self.prefix = prefix

    def on_written(self, top: Path, name: str, digest: str) -> None:
        """A member was written (at `top / name`) and hashed: unpack it when it is a
        wheel this venv takes. Anything that keeps the plan from being made turns the
        streamed install off; the install then runs after the verification, as always."""
        if self._off:
            return
        if name == layout.VAULT_TOML:
            self._vault_arrived(top)
            return
        if not name.startswith(_WHEELS) or "/" in name[len(_WHEELS) :]:
            return
        if self.prefix is None:
            self._off = True
            return
        if self._plan is None:
            try:
                self._plan = self._make_plan(top)
            except Exception:  # unreadable here: the verification will say what is wrong
                self._plan = None
            if self._plan is None:
                self._off = True
                return
            self._started = time.monotonic()
            workers = max(1, min(self.options.jobs or os.cpu_count() or 1, MAX_WORKERS))
            self._pool = ThreadPoolExecutor(workers, thread_name_prefix="repro-stream-wheel")
        filename = name[len(_WHEELS) :]
        pin = self._plan.wanted.get(filename)
        if pin is None or self._failed.is_set():
            return
        if self._plan.hashes is None:
            self._unchecked.append((filename, pin, digest))
        assert self._pool is not None
        self._pool.submit(self._unpack, name, top / name, pin, digest)

    def _vault_arrived(self, top: Path) -> None:
        """env/vault.toml was written: the digests of the wheels taken before it (all of
        them, in format 5) are checked against it now, before anything leaves staging."""
        plan = self._plan
        if plan is None or plan.hashes is not None:
            return  # no wheel taken yet (formats 1 to 4: it comes first), or checked
        try:
            entries = load_vault(layout.at(top, layout.VAULT_TOML).read_bytes(), source="stream")
        except Exception as exc:  # a bad list: nothing staged may be used
            self._fail(exc)
            return
        plan.hashes = hashes_by_pin(entries)
        for filename, pin, digest in self._unchecked:
            problem = _unlisted(filename, pin, digest, plan.hashes)
            if problem is not None:
                self._fail(problem)
                return
        self._unchecked.clear()

    def _fail(self, exc: BaseException) -> None:
        with self._lock:
            if self._error is None:
                self._error = exc
        self._failed.set()

    def _make_plan(self, top: Path) -> _Plan | None:
        """What to install where, from the members read so far (bundle.toml, the lock and
        the wheels' names come before the wheels), or None when it cannot be known."""
        info = load_bundle_info(layout.at(top, layout.BUNDLE_TOML).read_bytes(), source="stream")
        lock = read_requirements_lock(layout.at(top, layout.REQUIREMENTS_LOCK))
        names, keep, hashes = _vault_names(top, info)
        target = (self.options.target or Path.cwd() / info.top_dir).resolve()
        if not _fresh(target, self.options.replace):
            return None
        python = find_python(info.source.python, self.options.python)
        if python is None:
            return None
        venv = venv_dir(target, info)
        described = describe_interpreter(python, prefix=venv)
        wanted, missing = choose_wheel_names(lock.pins, names, supported_tags(described))
        if missing:
            return None
        final = venv_scheme(venv / "bin" / "python", described)
        return _Plan(
            python=python,
            venv=venv,
            scheme=Scheme(
                purelib=self._staged(final.purelib, venv),
                platlib=self._staged(final.platlib, venv),
                scripts=self._staged(final.scripts, venv),
                data=self._staged(venv, venv),
                include_site=self._staged(final.include_site, venv),
                python=final.python,
                reserved=final.reserved,
                version=final.version,
            ),
            layout=relative_layout(described.scheme),
            wanted={filename: pin for pin, filename in wanted.items()},
            hashes=hashes,
            keep=keep,
        )

    def _staged(self, path: Path, venv: Path) -> Path:
        assert self.prefix is not None
        return self.prefix / path.relative_to(venv)

    def _unpack(self, name: str, wheel: Path, pin: str, digest: str) -> None:
        plan = self._plan
        assert plan is not None
        try:
            if self._failed.is_set():
                return
            hashes = plan.hashes
            problem = None if hashes is None else _unlisted(wheel.name, pin, digest, hashes)
            if problem is not None:
                raise problem
            # planned (central directory only) and its destinations claimed before a
            # byte is written: two wheels of the stream writing one path are refused
            # whichever arrives first
            wheel_plan = plan_wheel(wheel, plan.scheme)
            with self._lock:
                self._claims.add(wheel_plan)
            installed = install_plan(wheel_plan)
            removed = False
            if not self.options.keep_bundle and wheel.name not in plan.keep:
                wheel.unlink()
                removed = True
            with self._lock:
                self._installed.append(installed)
                if removed:
                    self._consumed.add(name)
                self._finished = time.monotonic()
        except BaseException as exc:
            self._fail(exc)

    def cancel(self) -> None:
        """The stream failed or was interrupted: wheels not yet started are dropped, those
        being unpacked are waited for (the staging area goes with them)."""
        self._failed.set()
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)

    def settle(self) -> frozenset[str]:
        """Wait for every wheel in flight; the members removed once unpacked (their
        digests, taken as they were written, stand for them in the verification)."""
        if self._pool is not None:
            self._pool.shutdown(wait=True)
        if self._plan is None and self.prefix is not None:
            # nothing was staged: the prefix made by `place` goes now, before the staging
            # directory moves into the target, so that nothing is left beside it
            shutil.rmtree(self.prefix, ignore_errors=True)
        return frozenset(self._consumed)

    # -- once the bundle verified -----------------------------------------------------

    def outcome(self) -> StagedVenv | None:
        """The staged venv, or None when the install must run as usual (nothing was
        staged, or what was is dropped here). An install that failed after removing
        wheels cannot be run again from this bundle's copy: its error is raised."""
        self.settle()
        plan = self._plan
        if plan is None:
            return None
        error = self._error
        if error is None and plan.hashes is None:
            error = InstallError(
                f"the stream held no {layout.VAULT_TOML}: the sha256 of the wheels unpacked "
                "while it streamed in cannot be checked"
            )
        if error is None:
            unpacked = {(i.name, i.version) for i in self._installed}
            if len(unpacked) != len(plan.wanted):
                error = InstallError(
                    f"the stream held {len(unpacked)} of the {len(plan.wanted)} wheels "
                    f"{layout.VAULT_TOML} names for this Python"
                )
        assert self.prefix is not None
        if error is None:
            return StagedVenv(
                python=plan.python,
                venv=plan.venv,
                prefix=self.prefix,
                layout=plan.layout,
                installed=tuple(sorted(self._installed, key=lambda i: i.name)),
                seconds=max(0.0, self._finished - self._started),
            )
        shutil.rmtree(self.prefix, ignore_errors=True)
        if not self._consumed:
            return None
        if isinstance(error, InstallError):
            raise error
        if isinstance(error, OSError):
            raise InstallError(
                f"install: {error.strerror or error}"
                + (f" ({error.filename})" if error.filename else ""),
                hint="free the space or fix the cause, then run unpack again",
            ) from error
        raise error


def _vault_names(
    top: Path, info: BundleInfo
) -> tuple[tuple[str, ...], frozenset[str], dict[str, tuple[str, ...]] | None]:
    """The vault's wheel file names, those never removed (no index serves them: the
    preflight inspects them) and, where env/vault.toml came before the wheels (formats
    1 to 4), each pin's listed sha256; in format 5 those come after the wheels (None
    until then)."""
    vault = layout.at(top, layout.VAULT_TOML)
    if info.format_version >= layout.TRAILING_LOCKS_FROM_FORMAT:
        names = info.vault.wheels if info.vault is not None else ()
        kept = info.vault.index_serves if info.vault is not None else ()
        hashes = None
        if vault.is_file():  # not where pack puts it, but the manifest will judge that
            hashes = hashes_by_pin(load_vault(vault.read_bytes(), source="stream"))
        return names, frozenset(names) - frozenset(kept), hashes
    entries = load_vault(vault.read_bytes(), source="stream")
    return (
        tuple(e.filename for e in entries),
        frozenset(e.filename for e in entries if not e.index_serves),
        hashes_by_pin(entries),
    )


def _unlisted(
    filename: str, pin: str, digest: str, hashes: Mapping[str, tuple[str, ...]]
) -> InstallError | None:
    """The error for a wheel whose digest env/vault.toml does not list for its pin."""
    if digest in hashes.get(canonicalize_name(pin), ()):
        return None
    return InstallError(
        f"{filename}: sha256 {digest} is not the one {layout.VAULT_TOML} lists for {pin}"
    )


def _fresh(target: Path, replace: bool) -> bool:
    """A target with nothing in it yet (or one --replace will remove): no earlier run's
    venv or state to resume from."""
    if not target.exists():
        return True
    if replace and (target / STATE_DIR / "state.toml").is_file():
        return True
    return target.is_dir() and not target.is_symlink() and not any(target.iterdir())


def adopt(staged: StagedVenv, venv: Path, layout_now: Mapping[str, str]) -> None:
    """Move the staged files into the venv just made at `venv` (renames on one file
    system); `layout_now` is that venv's own layout, which must be the one staged for.
    The whole staged tree is checked first (`_refusals`): nothing moves when a staged
    entry would replace what the venv step made, or a link or a directory."""
    if venv != staged.venv or dict(layout_now) != dict(staged.layout):
        raise InstallError(
            f"{venv}: the venv's layout {dict(layout_now)} is not the one the wheels were "
            f"unpacked for while the bundle streamed in ({dict(staged.layout)})",
            hint="run unpack again with the bundle as a file, or with --keep-bundle",
        )
    if not staged.prefix.is_dir() or staged.prefix.is_symlink():
        return
    refused = _refusals(staged.prefix, venv, staged.layout["scripts"])
    if refused:
        raise InstallError(
            f"{venv}: refusing to move the wheels unpacked while the bundle streamed in "
            "into the venv; nothing was moved:\n"
            + "\n".join(f"  - {line}" for line in refused[:50]),
            hint="the bundle's wheels write the venv's own files; get a bundle whose wheels do not",
        )
    _merge(staged.prefix, venv)


# What the venv step makes and no wheel may replace: pyvenv.cfg (the interpreter reads
# it first), the interpreter itself and the activation scripts (relative to `scripts`).
_VENV_OWN = ("pyvenv.cfg",)
_SCRIPTS_OWN = ("python*", "activate*", "Activate*")


def _own(rel: PurePosixPath, scripts: str) -> bool:
    if rel.as_posix() in _VENV_OWN:
        return True
    return rel.parent.as_posix() == scripts and any(rel.match(p) for p in _SCRIPTS_OWN)


def _refusals(source: Path, dest: Path, scripts: str) -> list[str]:
    """Every staged entry that may not move into `dest`, and why: one the venv step
    made, a link (repro stages none), a file that would replace a link or a directory,
    a directory that would replace a file or a link. Nothing is followed."""
    refused: list[str] = []
    pending = [PurePosixPath()]
    while pending:
        rel = pending.pop()
        with os.scandir(source / rel) as entries:
            children = sorted(entries, key=lambda e: e.name)
        for child in children:
            name = rel / child.name
            there = dest / name
            if _own(name, scripts):
                refused.append(f"{there}: the venv's own file, made by the venv step")
                continue
            if child.is_symlink():
                refused.append(f"{source / name}: a link in the staged files")
                continue
            try:
                info = there.lstat()
            except FileNotFoundError:
                continue  # moved as it is: a new file or a whole new directory
            if child.is_dir(follow_symlinks=False):
                if stat.S_ISDIR(info.st_mode):
                    pending.append(name)
                else:
                    refused.append(f"{there}: a directory would replace {_kind(info)}")
            elif not stat.S_ISREG(info.st_mode):
                refused.append(f"{there}: a file would replace {_kind(info)}")
    return refused


def _kind(info: os.stat_result) -> str:
    if stat.S_ISLNK(info.st_mode):
        return "a symbolic link"
    if stat.S_ISDIR(info.st_mode):
        return "a directory"
    return "a regular file" if stat.S_ISREG(info.st_mode) else "a special file"


def _merge(source: Path, dest: Path) -> None:
    """Every entry of `source` moved to the same place below `dest`; directories both
    hold are merged, a regular file `dest` holds is replaced (as an installer
    overwrites it). What `_refusals` would refuse is refused here too, should it have
    appeared since: a link is never followed, never moved, never replaced."""
    with os.scandir(source) as entries:
        children = list(entries)
    for child in children:
        there = dest / child.name
        if child.is_symlink():
            raise InstallError(f"{child.path}: a link in the staged files; refusing to move it")
        try:
            info: os.stat_result | None = there.lstat()
        except FileNotFoundError:
            info = None
        if child.is_dir(follow_symlinks=False) and info is not None:
            if not stat.S_ISDIR(info.st_mode):
                raise InstallError(f"{there}: a directory would replace {_kind(info)}")
            _merge(Path(child.path), there)
            continue
        if info is not None and not stat.S_ISREG(info.st_mode):
            raise InstallError(f"{there}: a file would replace {_kind(info)}")
        try:
            os.replace(child.path, there)
        except OSError as exc:
            if exc.errno != errno.EXDEV:  # another file system: copied, then removed
                raise
            shutil.move(child.path, there)
