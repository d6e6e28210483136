"""bundle.toml: schema, round trip, and the errors a user sees."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest

from repro.archive.reader import read_member
from repro.archive.writer import DeterministicTarWriter
from repro.bundle.info import (
    FORMAT_VERSION,
    READ_FORMAT_VERSION,
    BundleInfo,
    Gpu,
    LadderInfo,
    LaunchCommand,
    LaunchInfo,
    ModelRef,
    SourceInfo,
    VaultNames,
    WorkspaceInfo,
    dump_bundle_info,
    load_bundle_info,
)
from repro.errors import BundleFormatError
from tests.support.bundles import MINIMAL_BUNDLE_TOML

FULL = BundleInfo(
    name="sglang-h200",
    version="2026.1+cu130",
    created="2026-01-31T12:00:00Z",
    tool_version="0.1.0",
    source=SourceInfo(
        python="3.12.1",
        implementation="cpython",
        platform="linux-x86_64",
        glibc="2.35",
        hostname="gpu-07",
        torch="2.9.1+cu130",
        torch_cuda="13.0",
        torch_arch_list=("sm_90", "sm_100", "sm_120"),
        gpus=(Gpu("NVIDIA H200", "9.0", 143771), Gpu("NVIDIA H200", "9.0", 143771)),
        driver="580.65.06",
        cuda_driver_version="13.0",
    ),
    launch=LaunchInfo(
        (
            LaunchCommand(
                "target",
                30000,
                "sglang",
                argv=("python", "-m", "sglang.launch_server", "--port", "30000"),
                readiness="/health",
            ),
            LaunchCommand("proxy", 8080, "openai", shell="exec ./proxy.sh --port 8080"),
            LaunchCommand(
                "vllm-cpu",
                8000,
                "vllm",
                argv=("${REPRO_VENV}/bin/vllm", "serve", "${REPRO_MODELS}/Qwen3-8B"),
                env={"VLLM_CPU_KVCACHE_SPACE": "1", "PATH": "${REPRO_VENV}/bin:/usr/bin"},
                cwd="${REPRO_HOME}",
                unit="vllm-cpu@main.service",
            ),
        )
    ),
    ladder=LadderInfo(("import", "server", "generate"), "Paris", 900.0),
    models=(
        ModelRef(
            "eagle3",
            "drafter",
            total_bytes=1_234_567,
            file_count=4,
            repo_id="org/eagle3",
            revision="0123abcd",
            local_path="/models/eagle3",
            small_files={"tokenizer.json": "b" * 64, "config.json": "a" * 64},
        ),
        ModelRef("llama", "target", total_bytes=10, file_count=1),
    ),
    vault=VaultNames(("a-1-py3-none-any.whl", "b-2-py3-none-any.whl"), ("b-2-py3-none-any.whl",)),
)

MINIMAL = MINIMAL_BUNDLE_TOML


def test_round_trip_keeps_every_field() -> None:
    data = dump_bundle_info(FULL)
    assert load_bundle_info(data, source="bundle.toml") == FULL
    assert dump_bundle_info(load_bundle_info(data, source="bundle.toml")) == data


def test_dump_is_deterministic_and_sorts_small_files() -> None:
    swapped = dataclasses.replace(
        FULL,
        models=(
            dataclasses.replace(
                FULL.models[0],
                small_files=dict(reversed(list(FULL.models[0].small_files.items()))),
            ),
            FULL.models[1],
        ),
    )
    data = dump_bundle_info(FULL)
    assert dump_bundle_info(swapped) == data
    text = data.decode()
    assert text.index('"config.json"') < text.index('"tokenizer.json"')
    assert text.startswith(f"format_version = {FORMAT_VERSION}\n")


def test_vault_names_are_format_5_and_checked() -> None:
    """[vault]: the wheels' file names ahead of them, for a reader of a stream."""
    data = dump_bundle_info(FULL)
    assert b'[vault]\nwheels = [\n    "a-1-py3-none-any.whl",' in data
    three = data.replace(f"format_version = {FORMAT_VERSION}".encode(), b"format_version = 3")
    assert "key 'vault' needs format_version 5" in error_of(three)
    for change, expected in (
        ((b'"a-1-py3-none-any.whl",', b'"../a.whl",'), "key 'vault.wheels' names no wheel file"),
        ((b'"a-1-py3-none-any.whl",', b'"c-1-py3-none-any.whl",'), "must be sorted"),
        ((b'index_serves = [\n    "b-2', b'index_serves = [\n    "z-2'), "which 'wheels' does not"),
    ):
        assert expected in error_of(data.replace(*change)), change
    empty = dataclasses.replace(FULL, vault=None)
    assert b"[vault]" not in dump_bundle_info(empty)


