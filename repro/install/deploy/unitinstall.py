"""`unpack --install-units`: rendered units into systemd's directory, never over a unit
repro did not install.

Every unit file repro installs starts with MARKER, so a rerun tells its own units
(replaced in place) from the box's. A name the box already uses is refused, all at
once and before anything is written, unless the operator passes --force: a file or
link of that name in the units directory that is not repro's (with --force it is kept
as NAME.repro-backup, or .repro-backup.N when that is taken, and the report names the
backup), or, when installing into /etc/systemd/system, a unit of that name in
systemd's other unit directories, which the installed file would override.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from repro.errors import UsageError
from repro.install.transaction.atomic import fsync_directory, write_if_changed

SYSTEMD_DIR = Path("/etc/systemd/system")
# The rest of systemd's system unit search path (systemd.unit(5)); a unit in
# /etc/systemd/system overrides one of the same name in any of them.
VENDOR_DIRS = (
    Path("/run/systemd/system"),
    Path("/usr/local/lib/systemd/system"),
    Path("/usr/lib/systemd/system"),
    Path("/lib/systemd/system"),
)
MARKER = "# repro-installed-unit: written by `repro unpack --install-units`; a rerun replaces it"
BACKUP_SUFFIX = ".repro-backup"


@dataclass(frozen=True)
class UnitPlacement:
    """Where one unit goes and what is there now."""

    name: str
    dest: Path
    ours: bool  # dest holds a unit repro installed (replaced without a backup)
    foreign: bool  # dest exists (a file or a link) and repro did not install it
    shadows: tuple[Path, ...]  # units of the same name that dest would override

    @property
    def conflicts(self) -> list[str]:
        found = [f"{self.dest} exists and repro did not install it"] if self.foreign else []
        found += [f"{self.dest} would override {path}" for path in self.shadows]
        return found

    def describe(self) -> str:
        """What installing it does, for the line printed before (or instead of) it."""
        if self.ours:
            return f"replacing repro's own {self.dest}"
        notes = self.conflicts
        return "; ".join(notes) + " (refused without --force)" if notes else "a new unit"


@dataclass(frozen=True)
class InstalledUnit:
    dest: Path
    backup: Path | None  # where the unit repro replaced with --force was kept


def other_unit_dirs(units_dir: Path) -> tuple[Path, ...]:
    """The directories a unit installed into `units_dir` overrides: systemd's vendor
    directories for /etc/systemd/system, none for a directory the operator named."""
    return VENDOR_DIRS if units_dir.resolve() == SYSTEMD_DIR.resolve() else ()


def is_ours(path: Path) -> bool:
    """A regular file whose first line is MARKER."""
    if path.is_symlink() or not path.is_file():
        return False
    try:
        with path.open("rb") as stream:
            first = stream.readline(len(MARKER) + 2)
    except OSError:
        return False
    return first.rstrip(b"\n").decode("utf-8", "replace") == MARKER


def place_units(
    names: Sequence[str], units_dir: Path, others: Sequence[Path] | None = None
) -> list[UnitPlacement]:
    """Where each unit goes and what is there; `others`: the directories a unit there
    overrides (default: `other_unit_dirs`). Reads only."""
    others = other_unit_dirs(units_dir) if others is None else others
    placements = []
    for name in names:
        dest = units_dir / name
        present = dest.exists() or dest.is_symlink()
        ours = present and is_ours(dest)
        shadows: tuple[Path, ...] = ()
        if not ours:
            shadows = tuple(
                d / name for d in others if (d / name).exists() or (d / name).is_symlink()
            )
        placements.append(UnitPlacement(name, dest, ours, present and not ours, shadows))
    return placements


def refuse_conflicts(placements: Sequence[UnitPlacement], *, force: bool) -> None:
    """Every unit name the box already uses, at once; nothing is written before. A
    directory in a unit's place is refused even with `force`."""
    directories = [p.dest for p in placements if p.dest.is_dir() and not p.dest.is_symlink()]
    if directories:
        raise UsageError(
            "refusing to install unit(s) where a directory is:\n"
            + "\n".join(f"  - {d}" for d in directories),
            hint="move the directory away, or rename the unit in the workspace and pack again",
        )
    conflicts = [c for p in placements for c in p.conflicts]
    if conflicts and not force:
        raise UsageError(
            "refusing to install unit(s) over names this box already uses:\n"
            + "\n".join(f"  - {c}" for c in conflicts),
            hint="rename the unit in the workspace and pack again, or pass --force to "
            "install anyway (a file repro did not install is backed up first)",
        )


def _backup_path(dest: Path) -> Path:
    candidate = dest.with_name(dest.name + BACKUP_SUFFIX)
    index = 1
    while candidate.exists() or candidate.is_symlink():
        candidate = dest.with_name(f"{dest.name}{BACKUP_SUFFIX}.{index}")
        index += 1
    return candidate


def _back_up(dest: Path) -> Path:
    """A copy of `dest` beside it (a link stays a link); the original stays in place
    until the new unit replaces it atomically."""
    backup = _backup_path(dest)
    if dest.is_symlink():
        os.symlink(os.readlink(dest), backup)
    else:
        shutil.copy2(dest, backup)
    fsync_directory(backup.parent)
    return backup


def install_unit_files(
    placements: Sequence[UnitPlacement], contents: Sequence[bytes], *, force: bool
) -> list[InstalledUnit]:
    """Write each unit (MARKER, then its rendered text) to its place, unless it holds
    that already; a foreign file is backed up first (only with `force`: refused
    otherwise)."""
    refuse_conflicts(placements, force=force)
    installed = []
    for placement, content in zip(placements, contents, strict=True):
        backup = _back_up(placement.dest) if placement.foreign else None
        write_if_changed(placement.dest, MARKER.encode() + b"\n" + content)
        installed.append(InstalledUnit(placement.dest, backup))
    return installed


def reload_systemd(units_dir: Path) -> None:
    """`systemctl daemon-reload` when the units went into systemd's own directory of a
    running systemd."""
    systemctl = shutil.which("systemctl")
    if (
        systemctl is not None
        and Path("/run/systemd/system").is_dir()
        and units_dir.resolve() == SYSTEMD_DIR.resolve()
    ):
        subprocess.run([systemctl, "daemon-reload"], check=False, timeout=60, env=dict(os.environ))
