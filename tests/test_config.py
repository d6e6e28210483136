from __future__ import annotations

import re
from pathlib import Path

import pytest

from repro.config import CONFIG_NAME, WorkspaceTarget, load_config
from repro.errors import ConfigError
from repro.ladder import RUNG_NAMES


def workspace(tmp_path: Path, text: str) -> Path:
    (tmp_path / "venv" / "bin").mkdir(parents=True)
    (tmp_path / "services").mkdir()
    (tmp_path / "services" / "sglang.service").write_text("[Service]\n")
    (tmp_path / "drafter").mkdir()
    (tmp_path / "bench").mkdir()
    (tmp_path / "bench" / "run.sh").write_text("#!/bin/sh\n")
    (tmp_path / "bench" / "results.json").write_text("{}\n")
    (tmp_path / "patches" / "full" / "sglang").mkdir(parents=True)
    (tmp_path / CONFIG_NAME).write_text(text)
    return tmp_path


FULL = """
[bundle]
name = "dflash"
version = "1.2.0"

[env]
venv = "venv"
import_modules = true

[patches]
packages = ["sglang", "flashinfer-python"]
ignore = ["*.orig"]

[patches.workspace]
dir = "patches"
map = { sglang = "sglang", "python/sgl" = { dist = "sglang", prefix = "sglang/srt" } }

[services]
units = ["services/*.service"]
system = ["nginx.service"]

[models]
drafter = "drafter"
target = "bench"

[files]
include = ["bench/**/*"]
exclude = ["bench/*.json"]

[launch]
commands = ["python -m sglang.launch_server --port 30000"]

[ladder]
rungs = ["server", "python"]
timeout = 120
port = 30000
prompt = "Hello"
"""


def test_a_full_config_loads(tmp_path: Path) -> None:
    source = workspace(tmp_path, FULL)
    config = load_config(source)
    assert config.path == source / CONFIG_NAME
    assert (config.bundle.name, config.bundle.version) == ("dflash", "1.2.0")
    assert config.env.venv == source / "venv"
    assert config.env.import_modules is True
    assert config.patches.packages == ("sglang", "flashinfer-python")
    assert config.patches.workspace is not None
    assert config.patches.workspace.map == {
        "sglang": WorkspaceTarget("sglang", "sglang"),
        "python/sgl": WorkspaceTarget("sglang", "sglang/srt"),
    }
    assert config.services.units == (source / "services" / "sglang.service",)
    assert config.models.drafter == source / "drafter"
    assert config.models.others == {"target": source / "bench"}
    assert config.files.matched == (source / "bench" / "run.sh",)
    assert config.launch.commands == ("python -m sglang.launch_server --port 30000",)
    assert config.ladder.rungs == ("server", "python")
    assert (config.ladder.timeout, config.ladder.port, config.ladder.prompt) == (
        120.0,
        30000,
        "Hello",
    )


def test_no_config_gives_defaults(tmp_path: Path) -> None:
    config = load_config(tmp_path)
    assert config.path is None and config.patches.packages == ()
    assert config.env.import_modules is False


BAD = """
[bundel]
name = "x"

[bundle]
name = 3
colour = "red"

[env]
venv = "missing-venv"
import_modules = "yes"

[patches]
packages = "sglang"

[files]
include = ["nothing/*.md"]

[ladder]
timeout = "soon"
port = 1.5

[models]
drafter = 7
"""


def test_every_problem_is_reported_at_once_with_file_and_key(tmp_path: Path) -> None:
    source = workspace(tmp_path, BAD)
    with pytest.raises(ConfigError) as caught:
        load_config(source)
    message = str(caught.value)
    path = re.escape(str(source / CONFIG_NAME))
    for expected in (
        "bundel: unknown section",
        "bundle.name: must be a string, not an integer",
        "bundle.colour: unknown key",
        "env.venv: path 'missing-venv' does not exist",
        "env.import_modules: must be true or false, not a string",
        "patches.packages: must be a list of strings, not a string",
        "files.include: 'nothing/\\*.md' matches no file",
        "ladder.timeout: must be a positive number, not 'soon'",
        "ladder.port: must be an integer, not a number",
        "models.drafter: must be a path string, not an integer",
    ):
        assert re.search(path + ": " + expected, message), expected
    assert "10 problem(s)" in message
    assert caught.value.exit_code == 2