def test_minimal_file_loads_with_defaults() -> None:
    info = load_bundle_info(MINIMAL, source="bundle.toml")
    assert info.format_version == 1  # a format 1 bundle: its venv is the target itself
    assert info.workspace == WorkspaceInfo(venv=".")
    assert info.top_dir == "demo-1.0"
    assert info.launch == LaunchInfo()
    assert info.ladder == LadderInfo()
    assert info.models == ()
    assert info.source.hostname is None


def error_of(data: bytes, source: str = "/b/bundle.toml") -> str:
    with pytest.raises(BundleFormatError) as caught:
        load_bundle_info(data, source=source)
    assert caught.value.exit_code == 1
    return str(caught.value)


def test_unknown_keys_are_named_with_the_file() -> None:
    message = error_of(MINIMAL.replace(b"[source]", b'colour = "red"\n[source]\ncuda = "12"'))
    assert "/b/bundle.toml" in message
    assert "unknown key 'colour' in the top level" in message
    assert "unknown key 'cuda' in [source]" in message


def test_wrong_types_name_key_and_expected_type() -> None:
    data = MINIMAL.replace(b'version = "1.0"', b"version = 1.0") + (
        b'torch_arch_list = "sm_90"\n'
        b'gpus = [{ name = "H200", compute_capability = "9.0", memory_mib = "lots" }]\n'
        b"[ladder]\ntimeout_s = true\n"
    )
    message = error_of(data)
    assert "key 'version' must be a string, not a float" in message
    assert "key 'source.torch_arch_list' must be a list of strings, not a string" in message
    assert "key 'source.gpus[0].memory_mib' must be an integer, not a string" in message
    assert "key 'ladder.timeout_s' must be a number, not a boolean" in message


def test_newer_format_is_refused_with_upgrade_message() -> None:
    message = error_of(MINIMAL.replace(b"format_version = 1", b"format_version = 7"))
    assert (
        f"bundle format 7 is newer than this repro supports ({READ_FORMAT_VERSION}); upgrade repro"
        in message
    )


FORMAT_2 = MINIMAL.replace(b"format_version = 1", b"format_version = 2")


def test_format_2_records_the_venv_place_and_model_weights() -> None:
    data = FORMAT_2 + (
        b'[workspace]\nvenv = ".venv"\n'
        b'[[models]]\nname = "drafter"\nrole = "drafter"\ntotal_bytes = 12\nfile_count = 2\n'
        b'local_path = "models/drafter"\n'
        b'[models.large_files]\n"model.safetensors" = 10\n'
    )
    info = load_bundle_info(data, source="bundle.toml")
    assert info.workspace == WorkspaceInfo(venv=".venv")
    (model,) = info.models
    assert model.in_workspace
    assert model.large_files == {"model.safetensors": 10}
    assert load_bundle_info(dump_bundle_info(info), source="again") == info


@pytest.mark.parametrize(
    ("table", "expected"),
    [
        (b"", "key 'workspace' is required from format 2 on"),
        (b'[workspace]\nvenv = "../up"\n', "must be a relative path inside the workspace"),
        (b'[workspace]\nvenv = ""\n', "must be a relative path inside the workspace"),
        (b'[workspace]\nvenv = "venv"\ncolour = 1\n', "unknown key 'colour' in [workspace]"),
        (
            b'[workspace]\nvenv = "venv"\n[[models]]\nname = "m"\nrole = "target"\n'
            b'total_bytes = 1\nfile_count = 1\nlocal_path = "a/../../b"\n',
            "key 'models[0].local_path' must be a relative path inside the workspace",
        ),
        (
            b'[workspace]\nvenv = "venv"\n[[models]]\nname = "m"\nrole = "target"\n'
            b"total_bytes = 1\nfile_count = 1\n[models.large_files]\nw = -1\n",
            "large_files' must be a table of sizes",
        ),
    ],
)
def test_format_2_workspace_and_model_paths_are_checked(table: bytes, expected: str) -> None:
    assert expected in error_of(FORMAT_2 + table)


