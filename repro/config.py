"""repro.toml: what a workspace holds and how to pack it (documented in docs/config.md).

Every problem is reported at once, each naming the file and the key: unknown keys, values
of the wrong type, and paths (relative to the workspace) that do not exist.

One module, a little over 400 lines: one section per table of the file, all through the
same problem collector, read top to bottom as the file is.
"""

from __future__ import annotations

import math
import os
import re
import shlex
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from packaging.utils import canonicalize_name

from repro import _toml
from repro.archive.tarformat import uncarried_name
from repro.bundle import layout
from repro.bundle.caches import KIND_NAMES, parse_size
from repro.bundle.info import MAX_TIMEOUT_S
from repro.bundle.kernels import DEFAULT_COMMAND, PLACEHOLDERS
from repro.errors import ConfigError
from repro.servecmd import HUB_ID as _HUB_ID
from repro.treeglob import glob_tree, matched_entries

CONFIG_NAME = "repro.toml"


@dataclass(frozen=True)
class BundleSection:
    name: str | None = None
    version: str | None = None


@dataclass(frozen=True)
class EnvSection:
    venv: Path | None = None
    python: Path | None = None
    import_modules: bool = False  # pack imports torch & co. in the target (default: files)


@dataclass(frozen=True)
class WorkspaceTarget:
    """Files under `<dir>/full/<key>/REST` patch `<prefix>/REST` of distribution `dist`."""

    dist: str
    prefix: str


@dataclass(frozen=True)
class WorkspacePatchesSection:
    dir: Path
    map: Mapping[str, WorkspaceTarget]


@dataclass(frozen=True)
class PatchesSection:
    packages: tuple[str, ...] = ()  # empty: every distribution
    ignore: tuple[str, ...] = ()
    pristine: Path | None = None
    workspace: WorkspacePatchesSection | None = None


@dataclass(frozen=True)
class ServicesSection:
    units: tuple[Path, ...] = ()  # unit files in the workspace (globs expanded)
    system: tuple[str, ...] = ()  # unit names to take from /etc/systemd/system


@dataclass(frozen=True)
class ModelsSection:
    drafter: Path | None = None
    # name -> directory; an absolute one may be absent (recorded as not present)
    others: Mapping[str, Path] = field(default_factory=dict)
    hub: Mapping[str, str] = field(default_factory=dict)  # name -> repository id


@dataclass(frozen=True)
class FilesSection:
    include: tuple[str, ...] = ()  # globs relative to the workspace
    exclude: tuple[str, ...] = ()
    matched: tuple[Path, ...] = ()  # files the globs select, sorted
    # (path, why) of links and special files the globs reached and that are not carried
    refused: tuple[tuple[Path, str], ...] = ()


@dataclass(frozen=True)
class LaunchSection:
    commands: tuple[str, ...] = ()


@dataclass(frozen=True)
class LadderSection:
    rungs: tuple[str, ...] = ()  # names from RUNG_NAMES; empty: the whole ladder
    timeout: float = 600.0
    port: int | None = None
    prompt: str | None = None


@dataclass(frozen=True)
class KernelRecipe:
    """`[kernels.<dist>]`: where a distribution built here has its source, and how the
    target rebuilds it (repro.bundle.kernels' defaults where a key is not given)."""

    source: Path | None = None  # absolute; None: found from the dist's direct_url.json
    arch_env: tuple[str, ...] = ()  # variables besides ARCH_ENV that take the arch list
    env: tuple[tuple[str, str], ...] = ()  # the build's extra environment, sorted
    command: tuple[str, ...] = DEFAULT_COMMAND
    check: tuple[str, ...] = ()  # the kernels rung's command


@dataclass(frozen=True)
class CachesSection:
    """The compile caches pack carries (docs/caches.md)."""

    enable: bool = False  # carry them without --caches
    kinds: tuple[str, ...] = ()  # empty: every kind
    paths: Mapping[str, Path] = field(default_factory=dict)  # kind -> its directory
    max_size: int | None = None  # bytes, all caches together


@dataclass(frozen=True)
class Config:
    source: Path
    path: Path | None  # None when the workspace has no repro.toml
    bundle: BundleSection = BundleSection()
    env: EnvSection = EnvSection()
    patches: PatchesSection = PatchesSection()
    services: ServicesSection = ServicesSection()
    models: ModelsSection = ModelsSection()
    files: FilesSection = FilesSection()
    launch: LaunchSection = LaunchSection()
    ladder: LadderSection = LadderSection()
    kernels: Mapping[str, KernelRecipe] = field(default_factory=dict)  # by canonical name
    caches: CachesSection = CachesSection()


