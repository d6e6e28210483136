#!/usr/bin/python
# Runs on the managed host: `repro unpack BUNDLE --target TARGET --json`, with
# `changed` taken from repro's own report.

from __future__ import annotations

DOCUMENTATION = r"""
---
module: repro_unpack
short_description: Rebuild a repro bundle's environment on the host with repro unpack
version_added: "0.1.0"
description:
  - Runs C(repro unpack BUNDLE --target TARGET --json) on the managed host. repro
    verifies the bundle against its manifest (and its signature when asked), runs the
    preflight, builds the venv, applies the patches, restores the workspace, renders
    the units and climbs the smoke ladder.
  - C(changed) is repro's own report. A target that already holds the bundle with
    every step done reports C(ok); a rerun after a failed or killed run continues
    where that run stopped.
  - A target that holds another version of the bundle (same name) is upgraded in place
    (repro's upgrade changes only the distributions, patches, workspace files, units and
    model references that differ, and keeps what they replace as a
    release for M(repro.deploy.repro_rollback)). I(bundle) may be a full bundle or a
    delta made with C(repro pack --base) against the bundle the target holds.
    I(changes) lists what the upgrade changed.
  - In check mode the module runs C(repro unpack --dry-run), which writes nothing;
    C(changed) says whether a real run has steps left to do (always for an upgrade), and
    with C(--diff) the plan is shown as the diff (for an upgrade, the version before and
    after, and every change). A bundle file not on the host yet (a copy task before
    this one that check mode did not run) reports C(changed) without a plan.
  - A failure (a bundle that does not verify, a failed preflight, a smoke ladder that
    fails, a target that drifted, a delta whose base the target does not hold) fails
    the task with repro's own message and exit code; an upgrade that fails is undone,
    so the host keeps the release it had.
options:
  bundle:
    description:
      - The bundle on the host (an archive or an extracted bundle directory), or an
        http(s) URL that repro streams and verifies itself.
      - Passed to repro after C(--), so a path that begins with C(-) is a path, never
        an option.
    type: str
    required: true
  target:
    description: Where the deployment is rebuilt (repro unpack --target).
    type: path
    required: true
  offline:
    description: Install from the bundle's wheel vault only (the bundle must carry every wheel).
    type: bool
    default: false
  installer:
    description:
      - Which installer builds the venv (repro unpack --installer).
      - C(auto) takes the bundle's own wheels (C(vault)) where they cover every pin, else
        uv where it is installed, else pip-sync.
    type: str
    choices: [auto, vault, uv, pip]
    default: auto
  models:
    description: Where model weights live on the host (repro unpack --models).
    type: path
  allowed_signers:
    description:
      - An ssh-keygen allowed-signers file; the bundle's signature is verified before
        anything else, and a bundle without a valid one is refused.
    type: path
  identity:
    description: The signer expected, its principal in I(allowed_signers).
    type: str
  install_units:
    description: Copy the rendered systemd units into /etc/systemd/system.
    type: bool
    default: false
  smoke:
    description: Climb the smoke ladder at the end (a failing ladder fails the task).
    type: bool
    default: true
  cpu:
    description: A CPU-only rebuild is intended (no GPU needed; the ladder runs its CPU rungs).
    type: bool
    default: false
  replace:
    description:
      - Rebuild the target from nothing (C(repro unpack --replace)) instead of upgrading
        it in place; no release is kept to roll back to.
    type: bool
    default: false
  executable:
    description: The repro command on the host.
    type: path
    default: repro
notes:
  - Check mode is supported (C(repro unpack --dry-run)); diff mode shows the plan.
  - repro must be installed on the host; the role C(repro.deploy.repro_deploy)
    installs it from the bundle's own C(setup_env.sh) where it is absent.
attributes:
  check_mode:
    support: full
  diff_mode:
    support: full
author:
  - repro contributors
"""