def test_invalid_toml_names_the_file(tmp_path: Path) -> None:
    (tmp_path / CONFIG_NAME).write_text("[bundle\nname = 1\n")
    with pytest.raises(ConfigError, match=re.escape(str(tmp_path / CONFIG_NAME)) + ": not valid"):
        load_config(tmp_path)


def test_venv_and_python_are_exclusive(tmp_path: Path) -> None:
    source = workspace(tmp_path, '[env]\nvenv = "venv"\npython = "venv/bin"\n')
    with pytest.raises(ConfigError) as caught:
        load_config(source)
    assert "env: give venv or python, not both" in str(caught.value)
    assert "env.python: 'venv/bin' is a directory" in str(caught.value)


_VALID = "the rungs are python, torch, triton, kernels, nccl, engine, server"


@pytest.mark.parametrize(
    ("value", "rungs", "problem"),
    [
        ('["python", "engine"]', ("python", "engine"), None),
        (str(list(RUNG_NAMES)).replace("'", '"'), RUNG_NAMES, None),
        ("[]", (), None),
        ('["import", "cuda", "server", "generate"]', (), "unknown rung(s) 'import', 'cuda', "),
        ('["python", "Torch"]', (), "unknown rung(s) 'Torch'; "),
        ('"python"', (), "must be a list of strings, not a string"),
        ("[1]", (), "must be a list of strings"),
    ],
)
def test_ladder_rungs_are_names_of_the_ladder(
    tmp_path: Path, value: str, rungs: tuple[str, ...], problem: str | None
) -> None:
    (tmp_path / CONFIG_NAME).write_text(f"[ladder]\nrungs = {value}\n")
    if problem is None:
        assert load_config(tmp_path).ladder.rungs == rungs
        return
    with pytest.raises(ConfigError) as caught:
        load_config(tmp_path)
    message = str(caught.value)
    assert f"{tmp_path / CONFIG_NAME}: ladder.rungs: {problem}" in message
    if "unknown" in problem:
        assert message.splitlines()[1].endswith(_VALID), message
    assert caught.value.exit_code == 2


def test_a_workspace_path_with_brackets_keeps_its_globs(tmp_path: Path) -> None:
    """`[b]` in the workspace's own path is a name, not a character class."""
    source = tmp_path / "w[b]x"
    (source / "bench").mkdir(parents=True)
    (source / "bench" / "run.sh").write_text("echo\n")
    (source / "repro.toml").write_text('[files]\ninclude = ["bench/*"]\n')
    assert load_config(source).files.matched == (source / "bench" / "run.sh",)


@pytest.mark.parametrize("pattern", ["/etc/*", "../outside/*", "bench/../../x"])
def test_an_include_pattern_that_leaves_the_workspace_is_refused(
    tmp_path: Path, pattern: str
) -> None:
    (tmp_path / "repro.toml").write_text(f'[files]\ninclude = ["{pattern}"]\n')
    with pytest.raises(ConfigError) as caught:
        load_config(tmp_path)
    assert f"files.include: {pattern!r} leaves the workspace" in str(caught.value)
    assert caught.value.exit_code == 2


def test_kernels_recipes_parse(tmp_path: Path) -> None:
    (tmp_path / "sgl").mkdir()
    (tmp_path / CONFIG_NAME).write_text(
        "[kernels.SGL_Kernel]\n"
        'source = "sgl"\n'
        'arch_env = ["SGL_ARCHS"]\n'
        'env = { MAX_JOBS = "4" }\n'
        'command = ["{python}", "setup.py", "bdist_wheel", "-d", "{out}"]\n'
        'check = ["{python}", "-c", "import sgl_kernel"]\n'
        "[kernels.plain]\n"
    )
    config = load_config(tmp_path)
    recipe = config.kernels["sgl-kernel"]
    assert recipe.source == (tmp_path / "sgl").resolve()
    assert recipe.arch_env == ("SGL_ARCHS",)
    assert recipe.env == (("MAX_JOBS", "4"),)
    assert recipe.command[-1] == "{out}" and recipe.check[0] == "{python}"
    assert config.kernels["plain"].source is None
    assert config.kernels["plain"].command[:3] == ("{python}", "-m", "pip")


