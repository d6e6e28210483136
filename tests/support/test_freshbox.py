"""The fresh box is as isolated as it claims: no source paths, no network, only the chosen
Python, no uv unless asked, no pip configuration, no repro."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.support.freshbox import BoxPython, FreshBox, bwrap_available, fresh_box, unit_paths

CONNECT = """
import socket, sys
try:
    socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=5).close()
except OSError as exc:
    print(f"failed: {exc}")
else:
    print("connected")
"""

LOOPBACK = """
import socket
server = socket.socket()
server.bind(("127.0.0.1", 0))
server.listen(1)
client = socket.create_connection(server.getsockname(), timeout=5)
peer, _ = server.accept()
client.sendall(b"ping")
print(peer.recv(4).decode())
"""

VERSIONS: dict[BoxPython, str] = {"3.12": "Python 3.12.1", "debian-3.11": "Python 3.11.2"}


def _ok(box: FreshBox, argv: list[str] | str) -> str:
    proc = box.run(argv, timeout=120)
    assert proc.returncode == 0, f"{argv}: {proc.returncode}\n{proc.stdout}\n{proc.stderr}"
    return proc.stdout


def test_bubblewrap_can_make_a_box_here() -> None:
    assert bwrap_available()


@pytest.mark.parametrize("python", ["3.12", "debian-3.11"])
def test_the_box_hides_the_host_and_has_no_route_out(tmp_path: Path, python: BoxPython) -> None:
    marker = tmp_path / "host-only.txt"
    marker.write_text("the source workspace\n")
    box = fresh_box(tmp_path, python=python)
    hidden = [str(tmp_path), str(marker), "/work", "/root/.cache", "/opt", "/home"]
    script = 'for p in "$@"; do test -e "$p" && echo "$p"; done; exit 0'
    probe = box.run(["/bin/sh", "-c", script, "sh", *hidden], timeout=60)
    assert probe.returncode == 0, probe.stderr
    assert probe.stdout == ""  # none of them exists inside
    assert _ok(box, "ls -A /tmp") == ""
    # a public address cannot be reached, while loopback works (the probe itself is sound)
    # a public address, or a name, cannot be reached, while loopback works (the probe
    # itself is sound)
    for host, port in (("1.1.1.1", "443"), ("8.8.8.8", "53"), ("pypi.org", "443")):
        assert _ok(box, ["python3", "-c", CONNECT, host, port]).startswith("failed: ")
    assert _ok(box, ["python3", "-c", LOOPBACK]) == "ping\n"


@pytest.mark.parametrize("python", ["3.12", "debian-3.11"])
def test_python3_is_the_chosen_one_and_the_box_is_writable_only_at_box(
    tmp_path: Path, python: BoxPython
) -> None:
    box = fresh_box(tmp_path, python=python)
    assert _ok(box, "python3 --version") == VERSIONS[python] + "\n"
    assert _ok(box, ["/usr/bin/python3", "--version"]) == VERSIONS[python] + "\n"
    real = "import os, sys; print(os.path.realpath(sys.executable))"
    assert _ok(box, ["python3", "-c", real]) == box.python + "\n"
    eleven = box.run("python3.11 --version", timeout=60)
    if python == "3.12":
        assert eleven.returncode == 127
        assert "not on this box" in eleven.stderr
        assert _ok(box, "python3.12 --version") == "Python 3.12.1\n"
    else:
        assert eleven.returncode == 0 and eleven.stdout == "Python 3.11.2\n"
    # /box is the host's root directory; /usr is not writable
    _ok(box, "echo written > /box/inside.txt")
    assert box.host("/box/inside.txt").read_text() == "written\n"
    assert box.inside(box.root / "inside.txt") == "/box/inside.txt"
    assert box.inside(box.root) == "/box"
    with pytest.raises(ValueError):
        box.host("/boxes/x")
    assert box.run("touch /usr/bin/written-by-a-box", timeout=60).returncode != 0
    assert not Path("/usr/bin/written-by-a-box").exists()


@pytest.mark.parametrize("python", ["3.12", "debian-3.11"])
def test_no_uv_no_repro_and_no_pip_configuration(tmp_path: Path, python: BoxPython) -> None:
    box = fresh_box(tmp_path, python=python)
    environment = json.loads(
        _ok(box, ["python3", "-c", "import json, os; print(json.dumps(dict(os.environ)))"])
    )
    assert environment["HOME"] == "/box/home"
    assert environment["PATH"].split(":")[-2:] == ["/usr/bin", "/bin"]
    assert [k for k in environment if k.startswith(("PIP_", "UV_"))] == ["PIP_CONFIG_FILE"]
    assert environment["PIP_CONFIG_FILE"] == "/dev/null"
    for tool in ("uv", "repro"):
        assert box.run(f"command -v {tool}", timeout=60).returncode != 0
        assert box.run(["python3", "-c", f"import {tool}"], timeout=60).returncode != 0
    assert _ok(box, "cat /etc/pip.conf 2>/dev/null; ls -A /etc/xdg/pip 2>/dev/null; true") == ""
    # a venv made in the box sees no pip configuration at all
    _ok(box, "python3 -m venv /box/venv")
    listed = _ok(box, "/box/venv/bin/python -m pip config list")
    assert listed == ":env:.config-file='/dev/null'\n"
    assert _ok(box, "/box/venv/bin/python --version") == VERSIONS[python] + "\n"


def test_uv_is_there_when_asked_for_and_binds_are_read_only(tmp_path: Path) -> None:
    extra = tmp_path / "extra"
    extra.mkdir()
    (extra / "note.txt").write_text("bound\n")
    box = fresh_box(tmp_path, python="3.12", uv=True, binds={extra: "/opt/extra"})
    assert _ok(box, "command -v uv") == "/usr/local/bin/uv\n"
    assert _ok(box, "uv --version").startswith("uv ")
    assert _ok(box, "cat /opt/extra/note.txt") == "bound\n"
    assert box.run("echo x > /opt/extra/note.txt", timeout=60).returncode != 0
    assert (extra / "note.txt").read_text() == "bound\n"


UNIT_NAMING_PATHS = r"""[Unit]
Description=every place a unit names a path
ConditionPathExists=/t/unit-section
[Service]
WorkingDirectory=-/t/work
EnvironmentFile=/t/env/serving.env
EnvironmentFile=-/t/services/llm.service.d/repro-secrets.env
Environment=CACHE=/t/environment-value
ExecStartPre=-/t/bench/prepare.sh --out=/t/results relative/path
ExecStart=@/t/venv/bin/python llm -m sglang.launch_server \
    --model-path /t/drafter --port 30000 ; +/t/bin/second "/t/quoted dir"
ExecStartPost=!!/t/bin/post /t/with\x20space
ExecReload=:/t/bin/reload
ExecStop=-+/t/bin/stop --pid-file=/t/run/llm.pid
ExecStopPost=
ExecCondition=/t/bin/ready
"""


def test_unit_paths_takes_every_path_a_unit_names() -> None:
    assert unit_paths(UNIT_NAMING_PATHS) == [
        "/t/work",
        "/t/env/serving.env",
        "/t/services/llm.service.d/repro-secrets.env",
        "/t/bench/prepare.sh",
        "/t/results",
        "/t/venv/bin/python",
        "/t/drafter",
        "/t/bin/second",
        "/t/quoted dir",
        "/t/bin/post",
        "/t/with space",
        "/t/bin/reload",
        "/t/bin/stop",
        "/t/run/llm.pid",
        "/t/bin/ready",
    ]
