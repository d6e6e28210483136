"""The server rung gets the credentials pack took out of its unit the way systemd gives
them to the service: from the drop-in the operator filled on the target."""

from __future__ import annotations

from pathlib import Path

from repro.bundle.info import BundleInfo, LaunchCommand, LaunchInfo, SourceInfo
from repro.install.smoke import with_unit_credentials
from repro.ladder import LaunchSpec
from repro.units.dropin import dropin_member, render_dropin


def info(unit: str | None) -> BundleInfo:
    command = LaunchCommand("serve", 8000, "vllm", argv=("x",), unit=unit)
    return BundleInfo(
        name="b",
        version="1",
        created="2026-01-01T00:00:00Z",
        tool_version="0",
        source=SourceInfo("3.12.1", "CPython", "linux", "2.36"),
        launch=LaunchInfo((command,)),
    )


LAUNCH = LaunchSpec(
    "serve",
    8000,
    "vllm",
    argv=("python", "-m", "srv", "--api-key", "${OPENAI_API_KEY}", "--token=${HF_TOKEN}"),
    env={"PLAIN": "1"},
)


def write_dropin(home: Path, text: str) -> Path:
    path = home / "services" / dropin_member("serve.service")
    path.parent.mkdir(parents=True)
    path.write_text(text)
    return path


def test_values_the_operator_set_reach_the_command_and_its_environment(tmp_path: Path) -> None:
    text = render_dropin("serve.service", ["OPENAI_API_KEY", "HF_TOKEN"])
    write_dropin(tmp_path, text.replace("OPENAI_API_KEY=", "OPENAI_API_KEY='sk-op'"))
    launch = with_unit_credentials(LAUNCH, info("serve.service"), tmp_path)
    assert launch.argv == ("python", "-m", "srv", "--api-key", "sk-op", "--token=")
    assert launch.env == {"OPENAI_API_KEY": "sk-op", "PLAIN": "1"}


def test_without_a_drop_in_or_a_unit_the_launch_is_unchanged(tmp_path: Path) -> None:
    assert with_unit_credentials(LAUNCH, info("serve.service"), tmp_path) == LAUNCH
    write_dropin(tmp_path, "OPENAI_API_KEY=sk-op\n")
    assert with_unit_credentials(LAUNCH, info(None), tmp_path) == LAUNCH
