"""`repro unpack --install-units`: unit names a bundle may use, every command a unit
runs shown before it is installed, and no unit of the box's replaced unless --force
(and then backed up, the backup named in the report).

Real bundles (tests/support/bundles.py) with a unit added and the manifest written again, so
`repro check` passes; the real CLI installs into a units directory named with
--units-dir (this machine's /etc/systemd/system is never written), and the installed
files are read back by the real `systemd-analyze verify`.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from repro.errors import InputError, UsageError
from repro.install.deploy.unitinstall import (
    MARKER,
    SYSTEMD_DIR,
    VENDOR_DIRS,
    install_unit_files,
    other_unit_dirs,
    place_units,
    refuse_conflicts,
)
from repro.units.command import unit_commands
from repro.units.names import validate_unit_name
from tests.support.bundles import archive_tree, make_bundle_tree
from tests.support.run import run_repro

UNIT_TEXT = """\
[Unit]
Description=repro unit install test

[Service]
ExecStartPre=/bin/true pre
ExecStart=/bin/sh -c 'exec sleep 1'
ExecStartPost=/bin/true post
ExecReload=/bin/kill -HUP $MAINPID
ExecStop=/bin/true stop
ExecStopPost=/bin/true \\
  stop-post

[Install]
WantedBy=multi-user.target
"""
COMMANDS = [
    ("ExecStartPre", "/bin/true pre"),
    ("ExecStart", "/bin/sh -c 'exec sleep 1'"),
    ("ExecStartPost", "/bin/true post"),
    ("ExecReload", "/bin/kill -HUP $MAINPID"),
    ("ExecStop", "/bin/true stop"),
    # systemd's join: the backslash becomes a space, the next line is appended as it is
    ("ExecStopPost", "/bin/true    stop-post"),
]
FOREIGN = b"[Unit]\nDescription=the box's own ssh server\n[Service]\nExecStart=/usr/sbin/sshd -D\n"


def _bundle(tmp_path: Path, name: str, text: str = UNIT_TEXT) -> Path:
    tree = make_bundle_tree(tmp_path / f"src-{name}", files={f"services/{name}": text.encode()})
    return archive_tree(tree, tmp_path / f"{name}.tar")


def _unpack(
    bundle: Path, target: Path, units: Path, *flags: str
) -> subprocess.CompletedProcess[bytes]:
    return run_repro(
        "unpack", str(bundle), "--target", str(target), "--cpu", "--no-smoke",
        "--install-units", "--units-dir", str(units), "--json", *flags,
    )  # fmt: skip


def _systemd_verify(path: Path) -> None:
    tool = shutil.which("systemd-analyze")
    assert tool is not None, "systemd-analyze is expected here (Debian's systemd package)"
    verify = subprocess.run(
        [tool, "verify", "--man=no", str(path)], capture_output=True, text=True, timeout=60
    )
    assert (verify.returncode, verify.stdout + verify.stderr) == (0, ""), path


# --- names ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "name",
    ["model.service", "sglang@.service", "sglang@0.service", "a\\x2db.service", "x.timer",
     "api.socket", "Model_2:x.path", "serving.target", "n" * 247 + ".service"],
)  # fmt: skip
def test_unit_names_repro_installs(name: str) -> None:
    validate_unit_name(name, source="test")


@pytest.mark.parametrize(
    "name",
    ["-.mount", "-.slice", "-srv.mount", "-x.service", ".service", "@x.service",
     "a@b@c.service", "foo.slice", "foo.scope", "foo.service.d", "foo", "a b.service",
     "n" * 248 + ".service", "foo/bar.service", "foo.service\n"],
)  # fmt: skip
def test_unit_names_refused(name: str) -> None:
    with pytest.raises(InputError, match="is not a systemd unit name repro installs"):
        validate_unit_name(name, source="test")


def test_a_bundle_with_the_root_mount_unit_is_refused_before_anything_is_written(
    tmp_path: Path,
) -> None:
    bundle = _bundle(tmp_path, "-.mount", "[Mount]\nWhat=/dev/sda1\nWhere=/\n")
    assert run_repro("check", str(bundle)).returncode == 0  # re-manifested: it verifies
    target, units = tmp_path / "target", tmp_path / "units"
    proc = _unpack(bundle, target, units)
    err = proc.stderr.decode()
    assert proc.returncode == 2, err
    assert "services/-.mount: '-.mount' is not a systemd unit name repro installs" in err, err
    assert not target.exists() and not units.exists()


# --- every command -------------------------------------------------------------------


UNIT_COMMAND_CASES = [
    ("every Exec key, in life order", UNIT_TEXT, COMMANDS),
    (
        "an empty assignment resets its key",
        "[Service]\nExecStartPre=/bin/a\nExecStartPre=\nExecStartPre=/bin/b\nExecStart=/bin/c\n",
        [("ExecStartPre", "/bin/b"), ("ExecStart", "/bin/c")],
    ),
    (
        "a socket's commands; paths and other sections are not commands",
        "[Unit]\nExecStart=/not/a/service\n[Socket]\nListenStream=80\nExecStartPre=/bin/a\n"
        "ExecStopPost=/bin/b\n[Service]\nExecSearchPath=/usr/bin\nExecPaths=/x\n",
        [("ExecStartPre", "/bin/a"), ("ExecStopPost", "/bin/b")],
    ),
    ("a timer runs none itself", "[Timer]\nOnCalendar=daily\n", []),
]


@pytest.mark.parametrize(
    ("text", "expected"),
    [c[1:] for c in UNIT_COMMAND_CASES],
    ids=[c[0] for c in UNIT_COMMAND_CASES],
)
def test_unit_commands(text: str, expected: list[tuple[str, str]]) -> None:
    assert unit_commands(text) == expected


# --- installing ----------------------------------------------------------------------


@pytest.mark.slow
def test_install_units_shows_every_command_and_marks_the_file(tmp_path: Path) -> None:
    name = "repro-unit-install-test.service"
    bundle = _bundle(tmp_path, name)
    units = tmp_path / "units"
    proc = _unpack(bundle, tmp_path / "t1", units)
    err = proc.stderr.decode()
    assert proc.returncode == 0, err
    installed = units / name
    rendered = tmp_path / "t1" / "services" / name
    assert f"will run services: install {rendered} as {installed} (a new unit)\n" in err, err
    for key, command in COMMANDS:
        assert f"will run services: {name}: {key}={command}\n" in err, err
    assert installed.read_text() == MARKER + "\n" + rendered.read_text()
    _systemd_verify(installed)
    services = next(s for s in json.loads(proc.stdout)["steps"] if s["name"] == "services")
    assert services["facts"]["installed"] == [str(installed)]
    assert services["facts"]["backups"] == {}

    # Another target of the same bundle: the installed unit is repro's, replaced in place.
    proc = _unpack(bundle, tmp_path / "t2", units)
    err = proc.stderr.decode()
    assert proc.returncode == 0, err
    assert f"as {installed} (replacing repro's own {installed})\n" in err, err
    assert (
        installed.read_text() == MARKER + "\n" + (tmp_path / "t2" / "services" / name).read_text()
    )
    assert sorted(p.name for p in units.iterdir()) == [name]  # no backup of its own file


@pytest.mark.slow
def test_a_unit_repro_did_not_install_is_replaced_only_with_force_and_backed_up(
    tmp_path: Path,
) -> None:
    bundle = _bundle(tmp_path, "sshd.service")
    units = tmp_path / "units"
    units.mkdir()
    existing = units / "sshd.service"
    existing.write_bytes(FOREIGN)

    # --no-exec says what installing would do, and installs nothing.
    proc = _unpack(bundle, tmp_path / "t0", units, "--no-exec")
    assert proc.returncode == 0, proc.stderr.decode()
    first = json.loads(proc.stdout)["would_run"][0]
    assert first.endswith(
        f"as {existing} ({existing} exists and repro did not install it (refused without --force))"
    ), first

    target = tmp_path / "t1"
    proc = _unpack(bundle, target, units)
    err = proc.stderr.decode()
    assert proc.returncode == 2, err
    assert f"  - {existing} exists and repro did not install it\n" in err, err
    assert "pass --force" in err, err
    assert existing.read_bytes() == FOREIGN
    assert not target.exists()  # refused before anything was written
    assert sorted(p.name for p in units.iterdir()) == ["sshd.service"]

    proc = _unpack(bundle, target, units, "--force")
    err = proc.stderr.decode()
    assert proc.returncode == 0, err
    backup = units / "sshd.service.repro-backup"
    assert backup.read_bytes() == FOREIGN
    assert existing.read_text().startswith(MARKER + "\n")
    assert f"backed up services: {existing} to {backup} (--force)\n" in err, err
    services = next(s for s in json.loads(proc.stdout)["steps"] if s["name"] == "services")
    assert services["facts"]["backups"] == {str(existing): str(backup)}
    assert f"{existing} was backed up to {backup}" in services["detail"]
    _systemd_verify(existing)


def test_a_foreign_link_is_backed_up_as_a_link_and_backups_are_never_overwritten(
    tmp_path: Path,
) -> None:
    """Debian's /etc/systemd/system/sshd.service is a link to ssh.service: kept as one."""
    units = tmp_path / "units"
    units.mkdir()
    (units / "sshd.service.repro-backup").write_bytes(b"an earlier backup\n")
    (units / "sshd.service").symlink_to("/lib/systemd/system/ssh.service")
    (placement,) = place_units(["sshd.service"], units)
    assert placement.foreign and not placement.ours
    with pytest.raises(UsageError, match="exists and repro did not install it"):
        install_unit_files([placement], [b"[Service]\nExecStart=/bin/true\n"], force=False)
    (done,) = install_unit_files([placement], [b"[Service]\nExecStart=/bin/true\n"], force=True)
    assert done.backup == units / "sshd.service.repro-backup.1"
    assert done.backup.readlink() == Path("/lib/systemd/system/ssh.service")
    assert (units / "sshd.service.repro-backup").read_bytes() == b"an earlier backup\n"
    assert not (units / "sshd.service").is_symlink()


