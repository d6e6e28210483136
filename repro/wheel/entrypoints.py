"""A distribution's entry_points.txt: its console and GUI scripts, read one way for both
sides (the installer's audit, the rebuild and the scan).

entry_points.txt is an INI file (the entry points spec), read by configparser as
pypa/installer reads it: `=` the only delimiter, no interpolation, names as written. A
name listed twice is read as pip reads it: the last one wins. The one error policy: a
file that cannot be read, is not UTF-8 or is not INI, and (for the installer) an entry
point that is not a plain script name and a `module:object` reference, is an
`EntryPointsError` naming the file; each side wraps it at its boundary (the installer
refuses the wheel, the rebuild stops with a VaultError, the scan takes a script it cannot
match for a patch). configparser's own errors never leave this module.
"""

from __future__ import annotations

import configparser
import re
import unicodedata
from pathlib import Path

from repro.errors import EntryPointsError

SCRIPT_SECTIONS = ("console_scripts", "gui_scripts")
ENTRY_POINTS = "entry_points.txt"
_PIP_VERSIONED = re.compile(r"pip(\d+(\.\d+)?)?$")
_EASY_INSTALL_VERSIONED = re.compile(r"easy_install(-\d+\.\d+)?$")
_BAD_ENTRY_POINT = "bad entry point: not a plain script name and module:object reference"


def parse_scripts(data: bytes | str, origin: str) -> dict[str, dict[str, str]]:
    """Section -> {script name -> value} of the console and GUI scripts of an
    entry_points.txt's bytes or text (a section the file lacks is empty); `origin` names
    the file in an EntryPointsError."""
    parser = configparser.ConfigParser(delimiters=("=",), interpolation=None, strict=False)
    parser.optionxform = str  # type: ignore[assignment,method-assign]
    try:
        parser.read_string(data.decode("utf-8") if isinstance(data, bytes) else data)
    except (UnicodeDecodeError, configparser.Error) as exc:
        raise EntryPointsError(f"{origin}: not UTF-8 INI ({exc})") from exc
    return {
        section: {name: value.strip() for name, value in parser.items(section)}
        if parser.has_section(section)
        else {}
        for section in SCRIPT_SECTIONS
    }


def read_scripts(dist_info: Path) -> dict[str, str]:
    """Script name -> value of the console and GUI scripts of a `.dist-info` directory's
    entry_points.txt (none when it has no such file)."""
    path = dist_info / ENTRY_POINTS
    if not path.is_file():
        return {}
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise EntryPointsError(f"{path}: cannot read: {exc.strerror or exc}") from exc
    sections = parse_scripts(data, str(path))
    return {**sections["console_scripts"], **sections["gui_scripts"]}


def reference(value: str) -> tuple[str, str]:
    """(module, attribute path) of an entry point's value `module:attrs [extras]`; the
    extras say what the distribution needs, not what the script imports."""
    target = value.partition("[")[0].strip()
    module, _, attrs = target.partition(":")
    return module.strip(), attrs.strip()


def checked_scripts(
    data: bytes, origin: str, version: tuple[int, int] | None
) -> list[tuple[str, str, str]]:
    """(script name, module, attribute path) of each console and GUI script an installer
    writes: each name plain, each reference dotted names (EntryPointsError otherwise), and
    pip's versioned names for pip and easy_install (`pip`, `pipX`, `pipX.Y` of the
    target's Python `version`, whatever versioned names the file lists)."""
    found: list[tuple[str, str, str]] = []
    for section, scripts in parse_scripts(data, origin).items():
        if section == "console_scripts" and version is not None:
            scripts = _pip_names(scripts, version)
        for script, value in scripts.items():
            module, attrs = reference(value)
            if not _plain_name(script) or not _dotted(module) or not _dotted(attrs):
                where = f"{origin}: entry point {script!r} = {value!r}"
                raise EntryPointsError(f"{where}: {_BAD_ENTRY_POINT}")
            found.append((script, module, attrs))
    return found


def _plain_name(script: str) -> bool:
    return (
        bool(script)
        and script not in (".", "..")
        and "/" not in script
        and "\\" not in script
        and script == script.strip()
        and not any(unicodedata.category(c)[0] in "CZ" and c != " " for c in script)
    )


def _dotted(text: str) -> bool:
    return bool(text) and all(part.isidentifier() for part in text.split("."))


def _pip_names(scripts: dict[str, str], version: tuple[int, int]) -> dict[str, str]:
    """pip's own rule (operations/install/wheel.py, ENSUREPIP_OPTIONS unset): the
    versioned names of `pip` and `easy_install` are made for the target's Python."""
    major, minor = version
    out = dict(scripts)
    pip = out.pop("pip", None)
    if pip is not None:
        out = {k: v for k, v in out.items() if not _PIP_VERSIONED.match(k)}
        out.update({"pip": pip, f"pip{major}": pip, f"pip{major}.{minor}": pip})
    easy = out.pop("easy_install", None)
    if easy is not None:
        out = {k: v for k, v in out.items() if not _EASY_INSTALL_VERSIONED.match(k)}
        out.update({"easy_install": easy, f"easy_install-{major}.{minor}": easy})
    return out