EXAMPLES = r"""
- name: Rebuild the model server from its bundle
  repro.deploy.repro_unpack:
    bundle: /srv/bundles/dflash-1.tar
    target: /srv/dflash
    offline: true
    executable: /opt/repro/tool/bin/repro

- name: Only a bundle signed by the release key
  repro.deploy.repro_unpack:
    bundle: https://bundles.example.com/dflash-2.tar
    target: /srv/dflash
    replace: true
    allowed_signers: /etc/repro/allowed_signers
    identity: release@example.com
"""

RETURN = r"""
report:
  description: repro's JSON report (steps, preflight, patches, models, smoke, drift, plan, pending).
  returned: when repro ran to the end
  type: dict
target:
  description: The target directory.
  returned: when repro ran to the end
  type: str
venv:
  description: The rebuilt venv.
  returned: when repro ran to the end and built or found a venv
  type: str
units:
  description: The units the services step rendered in this run (empty when it had nothing to do).
  returned: always
  type: list
  elements: str
plan:
  description: In check mode, what a real run would do.
  returned: check mode
  type: str
pending:
  description: In check mode, the steps a real run would do (empty when none).
  returned: check mode
  type: list
  elements: str
upgrade:
  description:
    - repro's C(upgrade) section when the target was (check mode, would be) upgraded in
      place; null otherwise.
    - C(from), C(to), C(dists) (C(added), C(removed), C(changed), C(unchanged) count),
      C(patches) (C(taken_back), C(applied), C(unchanged)), C(files) and C(units)
      (C(added), C(changed), C(removed)), C(models_changed), C(members_read).
  returned: when repro ran to the end
  type: dict
changes:
  description: What the upgrade changed (check mode, would change), one line each.
  returned: when repro ran to the end
  type: list
  elements: str
  sample:
    - "distribution: hopper-kern 1.0 (added)"
    - "patch applied: six.py"
    - "file changed: bench/results.json"
rc:
  description: repro's exit code.
  returned: always
  type: int
"""

import os

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.repro.deploy.plugins.module_utils.repro_cli import (
    repro_executable,
    run_repro_json,
)


def _argv(module, executable):
    """repro's argv: every option first (each value its own word, taken as the value
    whatever it starts with), then `--`, then the bundle, so that a bundle path such as
    `-evil.tar` is a path and never an option of repro."""
    params = module.params
    argv = [executable, "unpack", "--target", params["target"], "--json"]
    flags = (
        ("offline", "--offline"),
        ("install_units", "--install-units"),
        ("cpu", "--cpu"),
        ("replace", "--replace"),
    )
    for name, flag in flags:
        if params[name]:
            argv.append(flag)
    if not params["smoke"]:
        argv.append("--no-smoke")
    argv += ["--installer", params["installer"]]
    for name, flag in (
        ("models", "--models"),
        ("allowed_signers", "--allowed-signers"),
        ("identity", "--identity"),
    ):
        if params[name]:
            argv += [flag, params[name]]
    if module.check_mode:
        argv.append("--dry-run")
    return [*argv, "--", params["bundle"]]


def _changes(upgrade):
    """repro's upgrade section as one list, a line per change."""
    if not upgrade:
        return []
    lines = [
        f"distribution: {d}"
        for kind in ("added", "removed", "changed")
        for d in upgrade["dists"][kind]
    ]
    lines += [f"patch taken back: {p}" for p in upgrade["patches"]["taken_back"]]
    lines += [f"patch applied: {p}" for p in upgrade["patches"]["applied"]]
    for section, label in (("files", "file"), ("units", "unit")):
        for kind in ("added", "changed", "removed"):
            lines += [f"{label} {kind}: {rel}" for rel in upgrade[section][kind]]
    if upgrade.get("models_changed"):
        lines.append("model references changed")
    return lines


