from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from repro import _toml
from repro.config import CONFIG_NAME, load_config
from repro.ladder import RUNG_NAMES
from tests.support.run import run_repro


def make_workspace(root: Path) -> Path:
    subprocess.run(
        [sys.executable, "-m", "venv", "--without-pip", str(root / ".venv")],
        check=True,
        timeout=120,
    )
    (root / "services").mkdir()
    (root / "services" / "sglang.service").write_text("[Service]\nExecStart=/bin/true\n")
    (root / "drafter").mkdir()
    (root / "drafter" / "config.json").write_text("{}\n")
    (root / "bench").mkdir()
    (root / "bench" / "bench.py").write_text("print(1)\n")
    (root / "README.md").write_text("# notes\n")
    (root / "patches" / "full" / "sglang" / "srt").mkdir(parents=True)
    return root


def test_init_writes_a_loadable_commented_config(tmp_path: Path) -> None:
    source = make_workspace(tmp_path / "dflash")
    result = run_repro("init", str(source))
    assert result.returncode == 0, result.stderr
    text = (source / CONFIG_NAME).read_text()
    assert text.startswith("# repro.toml for")
    data = _toml.loads(text)
    assert data["bundle"]["name"] == "dflash"
    assert data["env"]["venv"] == ".venv"
    assert data["services"]["units"] == ["services/sglang.service"]
    assert data["models"]["drafter"] == "drafter"
    assert data["files"]["include"] == ["bench/**/*", "README.md"]
    assert data["patches"]["workspace"]["map"] == {"sglang": "sglang"}
    config = load_config(source)
    assert config.env.venv == source / ".venv"
    assert config.files.matched == (source / "README.md", source / "bench" / "bench.py")


def test_init_refuses_to_overwrite_without_force(tmp_path: Path) -> None:
    (tmp_path / CONFIG_NAME).write_text("# mine\n")
    refused = run_repro("init", str(tmp_path))
    assert refused.returncode == 2
    assert b"already exists" in refused.stderr and b"--force" in refused.stderr
    assert (tmp_path / CONFIG_NAME).read_text() == "# mine\n"
    forced = run_repro("init", "--force", str(tmp_path))
    assert forced.returncode == 0, forced.stderr
    assert "python =" in (tmp_path / CONFIG_NAME).read_text()  # no venv: commented hint


def test_init_of_a_missing_directory(tmp_path: Path) -> None:
    result = run_repro("init", str(tmp_path / "absent"))
    assert result.returncode == 2 and b"is not a directory" in result.stderr


def test_the_templates_rung_names_are_the_ladders(tmp_path: Path) -> None:
    source = make_workspace(tmp_path / "ws")
    assert run_repro("init", str(source)).returncode == 0
    text = (source / CONFIG_NAME).read_text()
    (line,) = [line for line in text.splitlines() if line.startswith("# rungs = ")]
    (source / CONFIG_NAME).write_text(text.replace(line, line.removeprefix("# ")))
    assert load_config(source).ladder.rungs == RUNG_NAMES
