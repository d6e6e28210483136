from __future__ import annotations

from pathlib import Path

import pytest

from repro.errors import InputError
from repro.snapshot.workspace import unitcapture
from repro.units.dropin import REQUIRED_MARK, required_names
from repro.units.names import validate_unit_name
from repro.units.render import render_unit


def _unit(tmp_path: Path, venv: Path, home: Path, env_file: Path) -> Path:
    unit = tmp_path / "sglang-dflash.service"
    unit.write_text(
        "[Unit]\nDescription=SGLang server\n\n[Service]\n"
        f"WorkingDirectory={home}\n"
        f"EnvironmentFile={env_file}\n"
        f"ExecStart={venv}/bin/python -m sglang.launch_server --model-path {home}/drafter\n"
        f"Environment=PATH={venv}/bin:/usr/bin\n"
        "Restart=on-failure\n\n[Install]\nWantedBy=multi-user.target\n"
    )
    return unit


def test_capture_unit_templates_paths_and_redacts_env_file(tmp_path: Path) -> None:
    home = tmp_path / "dflash"
    venv = home / "venv"
    venv.mkdir(parents=True)
    env_file = tmp_path / "dflash.env"
    env_file.write_text("# serving\nHF_TOKEN=hf_abcdef\nNCCL_DEBUG=INFO\nexport API_KEY=xyz\n")
    unit = _unit(tmp_path, venv, home, env_file)
    captured = unitcapture.capture_unit(
        unit, unitcapture.PathMap.build(venv=venv, home=home), verify=False
    )
    text = captured.content.decode()
    assert str(tmp_path) not in text.replace(str(env_file), "")
    assert "ExecStart=${REPRO_VENV}/bin/python -m sglang.launch_server" in text
    assert "--model-path ${REPRO_HOME}/drafter" in text
    assert "WorkingDirectory=${REPRO_HOME}\n" in text
    (env,) = captured.environment_files
    env_text = env.content.decode()
    assert "hf_abcdef" not in env_text and "xyz" not in env_text
    assert f"{REQUIRED_MARK}\nHF_TOKEN=\n" in env_text
    assert required_names(env_text) == ("HF_TOKEN", "API_KEY")
    assert "NCCL_DEBUG=INFO" in env_text
    assert set(env.redacted) == {"HF_TOKEN", "API_KEY"}
    rendered = render_unit(text, {"REPRO_VENV": "/srv/new/venv", "REPRO_HOME": "/srv/new"})
    assert "ExecStart=/srv/new/venv/bin/python" in rendered


def test_longest_path_wins(tmp_path: Path) -> None:
    mapping = unitcapture.PathMap.build(
        venv=Path("/data/x/venv"),
        home=Path("/data/x"),
        model_dirs=[Path("/data/models/org/Qwen3-8B"), Path("/data/x/drafter")],
    )
    assert mapping.templatize(
        "/data/x/venv/bin/python /data/x/run.sh /data/xy /data/models/org/Qwen3-8B/t.json"
    ) == ("${REPRO_VENV}/bin/python ${REPRO_HOME}/run.sh /data/xy ${REPRO_MODELS}/Qwen3-8B/t.json")
    assert mapping.templatize("/data/x/drafter") == "${REPRO_HOME}/drafter"


@pytest.mark.parametrize("name", ["../evil.service", "evil", ".hidden.service", "a/b.service"])
def test_bad_unit_names_refused(name: str) -> None:
    with pytest.raises(InputError, match="not a systemd unit name"):
        validate_unit_name(name, source="test")


def test_missing_named_unit(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="does not exist"):
        unitcapture.resolve_unit_names(["nope.service"], unit_dir=tmp_path)


def test_systemd_analyze_warnings_reported(tmp_path: Path) -> None:
    import shutil

    if shutil.which("systemd-analyze") is None:
        pytest.fail("systemd-analyze is expected on this machine (Debian's systemd package)")
    unit = tmp_path / "broken.service"
    unit.write_text("[Service]\nExecStart=relative/path\nBogusKey=1\n")
    captured = unitcapture.capture_unit(unit, unitcapture.PathMap.build(venv=None, home=None))
    assert any("broken.service" in warning for warning in captured.warnings)


# --- launch commands and model references from ExecStart= ------------------------------


def _layout(tmp_path: Path) -> dict[str, Path]:
    paths = {
        "home": tmp_path / "ws",
        "venv": tmp_path / "ws" / "venv",
        "drafter": tmp_path / "ws" / "drafter",
        "out": tmp_path / "models" / "Qwen3-8B",
    }
    for key in ("venv", "drafter", "out"):
        paths[key].mkdir(parents=True)
    return paths