class _Checker:
    """Collects every problem, then raises one ConfigError listing them."""

    def __init__(self, path: Path, source: Path) -> None:
        self.file = path
        self.source = source
        self.problems: list[str] = []

    def problem(self, key: str, message: str) -> None:
        self.problems.append(f"{self.file}: {key}: {message}")

    def table(self, data: Mapping[str, Any], key: str, allowed: set[str] | None) -> dict[str, Any]:
        """The sub-table `key`; `allowed` None accepts any key."""
        value = data.get(key, {})
        if not isinstance(value, dict):
            self.problem(key, f"must be a table, not {_kind(value)}")
            return {}
        for unknown in sorted(set(value) - allowed if allowed is not None else ()):
            self.problem(f"{key}.{unknown}", "unknown key")
        return value

    def string(self, data: Mapping[str, Any], key: str, name: str) -> str | None:
        value = data.get(name)
        if value is None or isinstance(value, str):
            return value
        self.problem(f"{key}.{name}", f"must be a string, not {_kind(value)}")
        return None

    def strings(self, data: Mapping[str, Any], key: str, name: str) -> tuple[str, ...]:
        value = data.get(name, [])
        if isinstance(value, list) and all(isinstance(v, str) for v in value):
            return tuple(value)
        self.problem(f"{key}.{name}", f"must be a list of strings, not {_kind(value)}")
        return ()

    def boolean(self, data: Mapping[str, Any], key: str, name: str) -> bool:
        value = data.get(name, False)
        if isinstance(value, bool):
            return value
        self.problem(f"{key}.{name}", f"must be true or false, not {_kind(value)}")
        return False

    def number(
        self,
        data: Mapping[str, Any],
        key: str,
        name: str,
        default: float,
        maximum: float = float("inf"),
    ) -> float:
        value = data.get(name, default)
        if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
            self.problem(f"{key}.{name}", f"must be a positive number, not {value!r}")
            return default
        if not math.isfinite(value) or value > maximum:
            self.problem(f"{key}.{name}", f"must be finite and at most {maximum:g}, not {value!r}")
            return default
        return float(value)

    def integer(self, data: Mapping[str, Any], key: str, name: str) -> int | None:
        value = data.get(name)
        if value is None or (isinstance(value, int) and not isinstance(value, bool)):
            return value
        self.problem(f"{key}.{name}", f"must be an integer, not {_kind(value)}")
        return None

    def path(self, value: str | None, key: str, *, directory: bool | None = None) -> Path | None:
        if value is None:
            return None
        path = Path(value).expanduser()
        resolved = path if path.is_absolute() else self.source / path
        if not resolved.exists():
            self.problem(key, f"path {value!r} does not exist (looked for {resolved})")
            return None
        if directory is True and not resolved.is_dir():
            self.problem(key, f"{value!r} is not a directory")
        if directory is False and resolved.is_dir():
            self.problem(key, f"{value!r} is a directory, expected a file")
        return resolved

    def globs(
        self,
        patterns: tuple[str, ...],
        key: str,
        refused: dict[Path, str] | None = None,
    ) -> list[Path]:
        """Regular files the patterns match; no linked directory is entered. With
        `refused`, a linked file is taken only where it resolves to a regular file inside
        the workspace, and every link or special file not taken is put in `refused` with
        the reason; without it, linked files are taken wherever they point (units)."""
        found: list[Path] = []
        root = self.source.resolve()
        for pattern in patterns:
            result = glob_tree(self.source, pattern, source=str(self.source / CONFIG_NAME))
            matches = list(result.files)
            if refused is not None:
                for path in [*matches]:
                    why = uncarried_name(path.relative_to(self.source).as_posix())
                    if why is not None:
                        refused[path] = why
                        matches.remove(path)
            for link in result.links:
                why = link_refusal(link, root)
                if why is None or (refused is None and link.is_file()):
                    matches.append(link)
                elif refused is not None:
                    refused[link] = why
            if refused is not None:
                refused.update({other: "not a regular file: not read" for other in result.others})
            reached = (*result.links, *result.others)
            if not matches and not (refused is not None and any(p in refused for p in reached)):
                self.problem(key, f"{pattern!r} matches no file under {self.source}")
            found.extend(sorted(matches))
        return found


