"""Reading a bundle directory's ladder settings, and `repro smoke` options."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from repro.errors import BundleFormatError, InputError, UsageError
from repro.ladder import RUNG_NAMES, AppliedPatch, LaunchSpec
from repro.ladder.options import SmokeOptions, spec_from_options
from repro.ladder.spec import launch_from_command, launch_from_unit, spec_from_bundle_dir

# a bundle.toml as pack writes it, by hand: the ladder reads it with the bundle's loader
HEADER = """
format_version = 1
name = "demo"
version = "1.0"
created = "2026-01-01T00:00:00Z"
tool_version = "0.1.0"

[source]
python = "3.12.1"
implementation = "cpython"
platform = "linux"
glibc = "2.36"
"""

BUNDLE_TOML = (
    HEADER
    + """
[[launch.commands]]
name = "sglang"
argv = ["python", "-m", "sglang.launch_server", "--port", "30000"]
port = 30000
engine = "sglang"

[[launch.commands]]
name = "vllm"
shell = "vllm serve m --port 8000"
port = 8000
engine = "vllm"

[ladder]
rungs = ["server", "python", "torch"]
expected_text = "Paris"
timeout_s = 1200
"""
)

PATCHED = "b" * 64
PATCHES_TOML = f"""
format_version = 1

[[files]]
dist = "sglang"
version = "0.5.0"
path = "sglang/srt/x.py"
kind = "modified"
pristine_sha256 = "{"a" * 64}"
patched_sha256 = "{PATCHED}"

