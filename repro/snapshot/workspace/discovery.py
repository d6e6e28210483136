"""Discovery of what a workspace holds, and the commented repro.toml `repro init` writes."""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from pathlib import Path

from repro import _toml
from repro.bundle import layout
from repro.config import CONFIG_NAME, Config, load_config, parse_config
from repro.errors import UsageError
from repro.snapshot.facts.environment import VENV_DIRS
from repro.snapshot.workspace.unitcapture import discover_units

FILE_DIRS = ("bench", "benchmarks", "results", "reports", "docs", "scripts")
FILE_SUFFIXES = (".md", ".sh", ".py", ".txt", ".json", ".yaml", ".yml")


@dataclass(frozen=True)
class Discovery:
    source: Path
    venv: str | None  # relative to source
    units: tuple[str, ...]
    drafter: str | None
    files: tuple[str, ...]  # globs for [files] include
    patches_dir: str | None
    patch_keys: tuple[str, ...]  # directories under patches/full/


def discover_workspace(source: Path) -> Discovery:
    if not source.is_dir():
        raise UsageError(f"{source} is not a directory")
    venv = next((n for n in VENV_DIRS if (source / n / "pyvenv.cfg").is_file()), None)
    units = tuple(
        p.relative_to(source).as_posix() for p in discover_units(layout.at(source, layout.SERVICES))
    )
    drafter = "drafter" if (source / "drafter" / "config.json").is_file() else None
    files: list[str] = []
    for name in FILE_DIRS:
        if (source / name).is_dir() and any(p.is_file() for p in (source / name).rglob("*")):
            files.append(f"{name}/**/*")
    for path in sorted(source.iterdir()):
        if path.is_file() and path.suffix in FILE_SUFFIXES and path.name != CONFIG_NAME:
            files.append(path.name)
    full = layout.at(source, layout.PATCHES_FULL)
    patch_keys = (
        tuple(sorted(p.name for p in full.iterdir() if p.is_dir())) if full.is_dir() else ()
    )
    return Discovery(
        source=source,
        venv=venv,
        units=units,
        drafter=drafter,
        files=tuple(files),
        patches_dir=layout.PATCHES if full.is_dir() else None,
        patch_keys=patch_keys,
    )


def _toml_list(items: tuple[str, ...]) -> str:
    return "[" + ", ".join(json.dumps(i) for i in items) + "]"


def render_repro_toml(found: Discovery) -> str:
    from repro.ladder.registry import RUNG_NAMES  # here: the ladder package is slow to load

    name = found.source.resolve().name or "bundle"
    out = [
        f"# repro.toml for {found.source.resolve()}, written by `repro init`.",
        "# Review it: every key is optional; docs/config.md describes them all.",
        "",
        "[bundle]",
        f"name = {json.dumps(name)}",
        '# version = "1.0.0"        # default: next after the newest bundle of this name',
        "",
        "[env]",
    ]
    if found.venv:
        out.append(f'venv = "{found.venv}"              # found: {found.venv}/pyvenv.cfg')
    else:
        out.append("# no venv/, .venv/ or env/ here: name the interpreter to pack")
        out.append('# python = "/path/to/venv/bin/python"')
    out += [
        "",
        "[patches]",
        '# packages = ["sglang"]    # check only these distributions (default: all)',
        'ignore = ["*.orig", "*.rej", "*.bak"]',
        '# pristine = "sglang-0.5.0-py3-none-any.whl"   # wheel or tree to diff against',
    ]
    if found.patches_dir:
        out += ["", "[patches.workspace]", f'dir = "{found.patches_dir}"']
        out.append("# each directory under patches/full/ -> the distribution it patches")
        pairs = ", ".join(f"{json.dumps(k)} = {json.dumps(k)}" for k in found.patch_keys)
        out.append(f"map = {{ {pairs} }}")
    out += ["", "[services]"]
    if found.units:
        out.append(f"units = {_toml_list(found.units)}")
    else:
        out.append('# units = ["services/*.service"]')
    out.append('# system = ["sglang.service"]   # units to take from /etc/systemd/system')
    out += ["", "[models]"]
    if found.drafter:
        out.append('drafter = "drafter"           # config files copied, weights referenced')
    else:
        out.append('# drafter = "drafter"')
    out += ["", "[files]"]
    if found.files:
        out.append(f"include = {_toml_list(found.files)}")
    else:
        out.append('# include = ["bench/**/*", "results/*.json"]')
    out += [
        '# exclude = ["results/tmp/**"]',
        "",
        "[launch]",
        '# commands = ["python -m sglang.launch_server --model-path ... --port 30000"]',
        "",
        "[ladder]",
        f"# rungs = {_toml_list(RUNG_NAMES)}   # default: every rung",
        "# timeout = 600",
        "# port = 30000",
        "",
    ]
    return "\n".join(out)


def write_repro_toml(source: Path, *, force: bool = False) -> Path:
    """Write SOURCE/repro.toml from discovery; refuse to overwrite without force."""
    target = source / CONFIG_NAME
    if target.exists() and not force:
        raise UsageError(f"{target} already exists", hint="pass --force to overwrite it")
    text = render_repro_toml(discover_workspace(source))
    try:
        target.write_text(text, encoding="utf-8")
    except OSError as exc:
        raise UsageError(f"cannot write {target}: {exc.strerror or exc}") from exc
    return target


def workspace_config(source: Path) -> Config:
    """SOURCE/repro.toml when there is one; otherwise exactly what `repro init` would
    write for SOURCE (one rule for both: discovery). `path` is None for the defaults."""
    config = load_config(source)
    if config.path is not None:
        return config
    text = render_repro_toml(discover_workspace(source))
    defaults = parse_config(_toml.loads(text), source=source, path=source / CONFIG_NAME)
    return replace(defaults, path=None)
