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
from repro.install.state import load_state
from repro.snapshot.pack import PackOptions, pack
from tests.support.bundles import (
    archive_tree,
    make_bundle_tree,
    make_workspace,
    member_names,
    pack_workspace,
    read_member,
    tamper,
)
from tests.support.doubles.nvidia_smi import fake_nvidia_smi
from tests.support.freshbox import INNER_ROOT, FreshBox, fresh_box
from tests.support.nvcc import kernel_wheel
from tests.support.run import run
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
    columns = " ".join(listed.stdout.split())  # names padded to the longest one's width
    assert "repro.deploy.repro_unpack Rebuild a repro bundle's environment" in columns
    assert "repro.deploy.repro_rollback Return a target upgraded in place" in columns
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


# --- the fleet upgraded in place, one box failing its preflight, and a rollback --------

ROLLBACK_PLAYBOOK = COLLECTION / "playbooks" / "rollback.yml"
ROLLBACK_TASK = "Target rolled back by repro"
# Each box's GPU, from the nvidia-smi test double: two Hopper boxes (compute capability
# 9.0, an H200's) and one Ampere box (8.0), on which bundle 2's kernel cannot run.
GPUS = {"box1": "9.0", "box2": "9.0", "box3": "8.0"}
KERNEL = "hopper-kern"


@dataclass(frozen=True)
class UpgradeFleet:
    fleet: Fleet  # its bundle: version 1, full
    delta: Path  # version 2, packed with --base version 1


def _gpu_box(base: Path, name: str) -> FreshBox:
    """A fresh box whose nvidia-smi (the test double: there is no GPU here) reports one
    GPU of GPUS[name]; the double's directory is seen at its own path inside."""
    double = base / f"{name}-nvidia-smi"
    fake_nvidia_smi(double, GPUS[name], "13.0")
    binds = {double: str(double), double / "nvidia-smi": "/usr/local/bin/nvidia-smi"}
    return fresh_box(base / name, python="debian-3.11", binds=binds)


@pytest.fixture(scope="module")
def upgrade_fleet(tmp_path_factory: pytest.TempPathFactory) -> UpgradeFleet:
    """Version 1: the small workspace, packed whole. Version 2: the same workspace after
    a kernel package built for Hopper only (real nvcc output for sm_90) was installed and
    a line added to six.py (a patch), packed as a delta against version 1."""
    base = tmp_path_factory.mktemp("upgrade-fleet")
    workspace = make_workspace(base / "src", Path("/usr/bin/python3.11"))
    v1 = pack_workspace(workspace, base / "v1", cache=base / "cache", wheels="all").path
    assert v1 is not None
    kernel = kernel_wheel(base / "wheels", KERNEL, "1.0", {"hopper_kern/_k.so": ("sm_90",)})
    python = str(workspace / "venv" / "bin" / "python")
    run([python, "-m", "pip", "install", "-q", "--no-index", "--no-deps", str(kernel)])
    six = next((workspace / "venv" / "lib").glob("python3.*/site-packages/six.py"))
    six.write_text(six.read_text() + "\n# the fleet's fix\n")
    v2 = pack(
        PackOptions(
            source=workspace,
            output=base / "v2",
            wheels="all",
            cache_dir=base / "cache",
            version="2",
            base=str(v1),
        )
    ).path
    assert v2 is not None
    boxes = {name: _gpu_box(base, name) for name in HOSTS}
    return UpgradeFleet(Fleet(boxes, v1, base, cached_venv(ANSIBLE) / "bin"), v2)


@dataclass(frozen=True)
class Holds:
    version: str  # the bundle's version its state.toml records
    verify: subprocess.CompletedProcess[str]  # `repro verify TARGET` in the box
    imports: subprocess.CompletedProcess[str]  # the venv imports version 2's kernel package


def holds(box: FreshBox) -> Holds:
    """What the box's target holds now, by repro's own account."""
    state = load_state(box.host(TARGET))
    assert state is not None
    return Holds(
        state.bundle.version,
        box.run([f"{TOOL_VENV}/bin/repro", "verify", TARGET], timeout=300),
        box.run([f"{TARGET}/venv/bin/python", "-c", "import hopper_kern, six"], timeout=120),
    )