[[files]]
dist = "sglang"
version = "0.5.0"
path = "sglang/srt/gone.py"
kind = "deleted"
pristine_sha256 = "{"c" * 64}"
"""


def write_bundle(root: Path, bundle: str = BUNDLE_TOML, patches: str | None = PATCHES_TOML) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    (root / "bundle.toml").write_text(bundle)
    if patches is not None:
        (root / "patches").mkdir()
        (root / "patches" / "patches.toml").write_text(patches)
    return root


def test_spec_from_bundle_dir(tmp_path: Path) -> None:
    spec = spec_from_bundle_dir(write_bundle(tmp_path / "b"), Path("/venv/bin/python"))
    assert spec.expected_python == "3.12.1"
    assert spec.rungs == ("python", "torch", "server")  # ladder order, whatever the file says
    assert spec.engines == ("sglang", "vllm")
    assert spec.timeouts.server_ready == 1200
    assert spec.launch == LaunchSpec(
        name="sglang",
        port=30000,
        engine="sglang",
        argv=("python", "-m", "sglang.launch_server", "--port", "30000"),
        expected_text="Paris",
    )
    assert spec.patched_files == (
        AppliedPatch("sglang", "sglang/srt/x.py", "modified", PATCHED),
        AppliedPatch("sglang", "sglang/srt/gone.py", "deleted", None),
    )


def test_named_launch_and_shell_command(tmp_path: Path) -> None:
    spec = spec_from_bundle_dir(
        write_bundle(tmp_path / "b"), Path("/p"), launch_name="vllm", rungs=("server",)
    )
    assert spec.launch is not None
    assert spec.launch.command == ("/bin/sh", "-c", "vllm serve m --port 8000")
    assert spec.launch.engine == "vllm"
    assert spec.rungs == ("server",)
    with pytest.raises(InputError, match="no launch command named 'nope'"):
        spec_from_bundle_dir(tmp_path / "b", Path("/p"), launch_name="nope")


def test_minimal_bundle_has_defaults(tmp_path: Path) -> None:
    spec = spec_from_bundle_dir(write_bundle(tmp_path / "b", HEADER, None), Path("/p"))
    assert spec.rungs == RUNG_NAMES
    assert spec.launch is None
    assert spec.patched_files == ()
    assert spec.engines == ()
    assert spec.expected_python == "3.12.1"
    assert spec.timeouts.server_ready == 600  # the format's default [ladder] timeout_s


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("[ladder]\nrungs = ['torch', 'warp']\n", "unknown warp"),
        ("[ladder]\ntimeout_s = -1\n", "'ladder.timeout_s' must be a finite number"),
        (
            "[launch]\ncommands = [{name = 'x', argv = ['a'], engine = 'vllm'}]\n",
            r"missing key 'launch.commands\[0\].port'",
        ),
        (
            "[launch]\ncommands = [{name = 'x', port = 1, engine = 'vllm'}]\n",
            "'shell': exactly one must be given",
        ),
        (
            "[launch]\ncommands = [{name = 'x', shell = 'a', port = 1, engine = 'tgi'}]\n",
            "engine' must be one of",
        ),
        (
            "[launch]\ncommands = [{name = 'x', argv = ['a'], port = 1, engine = 'vllm', "
            "env = {A = 1}}]\n",
            "env' must be a table of strings",
        ),
        (
            "[launch]\ncommands = [{name = 'x', argv = ['a'], port = 1, engine = 'vllm', "
            "cwd = 1}]\n",
            "cwd' must be a string",
        ),
        ("[source.gpus]\n", "'source.gpus' must be an array of tables"),
        ("[ladder\n", "not valid TOML"),
    ],
)
def test_bad_bundle_toml_names_the_file(tmp_path: Path, text: str, message: str) -> None:
    root = write_bundle(tmp_path / "b", HEADER + text, None)
    with pytest.raises(BundleFormatError, match=message) as info:
        spec_from_bundle_dir(root, Path("/p"))
    assert str(root / "bundle.toml") in str(info.value)


def test_bad_patches_toml(tmp_path: Path) -> None:
    patches = "format_version = 1\n[[files]]\ndist = 'x'\nversion = '1'\npath = 'x/y.py'\n"
    patches += f"kind = 'modified'\npristine_sha256 = '{'a' * 64}'\n"
    root = write_bundle(tmp_path / "b", HEADER, patches)
    with pytest.raises(BundleFormatError, match=r"files\[0\]: a modified file needs 'patched"):
        spec_from_bundle_dir(root, Path("/p"))


def test_missing_bundle_toml(tmp_path: Path) -> None:
    with pytest.raises(InputError, match=r"bundle\.toml: file not found"):
        spec_from_bundle_dir(tmp_path, Path("/p"))


def test_launch_from_command_finds_the_port() -> None:
    launch = launch_from_command("python -m sglang.launch_server --port=31000", None, None)
    assert (launch.port, launch.engine, launch.unit) == (31000, "sglang", None)
    launch = launch_from_command("python -m vllm.entrypoints.openai.api_server", 8001, None)
    assert (launch.port, launch.engine) == (8001, "vllm")
    with pytest.raises(InputError, match="cannot tell the port"):
        launch_from_command("serve", None, None)


def test_launch_from_unit(tmp_path: Path) -> None:
    unit = tmp_path / "llm.service"
    unit.write_text(
        "[Service]\nExecStart=-/opt/venv/bin/python -m sglang.launch_server "
        "--model-path /m --port 30000\nRestart=always\n"
    )
    launch = launch_from_unit(unit, None, None)
    assert (launch.name, launch.unit) == ("llm", "llm.service")
    assert launch.argv == (
        "/opt/venv/bin/python",
        "-m",
        "sglang.launch_server",
        "--model-path",
        "/m",
        "--port",
        "30000",
    )
    assert (launch.port, launch.engine) == (30000, "sglang")


def test_launch_from_unit_reads_it_as_systemd_does(tmp_path: Path) -> None:
    unit = tmp_path / "vllm.service"
    unit.write_text(
        "[Service]\nEnvironment=VLLM_CPU_KVCACHE_SPACE=1 'ARGS=--max-model-len 256'\n"
        "WorkingDirectory=${REPRO_HOME}\n"
        "ExecStart=@${REPRO_VENV}/bin/vllm vllm serve ${REPRO_MODELS}/m \\\n  $ARGS\n"
    )
    variables = {"REPRO_VENV": "/t/venv", "REPRO_HOME": "/t", "REPRO_MODELS": "/models"}
    launch = launch_from_unit(unit, None, None, variables)
    assert launch.argv == ("/t/venv/bin/vllm", "serve", "/models/m", "--max-model-len", "256")
    assert (launch.name, launch.engine, launch.port, launch.cwd) == (
        "vllm",
        "vllm",
        8000,
        Path("/t"),
    )
    assert launch.env == {"VLLM_CPU_KVCACHE_SPACE": "1", "ARGS": "--max-model-len 256"}


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ("ExecStart=/opt/server --verbose", "cannot tell the port of /opt/server"),
        ("ExecStart=/opt/server --port=http", "--port http is not a port number"),
        ("Restart=always", "no ExecStart= line"),
    ],
)
def test_launch_from_unit_refuses(tmp_path: Path, body: str, message: str) -> None:
    unit = tmp_path / "x.service"
    unit.write_text(f"[Service]\n{body}\n")
    with pytest.raises(InputError, match=message):
        launch_from_unit(unit, None, None)


def test_options_with_bundle_and_service(tmp_path: Path) -> None:
    root = write_bundle(tmp_path / "b")
    (root / "services").mkdir()
    (root / "services" / "llm.service").write_text(
        "[Service]\nExecStart=/usr/bin/python3 -m vllm.entrypoints.openai.api_server --port 8100\n"
    )
    spec = spec_from_options(
        SmokeOptions(python=Path(sys.executable), bundle=root, service="llm", timeout=30)
    )
    assert spec.launch is not None
    assert spec.launch.name == "llm"
    assert spec.launch.port == 8100
    assert spec.launch.expected_text == "Paris"
    assert spec.timeouts.server_ready == 30


def test_options_port_overrides_bundle_launch(tmp_path: Path) -> None:
    root = write_bundle(tmp_path / "b")
    spec = spec_from_options(SmokeOptions(python=Path(sys.executable), bundle=root, port=31000))
    assert spec.launch is not None and spec.launch.port == 31000


def test_options_need_one_target(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="not both"):
        spec_from_options(SmokeOptions(python=Path(sys.executable), venv=tmp_path))
    with pytest.raises(UsageError, match="no bin/python"):
        spec_from_options(SmokeOptions(venv=tmp_path))
