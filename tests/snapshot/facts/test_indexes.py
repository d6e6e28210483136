from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from repro.errors import ConfigError
from repro.snapshot.facts.indexes import read_index_config, strip_credentials

ISOLATED = {"XDG_CONFIG_DIRS": "/nonexistent-xdg"}


def _home(tmp_path: Path) -> Path:
    home = tmp_path / "home"
    home.mkdir()
    return home


@pytest.mark.parametrize(
    ("url", "stripped"),
    [
        ("https://user:pass@host/simple", "https://host/simple"),
        ("https://token@host/simple", "https://host/simple"),
        ("https://host/simple", "https://host/simple"),
        ("https://host/a@b", "https://host/a@b"),
    ],
)
def test_strip_credentials(url: str, stripped: str) -> None:
    assert strip_credentials(url) == stripped


def test_pip_config_files_in_pip_order(tmp_path: Path) -> None:
    home = _home(tmp_path)
    prefix = tmp_path / "venv"
    prefix.mkdir()
    (home / ".config" / "pip").mkdir(parents=True)
    (home / ".config" / "pip" / "pip.conf").write_text(
        "[global]\nindex-url = https://user:secret@user.example/simple\n"
        "extra-index-url = https://extra.example/simple\n  file:///opt/local/simple\n"
    )
    # the venv's own pip.conf overrides the user file; [install] beats [global]
    (prefix / "pip.conf").write_text(
        "[global]\nindex-url = https://site.example/simple\n"
        "[install]\nfind-links = https://links.example/wheels /opt/wheels\n"
    )
    config = read_index_config(prefix, environ={**ISOLATED, "HOME": str(home)}, home=home)
    assert config.index_url == "https://site.example/simple"
    assert config.extra_index_urls == ("https://extra.example/simple",)
    assert config.find_links == ("https://links.example/wheels",)
    assert config.local == ("file:///opt/local/simple", "/opt/wheels")
    assert config.origins["https://site.example/simple"] == str(prefix / "pip.conf")


def test_environment_variables_override_files(tmp_path: Path) -> None:
    home = _home(tmp_path)
    conf = tmp_path / "custom.conf"
    conf.write_text("[global]\nindex-url = https://file.example/simple\n")
    environ = {
        **ISOLATED,
        "PIP_CONFIG_FILE": str(conf),
        "PIP_EXTRA_INDEX_URL": "https://a.example/simple https://u:p@b.example/simple",
        "UV_INDEX": "torch=https://download.pytorch.org/whl/cu130",
        "UV_FIND_LINKS": "https://wheels.example/,/srv/wheels",
    }
    config = read_index_config(tmp_path, environ=environ, home=home)
    assert config.index_url == "https://file.example/simple"
    assert config.extra_index_urls == (
        "https://a.example/simple",
        "https://b.example/simple",
        "https://download.pytorch.org/whl/cu130",
    )
    assert config.find_links == ("https://wheels.example/",)
    assert config.local == ("/srv/wheels",)
    devnull = read_index_config(
        tmp_path, environ={**environ, "PIP_CONFIG_FILE": os.devnull}, home=home
    )
    assert devnull.index_url is None


def test_uv_project_config(tmp_path: Path) -> None:
    home = _home(tmp_path)
    source = tmp_path / "work"
    source.mkdir()
    (source / "pyproject.toml").write_text(
        '[tool.uv]\nextra-index-url = ["https://x.example/simple"]\n'
        '[[tool.uv.index]]\nname = "torch"\nurl = "https://download.pytorch.org/whl/cu128"\n'
        '[[tool.uv.index]]\nurl = "https://mirror.example/simple"\ndefault = true\n'
    )
    config = read_index_config(tmp_path, source=source, environ=ISOLATED, home=home)
    assert config.index_url == "https://mirror.example/simple"
    assert config.extra_index_urls == (
        "https://x.example/simple",
        "https://download.pytorch.org/whl/cu128",
    )
    (source / "uv.toml").write_text('index-url = "https://uvtoml.example/simple"\n')
    config = read_index_config(tmp_path, source=source, environ=ISOLATED, home=home)
    assert config.index_url == "https://uvtoml.example/simple"


def test_unparseable_configs_name_the_file(tmp_path: Path) -> None:
    home = _home(tmp_path)
    (tmp_path / "pip.conf").write_text("index-url = no section header\n")
    with pytest.raises(ConfigError, match=re.escape(str(tmp_path / "pip.conf"))):
        read_index_config(tmp_path, environ=ISOLATED, home=home)
    (tmp_path / "pip.conf").unlink()
    (tmp_path / "uv.toml").write_text("index-url = [\n")
    with pytest.raises(ConfigError, match=r"uv\.toml"):
        read_index_config(tmp_path, source=tmp_path, environ=ISOLATED, home=home)