def deployment(listing_: dict[str, str]) -> dict[str, str]:
    """The target's part of a box's listing, less its history (the latest run's report,
    the releases' folder that the first upgrade made) and bytecode."""
    prefix = TARGET.removeprefix("/box/") + "/"
    history = {LATEST_REPORT, f"{prefix}.repro/releases"}
    return {
        rel: value
        for rel, value in listing_.items()
        if rel.startswith(prefix) and rel not in history and "__pycache__" not in rel
    }


@dataclass(frozen=True)
class FleetUpgrade:
    deployed: Run  # version 1 on every box, in one batch
    after_deploy: dict[str, dict[str, str]]
    check: Run  # --check --diff of the rolling upgrade to version 2, bundles on the hosts
    after_check: dict[str, dict[str, str]]
    upgrade: Run  # the rolling upgrade to version 2
    after_upgrade: dict[str, dict[str, str]]
    upgraded: dict[str, Holds]  # what each box held after it, by repro's own account
    again: Run  # the rolling upgrade again, on the hosts it reached
    after_again: dict[str, dict[str, str]]
    rollback_check: Run  # --check --diff of box2's rollback to version 1
    after_rollback_check: dict[str, dict[str, str]]
    rollback: Run  # box2 back to version 1
    after_rollback: dict[str, dict[str, str]]
    rolled_back: Holds  # box2 after it
    rollback_again: Run


@pytest.fixture(scope="module")
def fleet_upgrade(upgrade_fleet: UpgradeFleet) -> FleetUpgrade:
    """The runs in order on the same three boxes. Before the check, the delta is put on
    every host where the role copies it (an operator's rsync): check mode copies
    nothing, and the plan needs the bundle."""
    fleet, delta = upgrade_fleet.fleet, upgrade_fleet.delta
    to_v2 = dict.fromkeys(HOSTS, delta)
    deployed = playbook(fleet)
    after_deploy = _listings(fleet)
    for box in fleet.boxes.values():
        shutil.copyfile(delta, box.host(f"/box/bundles/{delta.name}"))
    after_staging = _listings(fleet)
    check = playbook(fleet, "--check", "--diff", bundles=to_v2, rolling=True)
    assert _listings(fleet) == after_staging, "check mode changed a box"
    upgrade = playbook(fleet, "--diff", bundles=to_v2, rolling=True)
    after_upgrade = _listings(fleet)
    upgraded = {name: holds(box) for name, box in fleet.boxes.items()}
    again = playbook(fleet, "--limit", "box1,box2", bundles=to_v2, rolling=True)
    after_again = _listings(fleet)
    back = ("--limit", "box2", "-e", "repro_rollback_version=1")
    rollback_check = playbook(fleet, "--check", "--diff", *back, book=ROLLBACK_PLAYBOOK)
    after_rollback_check = _listings(fleet)
    rollback = playbook(fleet, "--diff", *back, book=ROLLBACK_PLAYBOOK)
    after_rollback = _listings(fleet)
    rolled_back = holds(fleet.boxes["box2"])
    rollback_again = playbook(fleet, *back, book=ROLLBACK_PLAYBOOK)
    return FleetUpgrade(
        deployed,
        after_deploy,
        check,
        after_staging,
        upgrade,
        after_upgrade,
        upgraded,
        again,
        after_again,
        rollback_check,
        after_rollback_check,
        rollback,
        after_rollback,
        rolled_back,
        rollback_again,
    )


def _assert_box3_refused(result: dict[str, Any]) -> None:
    """box3's failure is repro's preflight, in words an operator acts on."""
    assert result["rc"] == 1, result
    message = result["msg"]
    assert "preflight failed for ws-2; nothing was installed" in message, message
    assert "hopper-kern 1.0 on GPU 0: none" in message and "8.0 (sm_80)" in message, message
    assert "install a hopper-kern built with code for this GPU's architecture" in message


def test_check_mode_plans_the_upgrade_and_predicts_box3s_failure(
    fleet_upgrade: FleetUpgrade,
) -> None:
    assert fleet_upgrade.deployed.returncode == 0, fleet_upgrade.deployed.output[-6000:]
    deployed = fleet_upgrade.deployed.results(UNPACK_TASK)
    assert {name: r["report"]["version"] for name, r in deployed.items()} == dict.fromkeys(
        HOSTS, "1"
    )
    check = fleet_upgrade.check
    assert check.returncode != 0
    assert check.statuses(UNPACK_TASK) == {"box1": "changed", "box2": "changed", "box3": "failed"}
    results = check.results(UNPACK_TASK)
    for name in ("box1", "box2"):
        planned = results[name]
        assert (planned["upgrade"]["from"], planned["upgrade"]["to"]) == ("1", "2")
        assert planned["changes"] == [
            "distribution: hopper-kern 1.0 (added)",
            "patch applied: six.py",
        ], planned
    _assert_box3_refused(results["box3"])
    # the diff: the version before and after, the plan, every change (twice: two hosts)
    for line in ("-ws 1", "+ws 2", "would upgrade in place: 1 -> 2", "  patch applied: six.py"):
        assert check.output.count(line) == 2, (line, check.output[-6000:])


