"""Tests of repro.install.deploy.services: a bundle's units rendered with the target's paths."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest

from repro.errors import ReproError
from repro.install.deploy.services import check_units, render_units, required_secrets
from repro.units.dropin import REQUIRED_MARK

UNIT = (
    "[Unit]\nDescription=LLM\n\n[Service]\n"
    "EnvironmentFile=-/home/me/ws/llm.env\n"
    "ExecStartPre=/bin/true\n"
    "ExecStart=${REPRO_VENV}/bin/python -m sglang.launch_server --port 30000\n"
    "WorkingDirectory=${REPRO_HOME}\n"
)


def _bundle(root: Path, units: dict[str, str], env: dict[str, str] | None = None) -> Path:
    services = root / "services"
    services.mkdir(parents=True)
    for name, text in units.items():
        (services / name).write_text(text)
    for name, text in (env or {}).items():
        (services / name).parent.mkdir(exist_ok=True)
        (services / name).write_text(text)
    return root


def _render(bundle: Path, target: Path) -> list[str]:
    rendered = render_units(bundle, target, venv=target / "venv", home=target, models=None)
    return [line for unit in rendered for line in unit.command_lines()]


def test_check_units_names_each_unit(tmp_path: Path) -> None:
    bundle = _bundle(tmp_path, {"b.service": UNIT, "a@.service": UNIT})
    assert check_units(bundle, where="x.tar") == ["a@.service", "b.service"]
    assert check_units(tmp_path / "none", where="x.tar") == []


@pytest.mark.parametrize("key", ["Alias", "DefaultInstance"])
def test_check_units_refuses_another_install_name(tmp_path: Path, key: str) -> None:
    bundle = _bundle(tmp_path, {"llm.service": UNIT + f"\n[Install]\n{key}=sshd.service\n"})
    with pytest.raises(ReproError) as caught:
        check_units(bundle, where="x.tar")
    assert caught.value.message == (
        f"x.tar: services/llm.service:11 would also be installed as 'sshd.service' ({key}=)"
    )


@pytest.mark.parametrize("name", ["llm", "../llm.service", "llm service.service"])
def test_check_units_refuses_a_name_that_is_no_unit(tmp_path: Path, name: str) -> None:
    services = tmp_path / "services"
    services.mkdir()
    (services / name.replace("/", "_")).write_text(UNIT)
    with pytest.raises(ReproError, match="is not a systemd unit name"):
        check_units(tmp_path, where="x.tar")


def test_check_units_refuses_a_unit_that_is_not_utf8(tmp_path: Path) -> None:
    (tmp_path / "services").mkdir()
    (tmp_path / "services" / "llm.service").write_bytes(b"[Service]\nExecStart=/bin/\xff\n")
    with pytest.raises(ReproError, match=r"x.tar: services/llm.service: cannot read"):
        check_units(tmp_path, where="x.tar")


def test_render_units_fills_the_targets_paths(tmp_path: Path) -> None:
    bundle = _bundle(tmp_path / "b", {"llm.service": UNIT})
    target = tmp_path / "t"
    assert _render(bundle, target) == [
        "llm.service: ExecStartPre=/bin/true",
        f"llm.service: ExecStart={target}/venv/bin/python -m sglang.launch_server --port 30000",
    ]
    text = (target / "services" / "llm.service").read_text()
    assert f"WorkingDirectory={target}\n" in text
    assert "${REPRO_" not in text


def test_env_files_are_private_pointed_to_and_keep_the_operators_value(tmp_path: Path) -> None:
    dropin = f"{REQUIRED_MARK}\nHF_TOKEN=\nPLAIN=1\n"
    bundle = _bundle(tmp_path / "b", {"llm.service": UNIT}, {"llm.service.d/llm.env": dropin})
    target = tmp_path / "t"
    _render(bundle, target)
    env = target / "services" / "llm.service.d" / "llm.env"
    assert stat.S_IMODE(env.stat().st_mode) == 0o600
    unit = (target / "services" / "llm.service").read_text()
    assert f"EnvironmentFile=-{env}\n" in unit
    (secret,) = required_secrets(bundle, target)
    assert (secret.unit, secret.name, secret.file, secret.provided) == (
        "llm.service",
        "HF_TOKEN",
        env,
        False,
    )
    env.write_text(env.read_text().replace("HF_TOKEN=\n", "HF_TOKEN=hf_abc\n"))
    _render(bundle, target)  # a rerun keeps what the operator set
    assert "HF_TOKEN=hf_abc\n" in env.read_text()
    assert [s.provided for s in required_secrets(bundle, target)] == [True]
    assert secret.to_json()["provided"] is False


def test_required_secrets_before_rendering_are_unprovided(tmp_path: Path) -> None:
    dropin = f"{REQUIRED_MARK}\nA=\n{REQUIRED_MARK}\nB=\n"
    bundle = _bundle(tmp_path / "b", {"x.service": UNIT}, {"x.service.d/repro-secrets.env": dropin})
    found = required_secrets(bundle, tmp_path / "t")
    assert [(s.name, s.provided) for s in found] == [("A", False), ("B", False)]
