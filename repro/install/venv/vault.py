"""The `vault` installer: the lock installed by unpacking the vault's own wheels.

Used when the vault holds a wheel this venv's Python takes for every pin (a bundle
packed with `--wheels all`): no resolver, no index, no installer's cache, no code of the
bundle run, and each wheel's bytes checked against env/vault.toml before it is used.
Wheels are installed several at a time, largest first; with `drop`, each wheel leaves
the kept bundle once unpacked, so that the disk holds the bundle's vault or the venv's
copy of each file, not both (the wheels in flight at once are held to a budget).
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from packaging.tags import Tag, compatible_tags, cpython_tags, platform_tags
from packaging.utils import InvalidWheelFilename, canonicalize_name, parse_wheel_filename
from packaging.version import InvalidVersion, Version

from repro.bundle import layout
from repro.bundle.lock import Pin
from repro.errors import InstallError
from repro.hashing import sha256_file
from repro.install.state import STATE_DIR
from repro.install.venv.site import run_no_site
from repro.wheel.audit import WheelPlan, check_claims, plan_wheel
from repro.wheel.install import Installed, install_plan
from repro.wheel.scheme import Scheme

# Wheels unpacked at once are held to this many bytes (or one wheel, when larger), so
# that with `drop` the disk never holds much more than the venv.
IN_FLIGHT_MIN = 256 * 2**20
MAX_WORKERS = 8


def in_flight_budget(vault_bytes: int) -> int:
    """The bytes of wheels unpacked at once (one wheel may be larger on its own)."""
    return max(IN_FLIGHT_MIN, vault_bytes // 20)


@dataclass(frozen=True)
class Interpreter:
    version: tuple[int, int]
    implementation: str
    scheme: dict[str, str]


def describe_interpreter(python: Path, prefix: Path | None = None) -> Interpreter:
    """The version and install scheme of `python`, asked without site processing: of
    its own venv, or (`prefix`) of a venv it would make at `prefix`."""
    args = ["scheme"] if prefix is None else ["scheme", str(prefix)]
    out = run_no_site(python, args, what="ask for its install scheme")
    try:
        data = json.loads(out)
        major, minor = (int(part) for part in str(data["version"]).split("."))
        return Interpreter((major, minor), str(data["implementation"]), data)
    except (ValueError, KeyError, TypeError) as exc:
        raise InstallError(f"{python}: unreadable scheme answer: {out[:200]!r}") from exc


def supported_tags(interpreter: Interpreter) -> list[Tag]:
    """The wheel tags `interpreter` takes on this machine, best first (its version, this
    machine's platforms: the interpreter runs here)."""
    platforms = list(platform_tags())
    version = interpreter.version
    tags: list[Tag] = []
    if interpreter.implementation == "cpython":
        tags += cpython_tags(python_version=version, platforms=platforms)
        tags += compatible_tags(
            python_version=version, interpreter=f"cp{version[0]}{version[1]}", platforms=platforms
        )
    else:
        tags += compatible_tags(python_version=version, platforms=platforms)
    return tags


@dataclass(frozen=True)
class VaultChoice:
    wheels: Mapping[str, Path]  # pin name -> the vault wheel to install
    missing: tuple[str, ...]  # "name==version" of each pin with no wheel this Python takes


def choose_wheels(pins: Sequence[Pin], vault: Path, tags: Sequence[Tag]) -> VaultChoice:
    """For each pin, the vault's wheel of that name and version whose tags rank best."""
    names = sorted(p.name for p in vault.glob("*.whl")) if vault.is_dir() else []
    chosen, missing = choose_wheel_names(pins, names, tags)
    return VaultChoice({pin: vault / name for pin, name in chosen.items()}, missing)


def choose_wheel_names(
    pins: Sequence[Pin], names: Iterable[str], tags: Sequence[Tag]
) -> tuple[dict[str, str], tuple[str, ...]]:
    """`choose_wheels` over wheel file names: (pin name -> file name, the pins missing)."""
    rank = {tag: index for index, tag in enumerate(tags)}
    best: dict[tuple[str, Version], tuple[int, str]] = {}
    for filename in sorted(names):
        try:
            name, version, _, wheel_tags = parse_wheel_filename(filename)
        except (InvalidWheelFilename, InvalidVersion):
            continue
        score = min((rank[t] for t in wheel_tags if t in rank), default=None)
        key = (canonicalize_name(name), version)
        if score is not None and (key not in best or score < best[key][0]):
            best[key] = (score, filename)
    chosen: dict[str, str] = {}
    missing: list[str] = []
    for pin in pins:
        try:
            found = best.get((canonicalize_name(pin.name), Version(pin.version)))
        except InvalidVersion:
            found = None
        if found is not None:
            chosen[pin.name] = found[1]
        else:
            missing.append(f"{pin.name}=={pin.version}")
    return chosen, tuple(missing)


# What no wheel writes into the venv: where the venv is the target itself, TARGET/.repro
# holds the unpack's state and the venv step's record of the interpreter (venvguard)
RESERVED = ((STATE_DIR, "repro's own (the unpack's state)"),)


def venv_scheme(interpreter: Path, described: Interpreter) -> Scheme:
    data = described.scheme
    prefix = Path(data["prefix"])
    major, minor = described.version
    return Scheme(
        purelib=Path(data["purelib"]),
        platlib=Path(data["platlib"]),
        scripts=Path(data["scripts"]),
        data=prefix,
        include_site=prefix / "include" / "site" / f"python{major}.{minor}",
        python=interpreter,
        reserved=RESERVED,
        version=(major, minor),
    )


class _Budget:
    """Bytes of wheels in flight: a wheel starts when it fits, or when none is in flight."""

    def __init__(self, limit: int) -> None:
        self._limit = limit
        self._used = 0
        self._changed = threading.Condition()

    def take(self, size: int, failed: threading.Event) -> bool:
        """Wait for room for `size` bytes; False when a wheel failed meanwhile."""
        with self._changed:
            self._changed.wait_for(
                lambda: failed.is_set() or not self._used or self._used + size <= self._limit
            )
            if failed.is_set():
                return False
            self._used += size
            return True

    def release(self, size: int) -> None:
        with self._changed:
            self._used -= size
            self._changed.notify_all()


@dataclass(frozen=True)
class VaultInstallResult:
    installed: tuple[Installed, ...]
    dropped: int  # wheels removed from the vault once unpacked


def install_from_vault(
    interpreter: Path,
    wheels: Mapping[str, Path],
    hashes: Mapping[str, Sequence[str]],
    *,
    jobs: int | None = None,
    drop: bool = False,
    progress: Callable[[Installed], None] | None = None,
) -> VaultInstallResult:
    """Unpack `wheels` (pin -> vault wheel) into the venv of `interpreter`.

    Every wheel is planned first (its central directory read and checked, its
    destinations judged: repro.wheel.audit), and the run is refused, nothing
    written, when one wheel may not write where it would or two write one path. Each
    wheel's SHA-256 must be one that env/vault.toml lists for its pin (`hashes`), read
    just before it is unpacked; the first wheel that fails stops the rest."""
    scheme = venv_scheme(interpreter, describe_interpreter(interpreter))
    plans: dict[str, WheelPlan] = {pin: plan_wheel(wheel, scheme) for pin, wheel in wheels.items()}
    check_claims(list(plans.values()))
    order = sorted(wheels.items(), key=lambda item: item[1].stat().st_size, reverse=True)
    total = sum(path.stat().st_size for _, path in order)
    budget = in_flight_budget(total)
    workers = max(1, min(jobs or os.cpu_count() or 1, MAX_WORKERS))
    room = _Budget(budget)
    failed = threading.Event()
    done: list[Installed] = []

    def one(pin: str, wheel: Path, size: int) -> None:
        try:
            if failed.is_set():
                return
            digest = sha256_file(wheel)
            if digest not in hashes.get(pin, ()):
                raise InstallError(
                    f"{wheel}: sha256 {digest} is not the one {layout.VAULT_TOML} lists for {pin}",
                    hint="the kept bundle was changed after it was verified; run unpack "
                    "again with the bundle (--replace rebuilds the target)",
                )
            installed = install_plan(plans[pin])
            if drop:
                wheel.unlink()
            done.append(installed)
            if progress is not None:
                progress(installed)
        except BaseException:
            failed.set()
            raise
        finally:
            room.release(size)

    futures: list[Future[None]] = []
    with ThreadPoolExecutor(workers, thread_name_prefix="repro-wheel") as pool:
        for pin, wheel in order:
            size = wheel.stat().st_size
            if not room.take(size, failed):
                break
            futures.append(pool.submit(one, pin, wheel, size))
    for future in futures:
        error = future.exception()
        if error is not None:
            raise error  # an InstallError, or the OSError unpack reports with its step
    return VaultInstallResult(tuple(sorted(done, key=lambda i: i.name)), len(done) if drop else 0)
