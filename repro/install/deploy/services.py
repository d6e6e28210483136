"""Render a bundle's systemd units with the target's paths (repro.install.deploy.unitinstall
installs them, only if asked).

A unit's environment files (its drop-in of credentials, repro.units.dropin, and the files its
EnvironmentFile= named on the source) are written with mode 0600. A value the operator
has set in one of them on an earlier run is kept when it is rendered again.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from repro.bundle import layout
from repro.errors import InstallError
from repro.install.deploy.caches import ENV_FILE_TEMPLATE
from repro.install.transaction.atomic import write_if_changed
from repro.units.command import unit_commands
from repro.units.dropin import required_names, unset_names
from repro.units.names import validate_unit_name
from repro.units.render import render_env_text, render_unit_text
from repro.units.text import physical_lines, unit_assignments, unit_lines


@dataclass(frozen=True)
class RenderedUnit:
    name: str
    path: Path
    # (key, command line) of every command the unit makes systemd run: ExecStartPre=,
    # ExecStart=, ExecStartPost=, ExecReload=, ExecStop=... (repro.units.command.EXEC_KEYS)
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
    # lines end at "\n" only, as systemd's env-file parser reads them (str.splitlines()
    # would also end one at a form feed or U+2028)
    for line in existing.split("\n"):
        match = _SETTING.match(line.strip(" \t\r"))
        if match is not None and match.group("name") in names - unset:
            values[match.group("name")] = match.group("value")
    out = []
    for line in rendered.split("\n"):
        match = _SETTING.match(line.strip(" \t\r"))
        if match is not None and match.group("name") in values and not match.group("value"):
            line = f"{match.group('name')}={values[match.group('name')]}"
        out.append(line)
    return "\n".join(out)


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


def _point_env_file(text: str, name: str, dest: Path, *, source: str) -> str:
    """EnvironmentFile= settings naming a file called `name` now name `dest` (its "-"
    kept; "%" written "%%", as systemd resolves specifiers in the path)."""
    out: list[str] = []
    for line in unit_lines(text, source=source):
        path = line.value.removeprefix("-")
        if (
            line.kind == "assignment"
            and line.key == "EnvironmentFile"
            and (path.endswith("/" + name))
        ):
            optional = "-" if line.value.startswith("-") else ""
            out.append(f"EnvironmentFile={optional}{str(dest).replace('%', '%%')}\n")
        else:
            out.extend(line.raw)
    return "".join(out)


def with_cache_environment(text: str, *, source: str) -> str:
    """`text` (a unit's template) with `EnvironmentFile=` of the restored compile caches'
    variables (TARGET/cache/caches.env) as the last line of its [Service]: systemd reads
    environment files after Environment= and in order, so the restored caches win over
    whatever the unit set for the same variables on the source."""
    lines = unit_lines(text, source=source)
    last = max(
        (i for i, line in enumerate(lines) if line.section == "Service" and line.kind != "blank"),
        default=None,
    )
    if last is None:
        return text
    out: list[str] = []
    for index, line in enumerate(lines):
        out.extend(line.raw)
        if index == last:
            if out and not out[-1].endswith("\n"):
                out[-1] += "\n"
            out.append(f"EnvironmentFile={ENV_FILE_TEMPLATE}\n")
    return "".join(out)


_ALIAS_KEYS = ("Alias", "DefaultInstance")  # [Install]: names the unit is enabled as


def check_units(bundle: Path, *, where: str) -> list[str]:
    """The bundle's unit names, each checked: a plain systemd name, text systemd reads
    as repro does (repro.units.text; its environment files too), and no Alias= or
    DefaultInstance= that would install it under another name."""
    source = layout.at(bundle, layout.SERVICES)
    if not source.is_dir():
        return []
    names: list[str] = []
    for unit in sorted(p for p in source.iterdir() if p.is_file()):
        member = f"{where}: {layout.unit(unit.name)}"
        validate_unit_name(unit.name, source=member)
        text = _read(unit, member)
        for line in unit_assignments(text, source=member):
            if line.key in _ALIAS_KEYS:
                raise InstallError(
                    f"{member}:{line.number} would also be installed as "
                    f"{line.value!r} ({line.key}=)",
                    hint="a bundle's units are installed under their own names only; "
                    "remove the line and pack again",
                )
        env_dir = source / f"{unit.name}.d"
        for env_file in sorted(env_dir.iterdir()) if env_dir.is_dir() else ():
            env_member = f"{where}: {layout.unit(f'{unit.name}.d/{env_file.name}')}"
            physical_lines(_read(env_file, env_member), source=env_member)
        names.append(unit.name)
    return names


def _read(path: Path, member: str) -> str:
    try:
        # bytes, decoded: text mode would turn a lone "\r" into a line end unseen
        return path.read_bytes().decode("utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise InstallError(f"{member}: cannot read: {exc}") from exc


@dataclass(frozen=True)
class _UnitText:
    """One unit rendered in memory: its text, and each environment file's."""

    name: str
    path: Path
    text: str
    env_files: tuple[tuple[Path, str], ...]  # (where it goes, rendered text)


def _render_texts(
    bundle: Path,
    target: Path,
    *,
    venv: Path,
    home: Path,
    models: Path | None,
    placed: Mapping[str, str] | None = None,
    caches: bool = False,
) -> list[_UnitText]:
    """Every unit and environment file with the target's paths, escaped and read back
    (repro.units.render); reads only, so a path systemd would read otherwise is refused
    before anything is written. `placed`: each found model's unit text and the place
    where it was found (repro.install.deploy.models.model_placements), which the unit
    names instead. `caches`: each unit reads the restored caches' variables last
    (`with_cache_environment`)."""
    source = layout.at(bundle, layout.SERVICES)
    if not source.is_dir():
        return []
    out_dir = layout.at(target, layout.SERVICES)
    values = {"REPRO_VENV": str(venv), "REPRO_HOME": str(home)}
    if models is not None:
        values["REPRO_MODELS"] = str(models)
    values.update(placed or {})
    texts: list[_UnitText] = []
    for unit in sorted(p for p in source.iterdir() if p.is_file()):
        member = layout.unit(unit.name)
        validate_unit_name(unit.name, source=member)
        template = _read(unit, member)
        if caches:
            template = with_cache_environment(template, source=member)
        text = render_unit_text(template, values, source=member)
        env_dir = source / f"{unit.name}.d"
        env_files: list[tuple[Path, str]] = []
        for env_file in sorted(env_dir.iterdir()) if env_dir.is_dir() else ():
            dest = out_dir / f"{unit.name}.d" / env_file.name
            env_member = layout.unit(f"{unit.name}.d/{env_file.name}")
            content = render_env_text(_read(env_file, env_member), values, source=env_member)
            env_files.append((dest, content))
            text = _point_env_file(text, env_file.name, dest, source=member)
        texts.append(_UnitText(unit.name, out_dir / unit.name, text, tuple(env_files)))
    return texts


def check_rendering(
    bundle: Path,
    target: Path,
    *,
    venv: Path,
    home: Path,
    models: Path | None,
    placed: Mapping[str, str] | None = None,
    caches: bool = False,
) -> None:
    """Refuse (exit 2), before anything is written, a target whose paths cannot be
    written into the bundle's units as systemd would read them back."""
    _render_texts(bundle, target, venv=venv, home=home, models=models, placed=placed, caches=caches)


def render_units(
    bundle: Path,
    target: Path,
    *,
    venv: Path,
    home: Path,
    models: Path | None,
    placed: Mapping[str, str] | None = None,
    caches: bool = False,
) -> list[RenderedUnit]:
    """The bundle's units and their environment files written under TARGET/services
    with the target's paths (each found model at the place where it was found); a
    value the operator set in an environment file is kept; `caches`: the units read
    the restored compile caches' variables. A file that already holds what it would be
    written with is left untouched (a rerun, an upgrade in place)."""
    rendered: list[RenderedUnit] = []
    texts = _render_texts(
        bundle, target, venv=venv, home=home, models=models, placed=placed, caches=caches
    )
    for unit in texts:
        for dest, content in unit.env_files:
            if dest.is_file():
                content = _keep_provided(content, dest.read_text(encoding="utf-8"))
            write_if_changed(dest, content.encode(), mode=0o600)
        write_if_changed(unit.path, unit.text.encode())
        commands = unit_commands(unit.text, source=layout.unit(unit.name))
        rendered.append(RenderedUnit(unit.name, unit.path, tuple(commands)))
    return rendered