def link_refusal(link: Path, root: Path, *, where: str = "the workspace") -> str | None:
    """Why the symbolic link is not carried, or None: it is carried, as the file it names,
    only when it resolves to a regular file inside ROOT (the resolved workspace, or
    `where`: a kernel source tree)."""
    target = os.readlink(link)
    try:
        resolved = link.resolve()
    except (OSError, RuntimeError):  # a loop of links (RuntimeError before 3.13)
        return f"a symbolic link to {target} that never resolves (a loop): not followed"
    if not resolved.is_relative_to(root):
        return f"a symbolic link to {target}, outside {where}: not followed"
    if resolved.is_dir():
        return f"a symbolic link to the directory {target}: not entered"
    if not resolved.is_file():
        return f"a symbolic link to {target}, not a regular file: not carried"
    return None


def _kind(value: object) -> str:
    return {
        str: "a string",
        int: "an integer",
        float: "a number",
        bool: "a boolean",
        list: "a list",
        dict: "a table",
    }.get(type(value), type(value).__name__)


SECTIONS: dict[str, set[str] | None] = {
    "bundle": {"name", "version"},
    "env": {"python", "venv", "import_modules"},
    "patches": {"packages", "ignore", "pristine", "workspace"},
    "services": {"units", "system"},
    "models": None,  # any key: a model name
    "files": {"include", "exclude"},
    "launch": {"commands"},
    "ladder": {"rungs", "timeout", "port", "prompt"},
    "kernels": None,  # any key: a distribution name
    "caches": {"enable", "kinds", "paths", "max_size"},
}


def load_config(source: Path) -> Config:
    """SOURCE/repro.toml, or the defaults when there is none."""
    path = source / CONFIG_NAME
    if not path.is_file():
        return Config(source=source, path=None)
    try:
        data = _toml.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"cannot read {path}: {exc}") from exc
    except _toml.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: not valid TOML: {exc}") from exc
    return parse_config(data, source=source, path=path)


def parse_config(data: Mapping[str, Any], *, source: Path, path: Path) -> Config:
    check = _Checker(path, source)
    for unknown in sorted(set(data) - set(SECTIONS)):
        check.problem(unknown, "unknown section")
    sections: dict[str, Callable[[_Checker, dict[str, Any]], Any]] = {
        "bundle": _bundle,
        "env": _env,
        "patches": _patches,
        "services": _services,
        "models": _models,
        "files": _files,
        "launch": _launch,
        "ladder": _ladder,
        "kernels": _kernels,
        "caches": _caches,
    }
    parsed: dict[str, Any] = {}
    for name, parse in sections.items():
        table = check.table(data, name, SECTIONS[name])
        parsed[name] = parse(check, table)
    if check.problems:
        raise ConfigError(
            f"{path}: {len(check.problems)} problem(s):\n  " + "\n  ".join(check.problems),
            hint="see docs/config.md for the keys repro.toml accepts",
        )
    return Config(source=source, path=path, **parsed)


def _bundle(check: _Checker, table: dict[str, Any]) -> BundleSection:
    return BundleSection(
        name=check.string(table, "bundle", "name"), version=check.string(table, "bundle", "version")
    )


def _env(check: _Checker, table: dict[str, Any]) -> EnvSection:
    venv = check.path(check.string(table, "env", "venv"), "env.venv", directory=True)
    python = check.path(check.string(table, "env", "python"), "env.python", directory=False)
    if "venv" in table and "python" in table:
        check.problem("env", "give venv or python, not both")
    import_modules = check.boolean(table, "env", "import_modules")
    return EnvSection(venv=venv, python=python, import_modules=import_modules)


def _patches(check: _Checker, table: dict[str, Any]) -> PatchesSection:
    pristine = check.path(check.string(table, "patches", "pristine"), "patches.pristine")
    workspace = None
    if "workspace" in table:
        ws = check.table(table, "workspace", {"dir", "map"})
        ws_key = "patches.workspace"
        directory = check.path(check.string(ws, ws_key, "dir") or layout.PATCHES, f"{ws_key}.dir")
        mapping: dict[str, WorkspaceTarget] = {}
        raw_map = ws.get("map", {})
        if not isinstance(raw_map, dict):
            check.problem(f"{ws_key}.map", f"must be a table, not {_kind(raw_map)}")
            raw_map = {}
        for key, value in raw_map.items():
            if isinstance(value, str):
                mapping[key] = WorkspaceTarget(dist=value, prefix=key)
            elif isinstance(value, dict) and isinstance(value.get("dist"), str):
                prefix = value.get("prefix", key)
                extra = sorted(set(value) - {"dist", "prefix"})
                if not isinstance(prefix, str) or extra:
                    check.problem(f"{ws_key}.map.{key}", "takes dist and prefix (strings)")
                    continue
                mapping[key] = WorkspaceTarget(dist=value["dist"], prefix=prefix.strip("/"))
            else:
                check.problem(
                    f"{ws_key}.map.{key}",
                    'must be a distribution name or { dist = "...", prefix = "..." }',
                )
        if directory is not None:
            workspace = WorkspacePatchesSection(dir=directory, map=mapping)
    return PatchesSection(
        packages=check.strings(table, "patches", "packages"),
        ignore=check.strings(table, "patches", "ignore"),
        pristine=pristine,
        workspace=workspace,
    )