def test_missing_format_version_and_fields() -> None:
    assert "missing key 'format_version'" in error_of(MINIMAL.replace(b"format_version = 1", b""))
    data = re.sub(rb"(?m)^(name|python|glibc) = .*\n", b"", MINIMAL)
    message = error_of(data)
    for key in ("name", "source.python", "source.glibc"):
        assert f"missing key '{key}'" in message
    assert "missing key 'source' (a table)" in error_of(MINIMAL.split(b"[source]")[0])


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        ((b'name = "demo"', b'name = "../demo"'), "key 'name' may hold only"),
        ((b'version = "1.0"', b'version = "1/0"'), "key 'version' may hold only"),
        ((b'created = "2026-01-31T12:00:00Z"', b'created = "2026-01-31 12:00"'), "RFC 3339"),
        ((b'created = "2026-01-31T12:00:00Z"', b'created = "2026-13-31T12:00:00Z"'), "RFC 3339"),
        ((b'created = "2026-01-31T12:00:00Z"', b"created = 2026-01-31T12:00:00Z"), "a date/time"),
        ((b"format_version = 1", b'format_version = "1"'), "positive integer"),
        ((b"[source]", b"source = 3\n[x]"), "key 'source' must be a table"),
    ],
)
def test_bad_values(change: tuple[bytes, bytes], expected: str) -> None:
    assert expected in error_of(MINIMAL.replace(*change))


def test_launch_and_models_are_checked() -> None:
    data = MINIMAL + (
        b'[[launch.commands]]\nname = "a"\nport = 70000\nengine = "tgi"\n'
        b'argv = ["x"]\nshell = "x"\n'
        b'[[models]]\nname = "m"\nrole = "judge"\ntotal_bytes = 1\nfile_count = 1\n'
        b'small_files = { "config.json" = "xyz" }\n'
    )
    message = error_of(data)
    assert "key 'launch.commands[0].argv' or 'shell': exactly one must be given" in message
    assert "key 'launch.commands[0].port' must be a TCP port" in message
    assert "key 'launch.commands[0].engine' must be one of sglang, vllm, openai" in message
    assert "key 'models[0].role' must be one of drafter, target, not 'judge'" in message
    assert "key 'models[0].small_files.config.json' must be a lowercase hex sha256" in message


def test_launch_env_cwd_and_unit_are_checked() -> None:
    data = MINIMAL + (
        b'[[launch.commands]]\nname = "a"\nport = 1\nengine = "vllm"\nargv = ["x"]\n'
        b'env = { "BAD NAME" = "1", N = 2 }\ncwd = 3\nunit = "../x.service"\n'
        b'[[launch.commands]]\nname = "b"\nport = 1\nengine = "vllm"\nargv = ["x"]\n'
        b'env = { "BAD NAME" = "1" }\nunit = "../x.service"\n'
    )
    message = error_of(data)
    assert "key 'launch.commands[0].env' must be a table of strings, not a table" in message
    assert "key 'launch.commands[0].cwd' must be a string, not an integer" in message
    assert "key 'launch.commands[1].env.BAD NAME' is not an environment variable name" in message
    assert "key 'launch.commands[1].unit' must be a unit file name under services/" in message


def test_not_toml() -> None:
    assert "not valid TOML" in error_of(b"name = = 1")
    assert "not valid TOML" in error_of(b"\xff\xfe")


def test_dump_refuses_what_would_not_load() -> None:
    with pytest.raises(BundleFormatError, match="key 'name' may hold only"):
        dump_bundle_info(dataclasses.replace(FULL, name="has space"))


def test_bundle_toml_read_back_from_a_real_archive(tmp_path: Path) -> None:
    bundle = tmp_path / "b.tar.zst"
    with (
        bundle.open("wb") as out,
        DeterministicTarWriter(out, top=FULL.top_dir, mtime=0, compression="zst") as writer,
    ):
        writer.add_bytes("bundle.toml", dump_bundle_info(FULL))
    loaded = load_bundle_info(read_member(bundle, "bundle.toml"), source=f"{bundle}:bundle.toml")
    assert loaded == FULL
