"""The Ansible collection (contrib/ansible, repro.deploy) on the real engine.

ansible-core from PyPI (a cached venv) runs the sample rolling-update playbook against
three hosts that are really separate: each is a bubblewrap fresh box (tests/support/freshbox.py)
with its own writable root, no network and no repro, reached through a test-only
connection plugin (contrib/ansible/test-plugins/connection/freshbox.py) that runs each
command inside the box. What the boxes share: the host's /usr and /etc, read-only (so
Debian's Python 3.11), and the controller. The bundle is one real pack of a small
workspace with every wheel, so unpack runs --offline inside the boxes.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from repro.bundle.lock import read_requirements_lock
from tests.support.bundles import (
    archive_tree,
    make_bundle_tree,
    make_workspace,
    member_names,
    pack_workspace,
    read_member,
    tamper,
)
from tests.support.freshbox import INNER_ROOT, FreshBox, fresh_box
from tests.support.venvs import VenvRecipe, cached_venv, find_python

pytestmark = pytest.mark.slow

REPO_ROOT = Path(__file__).resolve().parents[2]
COLLECTIONS = REPO_ROOT / "contrib" / "ansible"
COLLECTION = COLLECTIONS / "ansible_collections" / "repro" / "deploy"
PLAYBOOK = COLLECTION / "playbooks" / "rolling_update.yml"
TEST_PLUGINS = COLLECTIONS / "test-plugins"  # a connection and a callback, tests only
HOSTS = ("box1", "box2", "box3")
TOOL_VENV = "/box/opt/repro-tool"
TARGET = "/box/srv/app"
NEXT = "/box/srv/next"
UNPACK_TASK = "Bundle unpacked by repro"
# The report of the latest run, which repro saves on every run (docs/unpack.md), one that
# had nothing to do included: the one path of a deployment that a no-op rerun rewrites.
LATEST_REPORT = "srv/app/.repro/unpack-report.json"
ANSIBLE = VenvRecipe("ansible-core", find_python("3.11"), ("ansible-core==2.18.*",))


@dataclass(frozen=True)
class Fleet:
    boxes: dict[str, FreshBox]
    bundle: Path
    base: Path
    ansible: Path  # the venv's bin directory


def _inventory(fleet: Fleet, bundles: dict[str, Path]) -> Path:
    """An INI inventory: every host a fresh box, its own bundle file on the controller."""
    lines = ["[repro_fleet]"]
    for name, box in fleet.boxes.items():
        spec = fleet.base / f"{name}.json"
        spec.write_text(
            json.dumps(
                {
                    "argv": list(box.argv_prefix),
                    "env": dict(box.base_env),
                    "root": str(box.root),
                    "inner_root": INNER_ROOT,
                }
            )
        )
        lines.append(
            f"{name} ansible_connection=freshbox freshbox_spec={spec} "
            f"repro_bundle_src={bundles.get(name, fleet.bundle)}"
        )
    lines += [
        "[repro_fleet:vars]",
        "ansible_python_interpreter=/usr/bin/python3",
        "ansible_remote_tmp=/box/home/.ansible/tmp",
        "repro_bundle_dir=/box/bundles",
        f"repro_tool_venv={TOOL_VENV}",
        f"repro_target={TARGET}",
        "repro_offline=true",
        "repro_cpu=true",
    ]
    path = fleet.base / f"inventory-{len(list(fleet.base.glob('inventory-*.ini')))}.ini"
    path.write_text("\n".join(lines) + "\n")
    return path


def _ansible_env(fleet: Fleet, record: Path | None = None) -> dict[str, str]:
    home = fleet.base / "controller-home"
    home.mkdir(exist_ok=True)
    return {
        "PATH": f"{fleet.ansible}:/usr/bin:/bin",  # no repro on it
        "HOME": str(home),
        "LANG": "C.UTF-8",
        "ANSIBLE_COLLECTIONS_PATH": str(COLLECTIONS),
        "ANSIBLE_CONNECTION_PLUGINS": str(TEST_PLUGINS / "connection"),
        "ANSIBLE_CALLBACK_PLUGINS": str(TEST_PLUGINS / "callback"),
        "ANSIBLE_CALLBACKS_ENABLED": "record",
        "REPRO_ANSIBLE_RECORD": str(record or home / "record.json"),
        "ANSIBLE_NOCOLOR": "1",
        "ANSIBLE_RETRY_FILES_ENABLED": "0",
        "ANSIBLE_LOCAL_TEMP": str(home / "tmp"),
        # one exec per task (the module on stdin), not a temporary file put into the box
        "ANSIBLE_PIPELINING": "1",
    }


@dataclass(frozen=True)
class Run:
    returncode: int
    output: str  # the default callback's text, stdout and stderr
    record: dict[str, Any]  # the test-only callback's: every task result, the stats

    def results(self, task: str) -> dict[str, dict[str, Any]]:
        """Host -> its result of `task` (named with its role prefix), over every batch."""
        return {r["host"]: r["result"] for r in self.record["results"] if r["task"].endswith(task)}

    def statuses(self, task: str) -> dict[str, str]:
        """Host -> how `task` ended for it: ok, changed, failed or skipped."""
        return {r["host"]: r["status"] for r in self.record["results"] if r["task"].endswith(task)}

    def changed(self) -> dict[str, int]:
        """Host -> how many tasks changed, as the PLAY RECAP counts them."""
        return {host: counts["changed"] for host, counts in self.record["stats"].items()}


def playbook(
    fleet: Fleet,
    *args: str,
    bundles: dict[str, Path] | None = None,
    rolling: bool = False,
    book: Path = PLAYBOOK,
) -> Run:
    """One ansible-playbook run of a sample playbook (`book`: rolling_update.yml unless
    said). `rolling`: its own default, one host at a time; otherwise every host in one
    batch, in parallel (forks)."""
    inventory = _inventory(fleet, bundles or {})
    record = inventory.with_suffix(".record.json")
    batch = [] if rolling else ["-e", f"repro_serial={len(HOSTS)}", "--forks", str(len(HOSTS))]
    result = subprocess.run(
        [
            str(fleet.ansible / "ansible-playbook"),
            "-i",
            str(inventory),
            str(book),
            *batch,
            *args,
        ],
        capture_output=True,
        text=True,
        env=_ansible_env(fleet, record),
        timeout=900,
        check=False,
    )
    output = result.stdout + result.stderr
    assert record.is_file(), output[-6000:]
    return Run(result.returncode, output, json.loads(record.read_text()))


def listing(box: FreshBox) -> dict[str, str]:
    """Every path in the box's root with its type and content digest (not its mtime):
    what "nothing changed on disk" is checked against. Ansible's own temporary
    directories under home/.ansible/tmp come and go with every task."""
    entries = {}
    for path in sorted(box.root.rglob("*")):
        rel = path.relative_to(box.root).as_posix()
        if rel.startswith("home/.ansible/tmp/"):
            continue
        if path.is_symlink():
            entries[rel] = f"link {os.readlink(path)}"
        elif path.is_file():
            entries[rel] = "file " + hashlib.sha256(path.read_bytes()).hexdigest()
        else:
            entries[rel] = "dir"
    return entries


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Fleet:
    base = tmp_path_factory.mktemp("fleet")
    workspace = make_workspace(base / "src", Path("/usr/bin/python3.11"))
    packed = pack_workspace(workspace, base / "out", cache=base / "cache", wheels="all")
    assert packed.path is not None
    boxes = {name: fresh_box(base / name, python="debian-3.11") for name in HOSTS}
    return Fleet(boxes, packed.path, base, cached_venv(ANSIBLE) / "bin")


@dataclass(frozen=True)
class Rollout:
    before: dict[str, dict[str, str]]  # each box's listing before anything ran
    first: Run
    after_first: dict[str, dict[str, str]]
    second: Run
    after_second: dict[str, dict[str, str]]
    check: Run  # --check --diff into a new target
    after_check: dict[str, dict[str, str]]
    tampered: Run  # rolling, one host at a time; box2 given a tampered bundle
    after_tampered: dict[str, dict[str, str]]


def _listings(fleet: Fleet) -> dict[str, dict[str, str]]:
    return {name: listing(box) for name, box in fleet.boxes.items()}


def _pins(bundle: Path, scratch: Path) -> int:
    """How many distributions the bundle's requirements.lock pins."""
    top = member_names(bundle)[0].split("/")[0]
    lock = scratch / "requirements.lock"
    lock.write_bytes(read_member(bundle, f"{top}/env/requirements.lock"))
    return len(read_requirements_lock(lock).pins)