def test_kernels_recipes_are_checked_key_by_key(tmp_path: Path) -> None:
    path = tmp_path / CONFIG_NAME
    path.write_text(
        "[kernels.a]\n"
        'source = "missing"\n'
        'arch_env = ["9BAD"]\n'
        "env = { OK = 1 }\n"
        'command = ["{python}", "{where}"]\n'
        'check = ["{source}"]\n'
        'colour = "red"\n'
        "[kernels]\n"
        "b = 3\n"
    )
    with pytest.raises(ConfigError) as caught:
        load_config(tmp_path)
    message = caught.value.message
    for expected in (
        f"{path}: kernels.a.source: path 'missing' does not exist",
        f"{path}: kernels.a.arch_env: '9BAD' is not a variable name",
        f"{path}: kernels.a.env.OK: must be a string",
        f"{path}: kernels.a.command: {{where}}",
        f"{path}: kernels.a.check: {{source}}",
        f"{path}: kernels.a.colour: unknown key",
        f"{path}: kernels.b: must be a table",
    ):
        assert expected in message, (expected, message)


def test_a_kernels_test_line_is_the_rungs_argv(tmp_path: Path) -> None:
    (tmp_path / CONFIG_NAME).write_text(
        "[kernels.sgl-kernel]\n"
        "test = \"python -c 'import sgl_kernel; print(1)'\"\n"
        "[kernels.other]\n"
        'test = "/opt/selftest --quick"\n'
    )
    config = load_config(tmp_path)
    assert config.kernels["sgl-kernel"].check == ("{python}", "-c", "import sgl_kernel; print(1)")
    assert config.kernels["other"].check == ("/opt/selftest", "--quick")


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        (
            'test = "python -c \'x"\ncheck = ["{python}"]\n',
            "kernels.a: give check or test, not both",
        ),
        ('test = "python -c \'x"\n', "kernels.a.test: cannot be split into words"),
        ('test = ""\n', "kernels.a.test: must hold at least the program to run"),
        ("test = 3\n", "kernels.a.test: must be a string"),
        ('test = "{python} {out}"\n', "kernels.a.test: {out}"),
    ],
)
def test_a_bad_kernels_test_line_is_named(tmp_path: Path, body: str, expected: str) -> None:
    path = tmp_path / CONFIG_NAME
    path.write_text("[kernels.a]\n" + body)
    with pytest.raises(ConfigError) as caught:
        load_config(tmp_path)
    assert f"{path}: {expected}" in caught.value.message


def test_caches_section_parses(tmp_path: Path) -> None:
    (tmp_path / "triton-cache").mkdir()
    (tmp_path / CONFIG_NAME).write_text(
        "[caches]\n"
        "enable = true\n"
        'kinds = ["triton", "inductor", "triton"]\n'
        'paths = { triton = "triton-cache" }\n'
        'max_size = "2GiB"\n'
    )
    caches = load_config(tmp_path).caches
    assert caches.enable is True
    assert caches.kinds == ("triton", "inductor")
    assert caches.paths == {"triton": (tmp_path / "triton-cache").resolve()}
    assert caches.max_size == 2 << 30
    assert load_config(tmp_path / "nowhere").caches.enable is False


def test_caches_section_is_checked_key_by_key(tmp_path: Path) -> None:
    path = tmp_path / CONFIG_NAME
    path.write_text(
        "[caches]\n"
        'enable = "yes"\n'
        'kinds = ["jax"]\n'
        'paths = { triton = "missing", tpu = "x", ptx = 3 }\n'
        'max_size = "lots"\n'
        "colour = 1\n"
    )
    with pytest.raises(ConfigError) as caught:
        load_config(tmp_path)
    message = caught.value.message
    for expected in (
        f"{path}: caches.enable: must be true or false",
        f"{path}: caches.kinds: 'jax' is no cache kind",
        f"{path}: caches.paths.triton: path 'missing' does not exist",
        f"{path}: caches.paths.tpu: is no cache kind",
        f"{path}: caches.paths.ptx: must be a string",
        f"{path}: caches.max_size: must be a size",
        f"{path}: caches.colour: unknown key",
    ):
        assert expected in message, (expected, message)