def _plan_line(report):
    """The dry run's plan, or the upgrade step's line of a real run."""
    if report.get("plan"):
        return report["plan"]
    details = [s.get("detail", "") for s in report.get("steps", []) if s.get("name") == "upgrade"]
    return f"upgraded in place: {details[0]}" if details else "upgraded in place"


def _upgrade_diff(report, upgrade, changes):
    """The version before and after, and every change (repro's own plan line first)."""
    name = report.get("name", "")
    prepared = "".join(f"  {line}\n" for line in changes)
    return dict(
        before_header=f"{report.get('target', '')} (holds)",
        after_header=f"{report.get('target', '')} (after the upgrade)",
        before=f"{name} {upgrade['from']}\n",
        after=f"{name} {upgrade['to']}\n",
        prepared=f"{_plan_line(report)}\n{prepared}",
    )


def _units(report):
    for step in report.get("steps", []):
        if step.get("name") == "services" and step.get("status") == "done":
            return list(step.get("facts", {}).get("units", []))
    return []


def main():
    module = AnsibleModule(
        argument_spec=dict(
            bundle=dict(type="str", required=True),
            target=dict(type="path", required=True),
            offline=dict(type="bool", default=False),
            installer=dict(type="str", default="auto", choices=["auto", "vault", "uv", "pip"]),
            models=dict(type="path"),
            allowed_signers=dict(type="path"),
            identity=dict(type="str"),
            install_units=dict(type="bool", default=False),
            smoke=dict(type="bool", default=True),
            cpu=dict(type="bool", default=False),
            replace=dict(type="bool", default=False),
            executable=dict(type="path", default="repro"),
        ),
        required_by={"identity": ["allowed_signers"]},
        supports_check_mode=True,
    )
    executable = repro_executable(module)
    if not os.access(executable, os.X_OK):
        if module.check_mode:
            module.exit_json(
                changed=True,
                units=[],
                rc=0,
                msg=f"repro is not installed at {executable} yet; a real run would install it "
                "and unpack",
            )
        module.fail_json(
            msg=f"repro is not installed on this host ({executable}); the role "
            "repro.deploy.repro_deploy installs it from the bundle's setup_env.sh",
            rc=127,
        )
    bundle = module.params["bundle"]
    if module.check_mode and "://" not in bundle and bundle != "-" and not os.path.exists(bundle):
        module.exit_json(
            changed=True,
            units=[],
            rc=0,
            changes=[],
            msg=f"the bundle {bundle} is not on this host yet (check mode did not copy it); "
            "a real run would unpack it, no plan without it",
        )
    rc, report = run_repro_json(module, _argv(module, executable), "unpack", "report")
    upgrade = report.get("upgrade")
    result = dict(
        report=report,
        target=report.get("target", ""),
        venv=report.get("venv", ""),
        units=_units(report),
        upgrade=upgrade,
        changes=_changes(upgrade),
        rc=rc,
    )
    if module.check_mode:
        pending = report.get("pending") or []
        result.update(changed=bool(pending), plan=report.get("plan") or "", pending=pending)
        if module._diff and upgrade:
            result["diff"] = _upgrade_diff(report, upgrade, result["changes"])
        elif module._diff:
            steps = "".join(f"  - {step}\n" for step in pending)
            result["diff"] = dict(prepared=f"{report.get('plan') or ''}\n{steps}")
    else:
        result["changed"] = bool(report.get("changed"))
        if module._diff and upgrade:
            result["diff"] = _upgrade_diff(report, upgrade, result["changes"])
        elif module._diff and result["changed"]:
            done = [s for s in report.get("steps", []) if s.get("status") == "done"]
            lines = "".join(f"  {s['name']}: {s.get('detail', '')}\n" for s in done)
            name, target = report.get("name", ""), report.get("target", "")
            result["diff"] = dict(prepared=f"repro unpack {name} -> {target}\n{lines}")
    module.exit_json(**result)


if __name__ == "__main__":
    main()