@pytest.fixture(scope="module")
def rollout(fleet: Fleet) -> Rollout:
    """The runs in order, on the same three boxes: deploy (repro absent everywhere),
    deploy again, check mode with --diff into a new target, and a rolling update of the
    deployed target in which box2 holds a tampered bundle. Every run but the rolling one
    takes the three hosts in one parallel batch."""
    for box in fleet.boxes.values():
        assert box.run("command -v repro", timeout=60).returncode != 0
    before = _listings(fleet)
    first = playbook(fleet)
    after_first = _listings(fleet)
    second = playbook(fleet)
    after_second = _listings(fleet)
    check = playbook(fleet, "--check", "--diff", "-e", f"repro_target={NEXT}")
    after_check = _listings(fleet)
    bad_dir = fleet.base / "tampered"
    bad_dir.mkdir()
    bad = tamper(fleet.bundle, bad_dir / fleet.bundle.name, "env/pip-freeze.txt", b"six==0\n")
    tampered = playbook(fleet, bundles={"box2": bad}, rolling=True)
    return Rollout(
        before,
        first,
        after_first,
        second,
        after_second,
        check,
        after_check,
        tampered,
        _listings(fleet),
    )


def _changed_paths(before: dict[str, str], after: dict[str, str]) -> set[str]:
    return {rel for rel in set(before) | set(after) if before.get(rel) != after.get(rel)}


