"""Where a venv keeps each kind of file: `Scheme`, the installer's destination (shared
by the plan, audit, and the writer, install, with the files an installer writes itself:
entry-point scripts, INSTALLER), and `SchemePaths`, an interpreter's install scheme as
the pack reads it (where the rebuild finds scripts, headers and data)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from repro.wheel.scripts import entry_point_script

INSTALLER_NAME = "repro"
SCHEME_KEYS = ("purelib", "platlib", "scripts", "headers", "data")


@dataclass(frozen=True)
class Scheme:
    """Where a venv keeps each kind of file (sysconfig's scheme of its interpreter)."""

    purelib: Path
    platlib: Path
    scripts: Path
    data: Path  # the venv's prefix
    include_site: Path  # headers go to include_site / <distribution name>
    python: Path  # the interpreter scripts are pointed at
    # Directories of the venv (relative, "/"-separated) no wheel writes, each with why:
    # the caller's own (repro's unpack state, where the venv is the target itself)
    reserved: tuple[tuple[str, str], ...]
    # The target interpreter's (major, minor): pip's versioned script names (pip3.11)
    # are made for it; None leaves the wheel's names as they are.
    version: tuple[int, int] | None = None

    def base(self, key: str, distribution: str) -> Path:
        if key == "headers":
            return self.include_site / distribution
        path: Path = getattr(self, key)
        return path

    def script(self, module: str, attrs: str) -> bytes:
        """The script of a console or GUI entry point (module and attrs are checked
        dotted names), run by the venv's interpreter (repro.wheel.scripts)."""
        return entry_point_script(self.python, module, attrs)

    def installer_line(self) -> bytes:
        return f"{INSTALLER_NAME}\n".encode()


@dataclass(frozen=True)
class SchemePaths:
    """Where an interpreter installs each wheel scheme (sysconfig names)."""

    purelib: Path
    platlib: Path
    scripts: Path
    data: Path
    include: Path

    @classmethod
    def from_sysconfig(cls, paths: Mapping[str, str]) -> SchemePaths:
        return cls(
            purelib=Path(paths["purelib"]),
            platlib=Path(paths["platlib"]),
            scripts=Path(paths["scripts"]),
            data=Path(paths["data"]),
            include=Path(paths["include"]),
        )

    @classmethod
    def for_venv_site_packages(cls, site_packages: Path) -> SchemePaths:
        """Guess the scheme of a POSIX venv from `<prefix>/lib/pythonX.Y/site-packages`."""
        prefix = site_packages.parent.parent.parent
        return cls(
            purelib=site_packages,
            platlib=site_packages,
            scripts=prefix / "bin",
            data=prefix,
            include=prefix / "include" / site_packages.parent.name,
        )
