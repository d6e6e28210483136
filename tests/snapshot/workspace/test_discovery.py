"""Tests of repro.snapshot.workspace.discovery: what a workspace holds, and repro init's toml."""

from __future__ import annotations

from pathlib import Path

import pytest

from repro import _toml
from repro.errors import UsageError
from repro.snapshot.workspace.discovery import (
    Discovery,
    discover_workspace,
    render_repro_toml,
    workspace_config,
    write_repro_toml,
)


def _workspace(root: Path) -> Path:
    files = {
        ".venv/pyvenv.cfg": "home = /usr/bin\n",
        "services/sglang.service": "[Service]\nExecStart=/bin/true\n",
        "services/README.txt": "not a unit\n",
        "drafter/config.json": "{}",
        "bench/run.sh": "echo\n",
        "results/a/b.json": "{}",
        "patches/full/sglang/srt/server.py": "# patched\n",
        "patches/full/vllm/x.py": "# patched\n",
        "notes.md": "# notes\n",
        "serve.sh": "exec true\n",
        "weights.bin": "x",
        "repro.toml.bak": "",
    }
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    (root / "docs").mkdir()  # empty: not offered
    return root


def test_discovery_finds_each_kind_of_thing(tmp_path: Path) -> None:
    ws = _workspace(tmp_path / "ws")
    assert discover_workspace(ws) == Discovery(
        source=ws,
        venv=".venv",
        units=("services/sglang.service",),
        drafter="drafter",
        files=("bench/**/*", "results/**/*", "notes.md", "serve.sh"),
        patches_dir="patches",
        patch_keys=("sglang", "vllm"),
    )


@pytest.mark.parametrize("venv", ["venv", ".venv", "env"])
def test_each_venv_directory_name_is_found(tmp_path: Path, venv: str) -> None:
    (tmp_path / venv).mkdir()
    (tmp_path / venv / "pyvenv.cfg").write_text("")
    assert discover_workspace(tmp_path).venv == venv


def test_an_empty_workspace_discovers_nothing(tmp_path: Path) -> None:
    (tmp_path / "venv").mkdir()  # no pyvenv.cfg: not a venv
    found = discover_workspace(tmp_path)
    assert (found.venv, found.units, found.drafter, found.files, found.patches_dir) == (
        None,
        (),
        None,
        (),
        None,
    )


def test_discovering_a_file_is_an_error_naming_it(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match=r"not-a-dir is not a directory"):
        discover_workspace(tmp_path / "not-a-dir")


def test_the_rendered_toml_parses_and_says_what_was_found(tmp_path: Path) -> None:
    ws = _workspace(tmp_path / "ws")
    document = _toml.loads(render_repro_toml(discover_workspace(ws)))
    assert document["bundle"] == {"name": "ws"}
    assert document["env"] == {"venv": ".venv"}
    assert document["services"] == {"units": ["services/sglang.service"]}
    assert document["models"] == {"drafter": "drafter"}
    assert document["files"] == {"include": ["bench/**/*", "results/**/*", "notes.md", "serve.sh"]}
    assert document["patches"]["workspace"] == {
        "dir": "patches",
        "map": {"sglang": "sglang", "vllm": "vllm"},
    }


def test_workspace_config_without_a_toml_is_what_init_writes(tmp_path: Path) -> None:
    ws = _workspace(tmp_path / "ws")
    defaults = workspace_config(ws)
    assert defaults.path is None
    assert defaults.env.venv == ws / ".venv"
    assert defaults.models.drafter == ws / "drafter"
    assert defaults.services.units == (ws / "services" / "sglang.service",)
    assert defaults.files.include == ("bench/**/*", "results/**/*", "notes.md", "serve.sh")
    written = write_repro_toml(ws)
    assert written == ws / "repro.toml"
    loaded = workspace_config(ws)
    assert loaded.path == written
    assert (loaded.env, loaded.models, loaded.services, loaded.files.include) == (
        defaults.env,
        defaults.models,
        defaults.services,
        defaults.files.include,
    )


def test_init_refuses_to_overwrite_without_force(tmp_path: Path) -> None:
    (tmp_path / "repro.toml").write_text("# mine\n")
    with pytest.raises(UsageError, match=r"repro\.toml already exists") as caught:
        write_repro_toml(tmp_path)
    assert caught.value.hint == "pass --force to overwrite it"
    assert (tmp_path / "repro.toml").read_text() == "# mine\n"
    write_repro_toml(tmp_path, force=True)
    assert (tmp_path / "repro.toml").read_text().startswith("# repro.toml for ")


def test_a_toml_that_cannot_be_written_names_the_file(tmp_path: Path) -> None:
    (tmp_path / "repro.toml").mkdir()  # a directory where the file would go
    with pytest.raises(UsageError, match=r"cannot write .*repro\.toml"):
        write_repro_toml(tmp_path, force=True)