CAPTURE_CASES = [
    # (what, [Service] lines with {home} {venv} {out} {drafter}, engine, port, argv, models)
    (
        "sglang: model outside, drafter inside",
        "ExecStart={venv}/bin/python -m sglang.launch_server --model-path {out} \\\n"
        "  --speculative-draft-model-path {drafter} --port 30001",
        "sglang",
        30001,
        "${REPRO_VENV}/bin/python -m sglang.launch_server --model-path "
        "${REPRO_MODELS}/Qwen3-8B --speculative-draft-model-path ${REPRO_HOME}/drafter "
        "--port 30001",
        [("out", "target", "Qwen3-8B"), ("drafter", "drafter", "drafter")],
    ),
    (
        "vllm serve: positional model and tokenizer, default port",
        "ExecStart=-{venv}/bin/vllm serve {out} --tokenizer={out}",
        "vllm",
        8000,
        "${REPRO_VENV}/bin/vllm serve ${REPRO_MODELS}/Qwen3-8B "
        "--tokenizer=${REPRO_MODELS}/Qwen3-8B",
        [("out", "target", "Qwen3-8B")],
    ),
    (
        "transformers serve: positional model, default port",
        "ExecStart={venv}/bin/transformers serve {out} --device cuda:0 --host 127.0.0.1",
        "openai",
        8000,
        "${REPRO_VENV}/bin/transformers serve ${REPRO_MODELS}/Qwen3-8B --device cuda:0 "
        "--host 127.0.0.1",
        [("out", "target", "Qwen3-8B")],
    ),
    (
        "a repository id stays as it is, and is referenced",
        "ExecStart={venv}/bin/vllm serve Qwen/Qwen3-8B --port 8100",
        "vllm",
        8100,
        "${REPRO_VENV}/bin/vllm serve Qwen/Qwen3-8B --port 8100",
        [("Qwen/Qwen3-8B", "target", "Qwen3-8B")],
    ),
    (
        "model path through Environment=",
        "Environment=MODEL={out} PORT=31000\n"
        "ExecStart={venv}/bin/python -m sglang.launch_server --model-path ${{MODEL}} --port $PORT",
        "sglang",
        31000,
        "${REPRO_VENV}/bin/python -m sglang.launch_server --model-path "
        "${REPRO_MODELS}/Qwen3-8B --port 31000",
        [("out", "target", "Qwen3-8B")],
    ),
    (
        "a model path that is not here: templated and referenced (absent)",
        "ExecStart={venv}/bin/python -m sglang.launch_server --model-path /nonexistent/llama",
        "sglang",
        30000,
        "${REPRO_VENV}/bin/python -m sglang.launch_server --model-path ${REPRO_MODELS}/llama",
        [("/nonexistent/llama", "target", "llama")],
    ),
    (
        "any command with --port",
        "ExecStart={home}/bin/server --port 9000 --model {drafter}",
        "openai",
        9000,
        "${REPRO_HOME}/bin/server --port 9000 --model ${REPRO_HOME}/drafter",
        [("drafter", "target", "drafter")],
    ),
]


@pytest.mark.parametrize(
    ("what", "lines", "engine", "port", "argv", "models"),
    CAPTURE_CASES,
    ids=[case[0] for case in CAPTURE_CASES],
)
def test_a_server_unit_gives_a_launch_command(
    tmp_path: Path,
    what: str,
    lines: str,
    engine: str,
    port: int,
    argv: str,
    models: list[tuple[str, str, str]],
) -> None:
    paths = _layout(tmp_path)
    unit = tmp_path / "llm.service"
    body = lines.format(**{key: str(value) for key, value in paths.items()})
    unit.write_text(f"[Service]\n{body}\nWorkingDirectory={paths['home']}\n")
    mapping = unitcapture.PathMap.build(venv=paths["venv"], home=paths["home"])
    captured = unitcapture.capture_unit(unit, mapping, verify=False)
    launch = captured.launch
    assert launch is not None
    assert (launch.name, launch.unit, launch.engine, launch.port) == (
        "llm",
        "llm.service",
        engine,
        port,
    )
    assert launch.argv == tuple(argv.split(" "))
    assert launch.cwd == "${REPRO_HOME}"
    assert str(tmp_path) not in captured.content.decode()
    assert [(m.path, m.role, m.name) for m in captured.models] == [
        (paths.get(key, Path(key)), role, name) for key, role, name in models
    ]


def test_the_launch_env_drops_secrets_and_keeps_the_rest(tmp_path: Path) -> None:
    unit = tmp_path / "vllm-cpu.service"
    unit.write_text(
        "[Service]\nEnvironment=HF_TOKEN=hf_abc VLLM_CPU_KVCACHE_SPACE=1 "
        '"OPENAI_API_KEY=sk x"\nEnvironment=PATH=/data/x/venv/bin:/usr/bin\n'
        "ExecStart=/data/x/venv/bin/python -m vllm.entrypoints.openai.api_server --port 8001\n"
    )
    mapping = unitcapture.PathMap.build(venv=Path("/data/x/venv"), home=Path("/data/x"))
    captured = unitcapture.capture_unit(unit, mapping, verify=False)
    assert captured.launch is not None
    assert captured.launch.env == {
        "PATH": "${REPRO_VENV}/bin:/usr/bin",
        "VLLM_CPU_KVCACHE_SPACE": "1",
    }
    assert captured.launch.cwd is None
    dropped = [w for w in captured.warnings if "looks like a credential" in w]
    assert len(dropped) == 2 and all("vllm-cpu.service" in w for w in dropped)


@pytest.mark.parametrize(
    ("exec_start", "warning"),
    [
        ("/usr/bin/python -m http.server 8000", None),
        ("/bin/true", None),
        ("/opt/srv --port ${NOPE}", "--port '' is not a port number; no launch command taken"),
        ("/opt/srv --port=http", "--port 'http' is not a port number; no launch command taken"),
    ],
)
def test_a_unit_that_runs_no_server_gives_no_launch(
    tmp_path: Path, exec_start: str, warning: str | None
) -> None:
    unit = tmp_path / "other.service"
    unit.write_text(f"[Service]\nExecStart={exec_start}\n")
    captured = unitcapture.capture_unit(
        unit, unitcapture.PathMap.build(venv=None, home=None), verify=False
    )
    assert captured.launch is None
    found = [w for w in captured.warnings if "no launch command taken" in w]
    assert found == ([] if warning is None else [f"other.service: ExecStart= {warning}"])