def _services(check: _Checker, table: dict[str, Any]) -> ServicesSection:
    units = check.globs(check.strings(table, "services", "units"), "services.units")
    return ServicesSection(units=tuple(units), system=check.strings(table, "services", "system"))


def _models(check: _Checker, table: dict[str, Any]) -> ModelsSection:
    drafter = None
    others: dict[str, Path] = {}
    hub: dict[str, str] = {}
    for name, value in table.items():
        if not isinstance(value, str):
            check.problem(f"models.{name}", f"must be a path string, not {_kind(value)}")
            continue
        if name != "drafter" and _HUB_ID.fullmatch(value) and not (check.source / value).exists():
            hub[name] = value  # a repository id: referenced, present at pack time or not
            continue
        if name != "drafter" and value.startswith("/") and not Path(value).exists():
            others[name] = Path(value)  # absent here: recorded as not present when packed
            continue
        path = check.path(value, f"models.{name}", directory=True)
        if path is None:
            continue
        if name == "drafter":
            drafter = path
        else:
            others[name] = path
    return ModelsSection(drafter=drafter, others=others, hub=hub)


def _files(check: _Checker, table: dict[str, Any]) -> FilesSection:
    include = check.strings(table, "files", "include")
    exclude = check.strings(table, "files", "exclude")
    escaping = [p for p in include if p.startswith("/") or ".." in Path(p).parts]
    for pattern in escaping:
        check.problem("files.include", f"{pattern!r} leaves the workspace (absolute or '..')")
    include = tuple(p for p in include if p not in escaping)
    refused: dict[Path, str] = {}
    matched = set(check.globs(include, "files.include", refused))
    for pattern in exclude:
        gone = matched_entries(check.source, pattern, source=str(check.source / CONFIG_NAME))
        matched -= gone
        refused = {path: why for path, why in refused.items() if path not in gone}
    return FilesSection(
        include=include,
        exclude=exclude,
        matched=tuple(sorted(matched)),
        refused=tuple(sorted(refused.items())),
    )


def _launch(check: _Checker, table: dict[str, Any]) -> LaunchSection:
    return LaunchSection(commands=check.strings(table, "launch", "commands"))


def _ladder(check: _Checker, table: dict[str, Any]) -> LadderSection:
    rungs = check.strings(table, "ladder", "rungs")
    if rungs:
        # here: the ladder package is slow to load
        from repro.ladder.registry import RUNG_NAMES, unknown_rungs

        unknown = unknown_rungs(rungs)
        if unknown:
            check.problem(
                "ladder.rungs",
                f"unknown rung(s) {', '.join(map(repr, unknown))}; "
                f"the rungs are {', '.join(RUNG_NAMES)}",
            )
            rungs = ()
    return LadderSection(
        rungs=rungs,
        timeout=check.number(table, "ladder", "timeout", 600.0, MAX_TIMEOUT_S),
        port=check.integer(table, "ladder", "port"),
        prompt=check.string(table, "ladder", "prompt"),
    )


def _caches(check: _Checker, table: dict[str, Any]) -> CachesSection:
    kinds = check.strings(table, "caches", "kinds")
    for kind in kinds:
        if kind not in KIND_NAMES:
            check.problem(
                "caches.kinds", f"{kind!r} is no cache kind; they are {', '.join(KIND_NAMES)}"
            )
    paths: dict[str, Path] = {}
    given = table.get("paths", {})
    if not isinstance(given, dict):
        check.problem("caches.paths", f"must be a table, not {_kind(given)}")
        given = {}
    for kind, value in given.items():
        if kind not in KIND_NAMES:
            check.problem(
                f"caches.paths.{kind}", f"is no cache kind; they are {', '.join(KIND_NAMES)}"
            )
        elif not isinstance(value, str):
            check.problem(f"caches.paths.{kind}", f"must be a string, not {_kind(value)}")
        else:
            path = check.path(value, f"caches.paths.{kind}", directory=True)
            if path is not None:
                paths[kind] = path.resolve()
    return CachesSection(
        enable=check.boolean(table, "caches", "enable"),
        kinds=tuple(dict.fromkeys(kinds)),
        paths=paths,
        max_size=_size(check, table.get("max_size"), "caches.max_size"),
    )


