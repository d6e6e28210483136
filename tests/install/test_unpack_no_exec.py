"""`repro unpack --no-exec`: prints exactly what it would execute (the server launch
command, the unit installs) and runs none of it. A real unpack (venv, pip install of a
real PyPI wheel) of a bundle whose launch command and unit would leave marker files."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import pytest

from repro.bundle.info import LaunchCommand, LaunchInfo, dump_bundle_info
from repro.install.deploy.unitinstall import SYSTEMD_DIR
from tests.support.bundles import archive_tree, bundle_info, make_bundle_tree
from tests.support.run import run_repro

pytestmark = pytest.mark.slow
UNIT = "repro-noexec-test.service"


def test_no_exec_prints_and_runs_nothing(tmp_path: Path) -> None:
    server_marker = tmp_path / "server-ran"
    unit_marker = tmp_path / "unit-ran"
    argv = ("/bin/sh", "-c", f"touch {server_marker}")
    info = bundle_info()
    info = type(info)(**{**info.__dict__, "launch": LaunchInfo(
        (LaunchCommand(name="main", port=30123, engine="sglang", argv=argv),)
    )})  # fmt: skip
    # Every command a service runs over its life, each leaving its own marker.
    keys = ("ExecStartPre", "ExecStart", "ExecStartPost", "ExecReload", "ExecStop", "ExecStopPost")
    commands = {key: f"/bin/sh -c 'touch {unit_marker}-{key}'" for key in keys}
    unit_text = (
        "[Unit]\nDescription=t\n[Service]\n"
        + "".join(f"{key}={command}\n" for key, command in commands.items())
        + "[Install]\nWantedBy=multi-user.target\n"
    )
    tree = make_bundle_tree(
        tmp_path / "src",
        files={"bundle.toml": dump_bundle_info(info), f"services/{UNIT}": unit_text.encode()},
    )
    bundle = archive_tree(tree, tmp_path / "demo.tar")
    installed_unit = SYSTEMD_DIR / UNIT
    assert not installed_unit.exists()
    target = tmp_path / "target"
    proc = run_repro(
        "unpack", str(bundle), "--target", str(target), "--cpu", "--no-exec", "--install-units",
        "--json",
    )  # fmt: skip
    err = proc.stderr.decode()
    assert proc.returncode == 0, err
    report = json.loads(proc.stdout)
    server_line = f"server main (port 30123): {shlex.join(argv)}"
    unit_lines = [
        f"install {target / 'services' / UNIT} as {installed_unit} (a new unit)",
        *(f"{UNIT}: {key}={command}" for key, command in commands.items()),
    ]
    assert report["would_run"] == [*unit_lines, server_line]
    for line in unit_lines:
        assert f"would run services: {line}\n" in err, err
    assert f"would run smoke server: {server_line}\n" in err, err
    assert not server_marker.exists()
    assert list(tmp_path.glob("unit-ran*")) == []
    assert not installed_unit.exists()
    assert report["smoke"] is None  # no rung ran, not even the interpreter check
    assert [s["status"] for s in report["steps"] if s["name"] == "smoke"] == ["skipped"]
    assert (target / "services" / UNIT).is_file()  # rendered for review, not installed
