"""Render a bundle's systemd units with the target's paths (repro.install.unitinstall
installs them, only if asked).

A unit's environment files (its drop-in of credentials, repro.dropin, and the files its
EnvironmentFile= named on the source) are written with mode 0600. A value the operator
has set in one of them on an earlier run is kept when it is rendered again.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from repro.bundle import layout
from repro.dropin import required_names, unset_names
from repro.errors import InstallError
from repro.install.atomic import atomic_write
from repro.snapshot.services import render_unit, validate_unit_name
from repro.unitexec import unit_commands

_ENV_FILE_LINE = re.compile(r"^(?P<key>\s*EnvironmentFile\s*=\s*-?)(?P<path>\S+)\s*$", re.M)


@dataclass(frozen=True)
class RenderedUnit:
    name: str
    path: Path
    # (key, command line) of every command the unit makes systemd run: ExecStartPre=,
    # ExecStart=, ExecStartPost=, ExecReload=, ExecStop=... (repro.unitexec.EXEC_KEYS)
    commands: tuple[tuple[str, str], ...]

    def command_lines(self) -> list[str]:
        """One line per command, as the unit file says it: `NAME: KEY=COMMAND`."""
        return [f"{self.name}: {key}={command}" for key, command in self.commands]


@dataclass(frozen=True)
class RequiredSecret:
    """A credential a rendered unit reads from one of its environment files."""

    unit: str
    name: str
    file: Path  # where the operator sets it
    provided: bool  # the file gives it a value

    def to_json(self) -> dict[str, object]:
        return {
            "unit": self.unit,
            "name": self.name,
            "file": str(self.file),
            "provided": self.provided,
        }


_SETTING = re.compile(r"^(?P<name>[A-Za-z_][A-Za-z0-9_]*)=(?P<value>.*)$")


def _keep_provided(rendered: str, existing: str) -> str:
    """`rendered` with the values `existing` (the file on the target) gives to the
    names marked as removed at pack time: an operator's credential survives a rerun."""
    names = set(required_names(rendered))
    unset = set(unset_names(existing, names))
    values: dict[str, str] = {}
    for line in existing.splitlines():
        match = _SETTING.match(line.strip())
        if match is not None and match.group("name") in names - unset:
            values[match.group("name")] = match.group("value")
    out = []
    for line in rendered.splitlines(keepends=True):
        match = _SETTING.match(line.strip())
        if match is not None and match.group("name") in values and not match.group("value"):
            line = f"{match.group('name')}={values[match.group('name')]}\n"
        out.append(line)
    return "".join(out)


def required_secrets(bundle: Path, target: Path) -> list[RequiredSecret]:
    """Each credential the bundle's units read from an environment file, and whether
    the rendered file under TARGET/services gives it a value."""
    found: list[RequiredSecret] = []
    for env_dir in sorted(layout.at(bundle, layout.SERVICES).glob("*.d")):
        unit = env_dir.name.removesuffix(".d")
        for env_file in sorted(p for p in env_dir.iterdir() if p.is_file()):
            names = required_names(env_file.read_text(encoding="utf-8"))
            dest = layout.at(target, layout.unit(f"{env_dir.name}/{env_file.name}"))
            try:
                unset = set(unset_names(dest.read_text(encoding="utf-8"), names))
            except (OSError, UnicodeDecodeError):
                unset = set(names)
            found += [RequiredSecret(unit, name, dest, name not in unset) for name in names]
    return found


def _point_env_file(text: str, name: str, dest: Path) -> str:
    """EnvironmentFile= lines naming a file called `name` now name `dest`."""

    def replace(match: re.Match[str]) -> str:
        if match.group("path").endswith("/" + name):
            return f"{match.group('key')}{dest}"
        return match.group(0)

    return _ENV_FILE_LINE.sub(replace, text)


_ALIAS_LINE = re.compile(r"^\s*(Alias|DefaultInstance)\s*=\s*(?P<value>.*)$", re.M)


def check_units(bundle: Path, *, where: str) -> list[str]:
    """The bundle's unit names, each checked: a plain systemd name, and no [Install]
    Alias=/DefaultInstance= that would install it under another name."""
    source = layout.at(bundle, layout.SERVICES)
    if not source.is_dir():
        return []
    names: list[str] = []
    for unit in sorted(p for p in source.iterdir() if p.is_file()):
        validate_unit_name(unit.name, source=f"{where}: {layout.unit(unit.name)}")
        try:
            text = unit.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise InstallError(f"{where}: {layout.unit(unit.name)}: cannot read: {exc}") from exc
        alias = _ALIAS_LINE.search(text)
        if alias is not None:
            raise InstallError(
                f"{where}: {layout.unit(unit.name)} would also be installed as "
                f"{alias.group('value').strip()!r} ({alias.group(1)}=)",
                hint="a bundle's units are installed under their own names only; "
                "remove the line and pack again",
            )
        names.append(unit.name)
    return names


def render_units(
    bundle: Path, target: Path, *, venv: Path, home: Path, models: Path | None
) -> list[RenderedUnit]:
    source = layout.at(bundle, layout.SERVICES)
    if not source.is_dir():
        return []
    out_dir = layout.at(target, layout.SERVICES)
    values = {"REPRO_VENV": str(venv), "REPRO_HOME": str(home)}
    if models is not None:
        values["REPRO_MODELS"] = str(models)
    rendered: list[RenderedUnit] = []
    for unit in sorted(p for p in source.iterdir() if p.is_file()):
        validate_unit_name(unit.name, source=str(unit))
        text = render_unit(unit.read_text(encoding="utf-8"), values)
        env_dir = source / f"{unit.name}.d"
        if env_dir.is_dir():
            for env_file in sorted(env_dir.iterdir()):
                dest = out_dir / f"{unit.name}.d" / env_file.name
                content = render_unit(env_file.read_text(encoding="utf-8"), values)
                if dest.is_file():
                    content = _keep_provided(content, dest.read_text(encoding="utf-8"))
                atomic_write(dest, content.encode(), mode=0o600)
                text = _point_env_file(text, env_file.name, dest)
        path = out_dir / unit.name
        atomic_write(path, text.encode())
        rendered.append(RenderedUnit(unit.name, path, tuple(unit_commands(text))))
    return rendered
