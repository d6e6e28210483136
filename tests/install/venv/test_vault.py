"""repro.install.venv.vault: which vault wheel installs each pin, and the install
from the vault checking each wheel's sha256 (wheels built here with zipfile)."""

from __future__ import annotations

import hashlib
import subprocess
import sys
from pathlib import Path

import pytest

from repro.bundle.lock import Pin
from repro.errors import InstallError
from repro.install.venv.vault import (
    choose_wheels,
    describe_interpreter,
    install_from_vault,
    supported_tags,
)
from tests.wheel.conftest import make_wheel, scheme_of


@pytest.fixture()
def venv(tmp_path: Path) -> Path:
    target = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(target)], check=True)
    return target


def test_choose_wheels_takes_the_pins_version_and_a_tag_this_python_takes(
    tmp_path: Path, venv: Path
) -> None:
    make_wheel(tmp_path, "demo", "1.0")
    make_wheel(tmp_path, "demo", "2.0")
    make_wheel(tmp_path, "native", "1.0", tag="cp27-cp27mu-manylinux1_x86_64")
    tags = supported_tags(describe_interpreter(venv / "bin" / "python"))
    pins = [Pin("demo", "2.0"), Pin("native", "1.0"), Pin("absent", "1")]
    choice = choose_wheels(pins, tmp_path, tags)
    assert choice.wheels == {"demo": tmp_path / "demo-2.0-py3-none-any.whl"}
    assert choice.missing == ("native==1.0", "absent==1")


def test_install_from_vault_checks_each_wheels_hash_and_drops_it(
    tmp_path: Path, venv: Path
) -> None:
    vault = tmp_path / "vault"
    vault.mkdir()
    good = make_wheel(vault, "demo", "1.0")
    other = make_wheel(vault, "other", "1.0", files={"other.py": b"Y = 1\n"})
    digests = {p: hashlib.sha256(p.read_bytes()).hexdigest() for p in (good, other)}
    python = venv / "bin" / "python"
    result = install_from_vault(
        python,
        {"demo": good, "other": other},
        {"demo": (digests[good],), "other": (digests[other],)},
        drop=True,
    )
    assert sorted(i.name for i in result.installed) == ["demo", "other"]
    assert not good.exists() and not other.exists()
    # a wheel whose bytes are not the ones vault.toml lists is not installed
    changed = make_wheel(vault, "third", "1.0", files={"third.py": b"Z = 1\n"})
    with pytest.raises(InstallError, match=r"is not the one env/vault\.toml lists for third"):
        install_from_vault(python, {"third": changed}, {"third": ("0" * 64,)})
    assert not list(scheme_of(venv).purelib.glob("third*"))