def _size(check: _Checker, value: object, key: str) -> int | None:
    """A size: bytes as an integer, or a string such as "2GiB" or "500M"."""
    if value is None:
        return None
    size = parse_size(value) if isinstance(value, str) else None
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        size = value
    if size is None:
        check.problem(key, f'must be a size (bytes, or "500M", "2GiB"), not {value!r}')
    return size


KERNEL_KEYS = frozenset({"source", "arch_env", "env", "command", "check", "test"})
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_PLACEHOLDER = re.compile(r"\{[^{}]*\}")


def _kernels(check: _Checker, table: dict[str, Any]) -> dict[str, KernelRecipe]:
    recipes: dict[str, KernelRecipe] = {}
    for name, value in table.items():
        key = f"kernels.{name}"
        if not isinstance(value, dict):
            check.problem(key, f"must be a table, not {_kind(value)}")
            continue
        canonical = canonicalize_name(name)
        if canonical in recipes:
            check.problem(key, f"names the distribution {canonical!r} a second time")
            continue
        for unknown in sorted(set(value) - KERNEL_KEYS):
            check.problem(f"{key}.{unknown}", "unknown key")
        source = check.path(check.string(value, key, "source"), f"{key}.source", directory=True)
        arch_env = check.strings(value, key, "arch_env")
        for variable in arch_env:
            if not _ENV_NAME.fullmatch(variable):
                check.problem(f"{key}.arch_env", f"{variable!r} is not a variable name")
        env = _kernel_env(check, value, key)
        command = check.strings(value, key, "command") if "command" in value else DEFAULT_COMMAND
        if not command:
            check.problem(f"{key}.command", "must hold at least the program to run")
        _placeholders(check, f"{key}.command", command, PLACEHOLDERS)
        kernel_check = _kernel_check(check, value, key)
        recipes[canonical] = KernelRecipe(
            source=source.resolve() if source is not None else None,
            arch_env=tuple(dict.fromkeys(arch_env)),
            env=env,
            command=command or DEFAULT_COMMAND,
            check=kernel_check,
        )
    return recipes


def _kernel_check(check: _Checker, value: Mapping[str, Any], key: str) -> tuple[str, ...]:
    """The kernels rung's argv: `check` (a list) or `test` (one command line, split as a
    shell would, `python` as its first word meaning the target's interpreter)."""
    if "check" in value and "test" in value:
        check.problem(key, "give check or test, not both")
        return ()
    if "test" not in value:
        argv = check.strings(value, key, "check")
        _placeholders(check, f"{key}.check", argv, ("{python}",))
        return argv
    line = value["test"]
    if not isinstance(line, str):
        check.problem(f"{key}.test", f"must be a string, not {_kind(line)}")
        return ()
    try:
        words = tuple(shlex.split(line))
    except ValueError as e:
        check.problem(f"{key}.test", f"cannot be split into words: {e}")
        return ()
    if not words:
        check.problem(f"{key}.test", "must hold at least the program to run")
        return ()
    if words[0] in {"python", "python3"}:
        words = ("{python}", *words[1:])
    _placeholders(check, f"{key}.test", words, ("{python}",))
    return words


def _kernel_env(check: _Checker, value: Mapping[str, Any], key: str) -> tuple[tuple[str, str], ...]:
    env = value.get("env", {})
    if not isinstance(env, dict):
        check.problem(f"{key}.env", f"must be a table, not {_kind(env)}")
        return ()
    out = []
    for variable, setting in env.items():
        if not _ENV_NAME.fullmatch(variable):
            check.problem(f"{key}.env", f"{variable!r} is not a variable name")
        elif not isinstance(setting, str):
            check.problem(f"{key}.env.{variable}", f"must be a string, not {_kind(setting)}")
        else:
            out.append((variable, setting))
    return tuple(sorted(out))


def _placeholders(
    check: _Checker, key: str, argv: tuple[str, ...], allowed: tuple[str, ...]
) -> None:
    for word in argv:
        for found in _PLACEHOLDER.findall(word):
            if found not in allowed:
                check.problem(
                    key, f"{found} in {word!r} is no placeholder; they are {', '.join(allowed)}"
                )
