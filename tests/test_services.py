from __future__ import annotations

from pathlib import Path

import pytest

from repro.errors import InputError
from repro.snapshot import services


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
    captured = services.capture_unit(
        unit, services.PathMap.build(venv=venv, home=home, models=None), verify=False
    )
    text = captured.content.decode()
    assert str(tmp_path) not in text.replace(str(env_file), "")
    assert "ExecStart=${REPRO_VENV}/bin/python -m sglang.launch_server" in text
    assert "--model-path ${REPRO_HOME}/drafter" in text
    assert "WorkingDirectory=${REPRO_HOME}\n" in text
    (env,) = captured.environment_files
    env_text = env.content.decode()
    assert "hf_abcdef" not in env_text and "xyz" not in env_text
    assert "HF_TOKEN=<redacted>" in env_text
    assert "NCCL_DEBUG=INFO" in env_text
    assert set(env.redacted) == {"HF_TOKEN", "API_KEY"}
    rendered = services.render_unit(text, {"REPRO_VENV": "/srv/new/venv", "REPRO_HOME": "/srv/new"})
    assert "ExecStart=/srv/new/venv/bin/python" in rendered


def test_longest_path_wins(tmp_path: Path) -> None:
    mapping = services.PathMap.build(
        venv=Path("/data/x/venv"), home=Path("/data/x"), models=Path("/data/models")
    )
    assert mapping.templatize("/data/x/venv/bin/python /data/x/run.sh /data/xy") == (
        "${REPRO_VENV}/bin/python ${REPRO_HOME}/run.sh /data/xy"
    )


@pytest.mark.parametrize("name", ["../evil.service", "evil", ".hidden.service", "a/b.service"])
def test_bad_unit_names_refused(name: str) -> None:
    with pytest.raises(InputError, match="not a systemd unit name"):
        services.validate_unit_name(name, source="test")


def test_missing_named_unit(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="does not exist"):
        services.resolve_unit_names(["nope.service"], unit_dir=tmp_path)


def test_systemd_analyze_warnings_reported(tmp_path: Path) -> None:
    import shutil

    if shutil.which("systemd-analyze") is None:
        pytest.fail("systemd-analyze is expected on this machine (Debian's systemd package)")
    unit = tmp_path / "broken.service"
    unit.write_text("[Service]\nExecStart=relative/path\nBogusKey=1\n")
    captured = services.capture_unit(
        unit, services.PathMap.build(venv=None, home=None, models=None)
    )
    assert any("broken.service" in warning for warning in captured.warnings)
