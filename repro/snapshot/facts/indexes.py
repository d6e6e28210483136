"""Which package indexes an environment was installed from, read from pip and uv config.

pip: config files in pip's order (global, user, site = the venv's pip.conf, PIP_CONFIG_FILE;
later files win, `[install]` over `[global]`), then PIP_INDEX_URL / PIP_EXTRA_INDEX_URL /
PIP_FIND_LINKS. uv: uv.toml (system, user, project) or `[tool.uv]` in the project's
pyproject.toml, then UV_INDEX_URL / UV_DEFAULT_INDEX / UV_EXTRA_INDEX_URL / UV_INDEX /
UV_FIND_LINKS. Credentials in URLs are stripped; file:// URLs and local paths are kept apart
as `local`, since they do not exist on another machine.
"""

from __future__ import annotations

import configparser
import os
import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from repro import _toml
from repro.bundle.lock import IndexConfig
from repro.errors import ConfigError

_CREDENTIALS = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*://)[^/@]*@")


def strip_credentials(url: str) -> str:
    """`https://user:pass@host/simple` -> `https://host/simple`."""
    return _CREDENTIALS.sub(r"\1", url.strip())


def is_local(url: str) -> bool:
    return url.startswith("file:") or "://" not in url


def _split(value: str) -> list[str]:
    return [part for part in re.split(r"\s+", value.strip()) if part]


def pip_config_files(prefix: Path, environ: Mapping[str, str], home: Path) -> list[Path]:
    """pip's config files for an interpreter whose sys.prefix is `prefix`, lowest priority
    first. PIP_CONFIG_FILE=os.devnull disables them all (as in pip)."""
    env_file = environ.get("PIP_CONFIG_FILE")
    if env_file == os.devnull:
        return []
    xdg_dirs = environ.get("XDG_CONFIG_DIRS") or "/etc/xdg"
    files = [Path(d) / "pip" / "pip.conf" for d in xdg_dirs.split(":") if d]
    files.append(Path("/etc/pip.conf"))
    files.append(home / ".pip" / "pip.conf")
    xdg_home = Path(environ.get("XDG_CONFIG_HOME") or home / ".config")
    files.append(xdg_home / "pip" / "pip.conf")
    files.append(prefix / "pip.conf")
    if env_file:
        files.append(Path(env_file))
    return files


def read_pip_settings(files: Iterable[Path]) -> dict[str, tuple[str, str]]:
    """key -> (value, file) for index-url, extra-index-url, find-links."""
    settings: dict[str, tuple[str, str]] = {}
    for path in files:
        if not path.is_file():
            continue
        parser = configparser.RawConfigParser()
        try:
            parser.read(path, encoding="utf-8")
        except (configparser.Error, UnicodeDecodeError) as exc:
            raise ConfigError(f"{path}: cannot parse pip config: {exc}") from exc
        for section in ("global", "install"):
            if not parser.has_section(section):
                continue
            for key in ("index-url", "extra-index-url", "find-links", "no-index"):
                for spelling in (key, key.replace("-", "_")):
                    if parser.has_option(section, spelling):
                        settings[key] = (parser.get(section, spelling), str(path))
    return settings


def uv_config_files(source: Path | None, environ: Mapping[str, str], home: Path) -> list[Path]:
    xdg_dirs = environ.get("XDG_CONFIG_DIRS") or "/etc/xdg"
    files = [Path(d) / "uv" / "uv.toml" for d in xdg_dirs.split(":") if d]
    files.append(Path("/etc/uv/uv.toml"))
    xdg_home = Path(environ.get("XDG_CONFIG_HOME") or home / ".config")
    files.append(xdg_home / "uv" / "uv.toml")
    if source is not None:
        if (source / "uv.toml").is_file():
            files.append(source / "uv.toml")
        else:
            files.append(source / "pyproject.toml")
    return files