def assert_only_a_noop_report_rewritten(
    box: FreshBox, before: dict[str, str], after: dict[str, str]
) -> None:
    """Nothing on disk changed but the saved report, and that one says nothing changed."""
    assert _changed_paths(before, after) <= {LATEST_REPORT}
    saved = json.loads(box.host(f"/box/{LATEST_REPORT}").read_text())
    assert saved["changed"] is False, saved
    assert {s["status"] for s in saved["steps"][1:]} == {"already done"}, saved["steps"]


def test_first_run_bootstraps_repro_and_unpacks_on_every_host(
    fleet: Fleet, rollout: Rollout
) -> None:
    assert rollout.first.returncode == 0, rollout.first.output[-6000:]
    unpacked = rollout.first.results(UNPACK_TASK)
    assert sorted(unpacked) == list(HOSTS)
    for name, box in fleet.boxes.items():
        result = unpacked[name]
        assert result["changed"] is True, result
        steps = {s["name"]: s["status"] for s in result["report"]["steps"]}
        assert steps["install"] == "done" and steps["smoke"] == "done", steps
        assert box.host(f"{TOOL_VENV}/bin/repro").exists()  # from setup_env.sh
        imported = box.run([f"{result['venv']}/bin/python", "-c", "import idna, six"])
        assert imported.returncode == 0, imported.stderr
        # the bundle was copied in and the bootstrap's scratch copy removed
        assert sorted(p.name for p in box.host("/box/bundles").iterdir()) == [fleet.bundle.name]
        assert rollout.before[name].keys() == {"home"}  # nothing there before: no repro
    assert all(count >= 1 for count in rollout.first.changed().values())


def test_second_run_changes_no_host(fleet: Fleet, rollout: Rollout) -> None:
    assert rollout.second.returncode == 0, rollout.second.output[-6000:]
    assert rollout.second.changed() == dict.fromkeys(HOSTS, 0)
    unpacked = rollout.second.results(UNPACK_TASK)
    assert sorted(unpacked) == list(HOSTS)
    for result in unpacked.values():
        assert result["changed"] is False
        assert {s["status"] for s in result["report"]["steps"][1:]} == {"already done"}
    for name, box in fleet.boxes.items():
        assert_only_a_noop_report_rewritten(
            box, rollout.after_first[name], rollout.after_second[name]
        )