def test_a_unit_that_would_override_a_vendor_unit_is_refused(tmp_path: Path) -> None:
    """In /etc/systemd/system a unit overrides one of the same name in systemd's other
    directories: the name is taken even though the file there is new."""
    vendor, units = tmp_path / "vendor", tmp_path / "etc"
    vendor.mkdir()
    (vendor / "sshd.service").write_bytes(FOREIGN)
    placements = place_units(["sshd.service", "model.service"], units, others=[vendor])
    assert [p.shadows for p in placements] == [(vendor / "sshd.service",), ()]
    with pytest.raises(UsageError) as caught:
        refuse_conflicts(placements, force=False)
    assert f"{units / 'sshd.service'} would override {vendor / 'sshd.service'}" in str(caught.value)
    refuse_conflicts(placements, force=True)


def test_systemds_own_directory_is_checked_against_the_vendor_units_of_this_box() -> None:
    """Read-only, on this machine's real directories: systemd's journald ships in one
    of them, so installing a bundle's systemd-journald.service would be refused."""
    assert other_unit_dirs(SYSTEMD_DIR) == VENDOR_DIRS
    assert other_unit_dirs(Path("/srv/units")) == ()
    (placement,) = place_units(["systemd-journald.service"], SYSTEMD_DIR)
    assert placement.shadows, "systemd-journald.service is expected in a vendor directory"
    assert placement.conflicts
