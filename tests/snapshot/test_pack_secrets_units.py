"""Credentials a real workspace holds never enter its bundle, in any member.

One workspace: a small real venv (six from the index, a local project whose
direct_url.json says it came from a GitHub URL with `x-access-token:ghp_...@`, as pip
records such an install), six.py patched with a token in it, and a unit with inline
`Environment=HF_TOKEN=hf_...`, a quoted `OPENAI_API_KEY=sk-...` next to a plain
assignment, and `--api-key`/`--token=` arguments. Packed with `repro pack`, every tar
member and the raw archive are searched for each value; then `repro unpack` renders the
drop-in the operator fills.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import secrets
import shutil
import stat
import string
import subprocess
import sys
import tarfile
from dataclasses import dataclass
from pathlib import Path

import pytest

from repro.units.command import parse_service
from tests.support.run import run_repro


def _random(prefix: str, length: int) -> str:
    alphabet = string.ascii_letters + string.digits
    return prefix + "".join(secrets.choice(alphabet) for _ in range(length))


HF = _random("hf_", 40)
SK = _random("sk-", 40)
GHP = _random("ghp_", 36)
GHP_URL = _random("ghp_", 36)  # in direct_url.json
PATCH_HF = _random("hf_", 40)  # in a patched file
PASSWORD = _random("pw", 14)  # no token shape: only --password says what it is
VALUES = {
    "HF_TOKEN": HF,
    "OPENAI_API_KEY": SK,
    "TOKEN": GHP,
    "PASSWORD": PASSWORD,
    "url token": GHP_URL,
    "patched token": PATCH_HF,
}
UNIT = "llm.service"
SIX_PATCH = "ws-1.0/patches/full/six/six.py"
GIT_URL = "https://x-access-token:{}@github.com/acme/tiny-git.git"  # pip adds git+


@dataclass(frozen=True)
class Packed:
    root: Path
    bundle: Path
    stderr: str
    stdout: str


def _record_as_pip_does(dist_info: Path, name: str, data: bytes) -> None:
    """Write a dist-info file and its RECORD line (sha256, size), as pip does for
    direct_url.json when it installs from a URL."""
    (dist_info / name).write_bytes(data)
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    rel = f"{dist_info.name}/{name}"
    record = dist_info / "RECORD"
    lines = [line for line in record.read_text().splitlines() if not line.startswith(rel + ",")]
    record.write_text("\n".join([*lines, f"{rel},sha256={digest},{len(data)}"]) + "\n")


def _workspace(base: Path) -> Path:
    from tests.snapshot.conftest import PYTHON_311, make_venv, pip, write_project
    from tests.support.run import run

    root = base / "ws"
    (root / "services").mkdir(parents=True)
    venv = make_venv(PYTHON_311, root / "venv")
    pip(venv, "install", "-q", "six==1.16.0")
    project = write_project(base / "src", "tiny-git", "tiny_git", "0.1", False)
    run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(base), str(project)])
    (wheel,) = base.glob("tiny_git-*.whl")
    pip(venv, "install", "-q", str(wheel))
    (dist_info,) = venv.site_packages.glob("tiny_git-0.1.dist-info")
    direct = {"url": GIT_URL.format(GHP_URL), "vcs_info": {"vcs": "git", "commit_id": "a" * 40}}
    _record_as_pip_does(dist_info, "direct_url.json", json.dumps(direct).encode())
    with (venv.site_packages / "six.py").open("a") as stream:
        stream.write(f'\n_HUB_TOKEN = "{PATCH_HF}"  # a hand patch that should not hold this\n')
    (root / "services" / UNIT).write_text(
        "[Unit]\nDescription=an OpenAI-compatible server\n\n[Service]\n"
        f"Environment=HF_TOKEN={HF}\n"
        f'Environment="OPENAI_API_KEY={SK}" PLAIN=1\n'
        f"ExecStartPre={venv.python} -c pass --password {PASSWORD}\n"
        f"ExecStart={venv.python} -m vllm.entrypoints.openai.api_server \\\n"
        f"    --api-key {SK} --token={GHP} --port 8011\n"
        "Restart=on-failure\n\n[Install]\nWantedBy=multi-user.target\n"
    )
    (root / "repro.toml").write_text('[bundle]\nname = "ws"\n\n[env]\nvenv = "venv"\n')
    return root


def _pack(root: Path, out: Path, *args: str) -> subprocess.CompletedProcess[bytes]:
    return run_repro(
        "pack", str(root), "-o", str(out), "--version", "1.0", "--wheels", "all",
        "--offline", *args, env={"VIRTUAL_ENV": None, "HF_TOKEN": None},
    )  # fmt: skip


@pytest.fixture(scope="module")
def packed(tmp_path_factory: pytest.TempPathFactory) -> Packed:
    base = tmp_path_factory.mktemp("unit-secrets")
    root = _workspace(base)
    bundle = base / "out" / "ws-1.0.tar"
    proc = _pack(root, bundle)
    assert proc.returncode == 0, proc.stderr.decode()
    return Packed(root, bundle, proc.stderr.decode(), proc.stdout.decode())


def test_no_member_holds_a_secret(packed: Packed) -> None:
    raw = packed.bundle.read_bytes()
    with tarfile.open(packed.bundle) as archive:
        members = {
            m.name: archive.extractfile(m).read()  # type: ignore[union-attr]
            for m in archive.getmembers()
            if m.isfile()
        }
    assert any(name.endswith("env/environment.json") for name in members)
    leaks = [
        (what, where)
        for what, value in VALUES.items()
        if what != "patched token"
        for where, data in [("the raw archive", raw), *members.items()]
        if value.encode() in data
    ]
    assert leaks == []
    # A patched file is code: carried as it is, with a warning (below); packed offline,
    # six's vault wheel is rebuilt from the installed (patched) files too.
    carriers = sorted(name for name, data in members.items() if PATCH_HF.encode() in data)
    assert carriers == ["ws-1.0/env/wheels/six-1.16.0-py2.py3-none-any.whl", SIX_PATCH]


def test_url_credentials_are_gone_but_the_url_stays(packed: Packed) -> None:
    with tarfile.open(packed.bundle) as archive:
        top = archive.getnames()[0].split("/")[0]

        def text(rel: str) -> str:
            return archive.extractfile(f"{top}/{rel}").read().decode()  # type: ignore[union-attr]

        freeze = text("env/pip-freeze.txt")
        environment = json.loads(text("env/environment.json"))
        vault = text("env/vault.toml")
        reproduce = text("REPRODUCE.md")
    stripped = "https://github.com/acme/tiny-git.git"
    assert f"tiny-git @ git+{stripped}@{'a' * 40}\n" in freeze
    (tiny,) = [d for d in environment["distributions"] if d["name"] == "tiny-git"]
    assert tiny["direct_url"]["url"] == stripped
    assert stripped in vault and stripped in reproduce
    assert "x-access-token" not in freeze + json.dumps(environment) + vault + reproduce


def test_pack_names_each_removal_never_the_value(packed: Packed) -> None:
    err = packed.stderr
    for name in ("HF_TOKEN", "OPENAI_API_KEY"):
        assert f"{UNIT}: Environment={name} looks like a credential (its name)" in err
    assert f"{UNIT}: ExecStart= the value of --token looks like a credential" in err
    assert f"{UNIT}: ExecStartPre= the value of --password looks like a credential" in err
    assert f"services/{UNIT}.d/repro-secrets.env" in err
    assert "six.py: the patched file holds a token (hf_...); it is carried as it is" in err
    assert not [value for value in VALUES.values() if value in err + packed.stdout]


def test_the_bundle_is_deterministic(packed: Packed, tmp_path: Path) -> None:
    again = tmp_path / "ws-1.0.tar"
    proc = _pack(packed.root, again, "--json")
    assert proc.returncode == 0, proc.stderr.decode()
    assert again.read_bytes() == packed.bundle.read_bytes()
    warnings = json.loads(proc.stdout)["warnings"]
    # HF_TOKEN, OPENAI_API_KEY; --password; --api-key (OPENAI_API_KEY's value), --token
    assert len([w for w in warnings if "taken out of the unit" in w]) == 5
    assert not [value for value in VALUES.values() if value in proc.stdout.decode()]


def test_unpack_renders_the_dropin_and_says_what_to_set(packed: Packed, tmp_path: Path) -> None:
    target = tmp_path / "target"
    argv = ["unpack", str(packed.bundle), "--target", str(target), "--cpu", "--no-smoke"]
    proc = run_repro(*argv, "--offline", env={"VIRTUAL_ENV": None})
    assert proc.returncode == 0, proc.stderr.decode()
    dropin = target / "services" / f"{UNIT}.d" / "repro-secrets.env"
    assert stat.S_IMODE(dropin.stat().st_mode) == 0o600
    names = ["HF_TOKEN", "OPENAI_API_KEY", "PASSWORD", "TOKEN"]
    settings = [line for line in dropin.read_text().splitlines() if not line.startswith("#")]
    assert settings == [f"{name}=" for name in names]
    out = proc.stdout.decode() + proc.stderr.decode()
    assert f"{UNIT} needs {', '.join(names)}" in out and str(dropin) in out
    report = json.loads((target / ".repro" / "unpack-report.json").read_text())
    assert [(s["name"], s["provided"]) for s in report["secrets"]] == [(n, False) for n in names]
    assert {s["file"] for s in report["secrets"]} == {str(dropin)}

    unit = target / "services" / UNIT
    text = unit.read_text()
    assert f"EnvironmentFile=-{dropin}\n" in text
    assert "--api-key ${OPENAI_API_KEY} --token=${TOKEN}" in text
    service = parse_service(text, unit=UNIT, provided=names)
    assert service.argv[-5:] == (
        "--api-key",
        "${OPENAI_API_KEY}",
        "--token=${TOKEN}",
        "--port",
        "8011",
    )
    assert service.environment == {"PLAIN": "1"}
    tool = shutil.which("systemd-analyze")
    assert tool is not None, "systemd-analyze is expected here (Debian's systemd package)"
    verify = subprocess.run(
        [tool, "verify", "--man=no", str(unit)], capture_output=True, text=True, timeout=60
    )
    assert (verify.returncode, verify.stdout + verify.stderr) == (0, "")

    # The operator fills one in; a rerun keeps it and names only the rest.
    dropin.write_text(dropin.read_text().replace("HF_TOKEN=\n", "HF_TOKEN=set-by-operator\n"))
    proc = run_repro(*argv, "--offline", "--json", env={"VIRTUAL_ENV": None})
    assert proc.returncode == 0, proc.stderr.decode()
    assert "HF_TOKEN=set-by-operator\n" in dropin.read_text()
    provided = {s["name"]: s["provided"] for s in json.loads(proc.stdout)["secrets"]}
    assert provided == {
        "HF_TOKEN": True,
        "OPENAI_API_KEY": False,
        "PASSWORD": False,
        "TOKEN": False,
    }
    assert os.stat(dropin).st_mode & 0o077 == 0