def test_check_mode_changes_nothing_on_disk_and_the_diff_is_the_plan(
    fleet: Fleet, rollout: Rollout
) -> None:
    output = rollout.check.output
    assert rollout.check.returncode == 0, output[-6000:]
    assert rollout.after_check == rollout.after_second
    assert rollout.check.changed() == dict.fromkeys(HOSTS, 1)
    unpacked = rollout.check.results(UNPACK_TASK)
    assert sorted(unpacked) == list(HOSTS)
    for result in unpacked.values():
        assert result["changed"] is True and "install" in result["pending"], result
    pins = _pins(fleet.bundle, fleet.base)
    plan = f"would create a venv at {NEXT}/venv and install {pins} distributions"
    assert output.count(plan) == len(HOSTS), output[-6000:]
    assert "  - install" in output and "  - smoke" in output


def test_a_tampered_bundle_fails_its_host_with_repros_message_and_stops_the_rollout(
    fleet: Fleet, rollout: Rollout
) -> None:
    run = rollout.tampered
    assert run.returncode != 0
    unpacked = run.results(UNPACK_TASK)
    assert sorted(unpacked) == ["box1", "box2"]  # box3 is never reached
    assert run.statuses(UNPACK_TASK) == {"box1": "ok", "box2": "failed"}
    assert unpacked["box1"]["changed"] is False  # the deployed bundle: nothing to do
    failed = unpacked["box2"]
    assert failed["rc"] == 1, failed
    assert "does not verify against its MANIFEST.sha256" in failed["msg"]
    assert "mismatched: env/pip-freeze.txt" in failed["msg"]
    # box2: only its bundle file was replaced, its deployment is as it was
    before = rollout.after_check
    assert _changed_paths(before["box2"], rollout.after_tampered["box2"]) == {
        f"bundles/{fleet.bundle.name}"
    }
    boxes = fleet.boxes
    assert_only_a_noop_report_rewritten(
        boxes["box1"], before["box1"], rollout.after_tampered["box1"]
    )
    assert rollout.after_tampered["box3"] == before["box3"]  # never reached


def test_ansible_doc_renders_the_module(fleet: Fleet) -> None:
    """The modules' pages (description, options, attributes, examples) and the
    collection's listing, which is where ansible-doc shows the short descriptions."""
    env = _ansible_env(fleet)

    def ansible_doc(*args: str) -> subprocess.CompletedProcess[str]:
        argv = [str(fleet.ansible / "ansible-doc"), "-t", "module", *args]
        return subprocess.run(
            argv, capture_output=True, text=True, env=env, timeout=120, check=False
        )

    shown = ansible_doc("repro.deploy.repro_unpack")
    listed = ansible_doc("-l", "repro.deploy")
    assert shown.returncode == 0, shown.stderr
    for text in (
        "Runs `repro unpack BUNDLE --target TARGET --json'",
        "allowed_signers",
        "check_mode",
        "diff_mode",
        "EXAMPLES",
        "RETURN VALUES",
    ):
        assert text in shown.stdout, text
    assert listed.returncode == 0, listed.stderr
    assert "repro.deploy.repro_unpack Rebuild a repro bundle's environment" in listed.stdout
    assert "repro.deploy.repro_rollback Return a target upgraded in place" in listed.stdout
    rollback = ansible_doc("repro.deploy.repro_rollback")
    assert rollback.returncode == 0, rollback.stderr
    for text in (
        "Runs `repro rollback TARGET VERSION --json'",
        "version",
        "check_mode",
        "RETURN VALUES",
    ):
        assert text in rollback.stdout, text
    assert "upgrade" in shown.stdout and "changes" in shown.stdout  # the upgrade's returns
    assert not shutil.which("repro", path=env["PATH"])


def _repro_program(tmp_path: Path) -> Path:
    """The real CLI of this checkout, as a program on disk."""
    repro = tmp_path / "repro"
    repro.write_text(f'#!/bin/sh\nPYTHONPATH={REPO_ROOT} exec {sys.executable} -m repro "$@"\n')
    repro.chmod(0o755)
    return repro


