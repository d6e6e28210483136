"""Tests of repro.ladder.options: `repro smoke` options turned into a LadderSpec."""

from __future__ import annotations

from pathlib import Path

import pytest

from repro.errors import InputError, UsageError
from repro.ladder.options import SmokeOptions, launch_variables, spec_from_options, target_python
from repro.ladder.registry import RUNG_NAMES


def _venv(root: Path) -> Path:
    (root / "bin").mkdir(parents=True)
    (root / "bin" / "python").touch()
    return root


def test_target_python_from_python_or_venv(tmp_path: Path) -> None:
    venv = _venv(tmp_path / "venv")
    assert target_python(None, Path("/usr/bin/python3")) == Path("/usr/bin/python3")
    assert target_python(venv, None) == venv / "bin" / "python"


def test_target_python_falls_back_to_the_active_venv(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    venv = _venv(tmp_path / "active")
    monkeypatch.setenv("VIRTUAL_ENV", str(venv))
    assert target_python(None, None) == venv / "bin" / "python"
    monkeypatch.delenv("VIRTUAL_ENV")
    with pytest.raises(UsageError) as caught:
        target_python(None, None)
    assert caught.value.message == "which environment? give --venv DIR or --python PATH"


def test_target_python_refuses_a_directory_that_is_no_venv(tmp_path: Path) -> None:
    with pytest.raises(UsageError) as caught:
        target_python(tmp_path, None)
    assert caught.value.message == f"{tmp_path}: no bin/python here; is this a virtual environment?"


@pytest.mark.parametrize(
    ("options", "variables"),
    [
        (SmokeOptions(), {"REPRO_VENV": "/srv/venv"}),  # from the interpreter's place
        (SmokeOptions(venv=Path("/other")), {"REPRO_VENV": "/other"}),
        (
            SmokeOptions(home=Path("/h"), models=Path("/m")),
            {"REPRO_VENV": "/srv/venv", "REPRO_HOME": "/h", "REPRO_MODELS": "/m"},
        ),
        # a bundle kept by unpack in TARGET/.repro/bundle: TARGET is the home
        (
            SmokeOptions(bundle=Path("/t/.repro/bundle")),
            {"REPRO_VENV": "/srv/venv", "REPRO_HOME": "/t"},
        ),
        (SmokeOptions(bundle=Path("/t/some/bundle")), {"REPRO_VENV": "/srv/venv"}),
        (
            SmokeOptions(bundle=Path("/t/.repro/bundle"), home=Path("/h")),
            {"REPRO_VENV": "/srv/venv", "REPRO_HOME": "/h"},
        ),
    ],
)
def test_launch_variables(options: SmokeOptions, variables: dict[str, str]) -> None:
    assert launch_variables(options, Path("/srv/venv/bin/python")) == variables


def test_launch_variables_without_a_venv_and_relative_paths(tmp_path: Path) -> None:
    assert launch_variables(SmokeOptions(), Path("/usr/local/python3")) == {}
    relative = launch_variables(SmokeOptions(models=Path("m")), Path("/usr/local/python3"))
    assert relative == {"REPRO_MODELS": str(Path("m").absolute())}


def test_spec_without_a_bundle_runs_the_command_given(tmp_path: Path) -> None:
    python = _venv(tmp_path / "v") / "bin" / "python"
    spec = spec_from_options(
        SmokeOptions(
            python=python,
            launch="python -m sglang.launch_server --port 30000",
            cpu=True,
            keep_going=True,
            timeout=42,
        )
    )
    assert spec.python == python and spec.cpu and spec.keep_going
    assert spec.rungs == RUNG_NAMES
    assert spec.timeouts.server_ready == 42
    assert spec.launch is not None
    assert (spec.launch.port, spec.launch.engine) == (30000, "sglang")


def test_spec_without_a_launch_has_none(tmp_path: Path) -> None:
    spec = spec_from_options(SmokeOptions(python=Path("/p"), rungs=("torch",)))
    assert spec.launch is None and spec.rungs == ("torch",)
    assert spec.timeouts.server_ready == 900


def test_launch_and_service_together_are_refused() -> None:
    with pytest.raises(UsageError, match="give --launch or --service, not both"):
        spec_from_options(SmokeOptions(python=Path("/p"), launch="x --port 1", service="llm"))


def test_a_service_not_found_names_where_it_looked(tmp_path: Path) -> None:
    (tmp_path / "services").mkdir()
    with pytest.raises(UsageError) as caught:
        spec_from_options(SmokeOptions(python=Path("/p"), service="nope", bundle=tmp_path))
    assert caught.value.message == (
        f"--service nope: no unit file nope.service in {tmp_path / 'services'}, /etc/systemd/system"
    )


def test_a_launch_without_a_port_is_refused() -> None:
    with pytest.raises(InputError, match="cannot tell the port"):
        spec_from_options(SmokeOptions(python=Path("/p"), launch="serve-something"))