def test_rolling_upgrade_moves_two_boxes_and_leaves_box3_on_its_release(
    fleet_upgrade: FleetUpgrade,
) -> None:
    run_ = fleet_upgrade.upgrade
    assert run_.returncode != 0  # box3 failed, max_fail_percentage 0
    assert run_.statuses(UNPACK_TASK) == {"box1": "changed", "box2": "changed", "box3": "failed"}
    results = run_.results(UNPACK_TASK)
    for name in ("box1", "box2"):
        upgraded = results[name]
        assert upgraded["changes"] == [
            "distribution: hopper-kern 1.0 (added)",
            "patch applied: six.py",
        ], upgraded
        assert upgraded["upgrade"]["dists"]["unchanged"] == 4
        assert upgraded["venv"] == f"{TARGET}/venv"
        steps = {s["name"]: s["status"] for s in upgraded["report"]["steps"]}
        assert steps["upgrade"] == "done" and steps["smoke"] == "done", steps
        now = fleet_upgrade.upgraded[name]
        assert now.version == "2" and now.imports.returncode == 0, now.imports.stderr
        assert "releases/1/release.toml" in "".join(fleet_upgrade.after_upgrade[name])
    _assert_box3_refused(results["box3"])
    # box3: not one byte changed (its bundle was put there before the check), on 1
    assert fleet_upgrade.after_upgrade["box3"] == fleet_upgrade.after_check["box3"]
    box3 = fleet_upgrade.upgraded["box3"]
    assert box3.version == "1" and box3.imports.returncode != 0  # no kernel package there
    assert "No module named 'hopper_kern'" in box3.imports.stderr
    for name, now in fleet_upgrade.upgraded.items():
        assert now.verify.returncode == 0, (name, now.verify.stdout + now.verify.stderr)
        assert "matches its bundle" in now.verify.stderr
    # the same rollout again on the boxes it reached: nothing to do
    again = fleet_upgrade.again
    assert again.returncode == 0, again.output[-6000:]
    assert again.statuses(UNPACK_TASK) == {"box1": "ok", "box2": "ok"}
    assert again.changed() == {"box1": 0, "box2": 0}


def test_rollback_returns_box2_to_its_release_once(fleet_upgrade: FleetUpgrade) -> None:
    check = fleet_upgrade.rollback_check
    assert check.returncode == 0, check.output[-6000:]
    planned = check.results(ROLLBACK_TASK)["box2"]
    assert planned["changed"] is True and planned["result"]["dry_run"] is True
    assert (planned["held"], planned["version"], planned["undone"]) == ("2", "1", ["1"])
    for line in ("-2", "+1", "undo release 1"):
        assert line in check.output, (line, check.output[-6000:])
    assert fleet_upgrade.after_rollback_check == fleet_upgrade.after_again

    rollback = fleet_upgrade.rollback
    assert rollback.returncode == 0, rollback.output[-6000:]
    assert rollback.statuses(ROLLBACK_TASK) == {"box2": "changed"}
    assert rollback.results(ROLLBACK_TASK)["box2"]["undone"] == ["1"]
    box2 = fleet_upgrade.rolled_back
    assert box2.version == "1"
    assert box2.verify.returncode == 0, box2.verify.stdout + box2.verify.stderr
    assert "No module named 'hopper_kern'" in box2.imports.stderr
    # file for file the deployment it was before the upgrade
    assert deployment(fleet_upgrade.after_rollback["box2"]) == deployment(
        fleet_upgrade.after_deploy["box2"]
    )
    for name in ("box1", "box3"):  # the others untouched
        assert fleet_upgrade.after_rollback[name] == fleet_upgrade.after_again[name]

    again = fleet_upgrade.rollback_again
    assert again.returncode == 0, again.output[-6000:]
    assert again.statuses(ROLLBACK_TASK) == {"box2": "ok"}
    assert again.results(ROLLBACK_TASK)["box2"]["undone"] == []