def on_localhost(
    tmp_path: Path, module: str, args: str, *options: str, cwd: Path | None = None
) -> tuple[int, dict[str, Any]]:
    """One module of the collection run by `ansible localhost` (the real engine,
    connection local): its exit status and the result it printed."""
    ansible = cached_venv(ANSIBLE) / "bin"
    result = subprocess.run(
        [
            str(ansible / "ansible"), "localhost", "-c", "local", "-i", "localhost,",
            "-e", f"ansible_python_interpreter={find_python('3.11')}",
            "-m", f"repro.deploy.{module}", "-a", args, *options,
        ],
        cwd=cwd or tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        env={
            "PATH": f"{ansible}:/usr/bin:/bin",
            "HOME": str(tmp_path),
            "LANG": "C.UTF-8",
            "ANSIBLE_COLLECTIONS_PATH": str(COLLECTIONS),
            "ANSIBLE_NOCOLOR": "1",
            "ANSIBLE_LOCAL_TEMP": str(tmp_path / "ansible-tmp"),
        },
    )  # fmt: skip
    output = result.stdout + result.stderr
    assert " => " in result.stdout, output
    shown: dict[str, Any] = json.loads(result.stdout.split(" => ", 1)[1])
    return result.returncode, shown


def test_a_bundle_path_that_begins_with_a_dash_is_a_path(tmp_path: Path) -> None:
    """The module against localhost with the real repro, in check mode: `-evil.tar`
    reaches repro as its bundle, after `--`, never as its options (`-e`...)."""
    work = tmp_path / "work"
    work.mkdir()
    archive_tree(make_bundle_tree(tmp_path / "src"), work / "-evil.tar")
    target = tmp_path / "target"
    args = (
        f"bundle=-evil.tar target={target} cpu=true offline=true "
        f"executable={_repro_program(tmp_path)}"
    )
    code, shown = on_localhost(tmp_path, "repro_unpack", args, "--check", cwd=work)
    assert code == 0, shown
    assert shown["report"]["bundle"] == "-evil.tar"
    assert shown["pending"][0] == "preflight" and shown["changed"] is True
    assert not target.exists()


def test_check_mode_before_the_bundle_is_on_the_host_says_so(tmp_path: Path) -> None:
    """Check mode of the role runs no copy task, so a new bundle is not on the host yet:
    the module reports that a real run would unpack it (changed), fails nothing."""
    target = tmp_path / "target"
    args = (
        f"bundle={tmp_path}/bundles/demo-2.tar target={target} "
        f"executable={_repro_program(tmp_path)}"
    )
    code, shown = on_localhost(tmp_path, "repro_unpack", args, "--check")
    assert code == 0, shown
    assert shown["changed"] is True and shown["changes"] == []
    assert "demo-2.tar is not on this host yet" in shown["msg"]
    failed_code, failed = on_localhost(tmp_path, "repro_unpack", args)  # a real run: repro's error
    assert failed_code != 0 and failed["rc"] == 2, failed
    assert "demo-2.tar" in failed["msg"]
    assert not target.exists()


@pytest.mark.parametrize("check", [False, True])
def test_rollback_of_no_target_fails_with_a_message_to_act_on(tmp_path: Path, check: bool) -> None:
    repro = _repro_program(tmp_path)
    missing = tmp_path / "srv" / "app"
    code, shown = on_localhost(
        tmp_path, "repro_rollback", f"target={missing} version=1 executable={repro}",
        *(["--check"] if check else []),
    )  # fmt: skip
    assert code != 0 and shown["rc"] == 2, shown
    assert f"{missing} is not a directory on this host" in shown["msg"]
    missing.mkdir(parents=True)  # a directory, but nothing repro unpacked
    code, shown = on_localhost(
        tmp_path, "repro_rollback", f"target={missing} version=1 executable={repro}",
        *(["--check"] if check else []),
    )  # fmt: skip
    assert code != 0 and shown["rc"] == 2, shown
    assert "not an unpacked repro target" in shown["msg"], shown