def _uv_table(path: Path) -> dict[str, Any]:
    try:
        data = _toml.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, _toml.TOMLDecodeError) as exc:
        raise ConfigError(f"{path}: cannot parse: {exc}") from exc
    if path.name == "pyproject.toml":
        tool = data.get("tool", {})
        table = tool.get("uv", {}) if isinstance(tool, dict) else {}
        return table if isinstance(table, dict) else {}
    return data


def read_uv_settings(files: Iterable[Path]) -> tuple[str | None, list[tuple[str, str]]]:
    """(default index, [(extra url, file)]) plus find-links folded in as extras' kind."""
    default: str | None = None
    extras: list[tuple[str, str]] = []
    for path in files:
        if not path.is_file():
            continue
        table = _uv_table(path)
        for scope in (table, table.get("pip") if isinstance(table.get("pip"), dict) else {}):
            assert isinstance(scope, dict)
            if isinstance(scope.get("index-url"), str):
                default = scope["index-url"]
            for url in scope.get("extra-index-url") or ():
                extras.append((str(url), f"{path} extra-index-url"))
            for url in scope.get("find-links") or ():
                extras.append((str(url), f"{path} find-links"))
            for index in scope.get("index") or ():
                if isinstance(index, dict) and isinstance(index.get("url"), str):
                    if index.get("default"):
                        default = index["url"]
                    else:
                        extras.append((index["url"], f"{path} [[index]]"))
    return default, extras


def read_index_config(
    prefix: Path,
    *,
    source: Path | None = None,
    environ: Mapping[str, str] | None = None,
    home: Path | None = None,
) -> IndexConfig:
    """The indexes the environment at `prefix` (its sys.prefix) installs from."""
    env = os.environ if environ is None else environ
    home_dir = home if home is not None else Path(env.get("HOME") or Path.home())
    origins: dict[str, str] = {}
    index_url: str | None = None
    extras: list[str] = []
    links: list[str] = []

    def add(target: list[str], raw: str, origin: str) -> None:
        url = strip_credentials(raw)
        if url and url not in origins:
            origins[url] = origin
            target.append(url)

    pip = read_pip_settings(pip_config_files(prefix, env, home_dir))
    for key, name in (
        ("index-url", "PIP_INDEX_URL"),
        ("extra-index-url", "PIP_EXTRA_INDEX_URL"),
        ("find-links", "PIP_FIND_LINKS"),
    ):
        if env.get(name):
            pip[key] = (env[name], f"${name}")
    if "index-url" in pip:
        value, origin = pip["index-url"]
        index_url = strip_credentials(value)
        origins[index_url] = origin
    for value in _split(pip.get("extra-index-url", ("", ""))[0]):
        add(extras, value, pip["extra-index-url"][1])
    for value in _split(pip.get("find-links", ("", ""))[0]):
        add(links, value, pip["find-links"][1])

    uv_default, uv_extras = read_uv_settings(uv_config_files(source, env, home_dir))
    for name in ("UV_INDEX_URL", "UV_DEFAULT_INDEX"):
        if env.get(name):
            uv_default = env[name]
    for value in _split(env.get("UV_EXTRA_INDEX_URL", "")):
        uv_extras.append((value, "$UV_EXTRA_INDEX_URL"))
    for value in _split(env.get("UV_INDEX", "")):
        # UV_INDEX entries may be `name=url`
        url = value.split("=", 1)[1] if "=" in value.split("://", 1)[0] else value
        uv_extras.append((url, "$UV_INDEX"))
    for value in env.get("UV_FIND_LINKS", "").split(","):
        if value.strip():
            uv_extras.append((value.strip(), "$UV_FIND_LINKS find-links"))
    if index_url is None and uv_default:
        index_url = strip_credentials(uv_default)
        origins[index_url] = "uv default index"
    for url, origin in uv_extras:
        add(links if "find-links" in origin else extras, url, origin)

    local = tuple(u for u in [index_url or "", *extras, *links] if u and is_local(u))
    return IndexConfig(
        index_url=index_url if index_url and not is_local(index_url) else None,
        extra_index_urls=tuple(u for u in extras if not is_local(u)),
        find_links=tuple(u for u in links if not is_local(u)),
        local=local,
        origins=origins,
    )
