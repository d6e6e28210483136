#!/usr/bin/python
# Runs on the managed host: `repro rollback TARGET VERSION --json`, with `changed`
# taken from repro's own result.

from __future__ import annotations

DOCUMENTATION = r"""
---
module: repro_rollback
short_description: Return a target upgraded in place to a release it kept, with repro rollback
version_added: "0.2.0"
description:
  - Runs C(repro rollback TARGET VERSION --json) on the managed host. An upgrade in
    place (M(repro.deploy.repro_unpack) of a newer bundle or a delta) keeps what it
    replaced as a release under C(TARGET/.repro/releases/); the rollback undoes the
    releases down to I(version), so the target is file for file what it was, and
    C(repro verify TARGET) agrees.
  - I(version) is the version the host must hold, so the task is idempotent - a target
    that already holds it reports C(ok) and nothing is touched. (A bare
    C(repro rollback TARGET) undoes one more release each time it runs, which is not
    a state a task can declare.)
  - In check mode the module runs C(repro rollback --dry-run), which writes nothing;
    C(changed) says whether a real run would roll back, and with C(--diff) the version
    before and after and the releases undone are the diff. A check-mode run fails
    where the real run would (drift, no such release).
  - A failure fails the task with repro's own message and exit code - 1 the target
    drifted since it was unpacked (C(repro verify TARGET) lists it; I(force) throws it
    away), 2 not a target, no release I(version) kept, or another run holds its lock.
  - A rollback or an upgrade that was cut short (killed) is finished by the next run,
    which reports C(changed) and stops there; run the task again to reach I(version).
options:
  target:
    description: The directory C(repro unpack --target) upgraded in place.
    type: path
    required: true
  version:
    description:
      - The bundle version the target must hold, one of the releases it kept (see
        C(ls TARGET/.repro/releases)), or the version it holds already.
      - Passed to repro after C(--), so a version that begins with C(-) is never an option.
    type: str
    required: true
  force:
    description:
      - Roll back a target that drifted since it was unpacked; repro names every
        difference it throws away.
    type: bool
    default: false
  executable:
    description: The repro command on the host.
    type: path
    default: repro
notes:
  - Check mode is supported (C(repro rollback --dry-run)); diff mode shows the versions
    and the releases undone.
  - Restarting services after a rollback is the playbook's part (a handler notified by this task).
attributes:
  check_mode:
    support: full
  diff_mode:
    support: full
author:
  - repro contributors
"""

EXAMPLES = r"""
- name: Back to dflash 4 (nothing to do where the host holds it already)
  repro.deploy.repro_rollback:
    target: /srv/dflash
    version: "4"
    executable: /opt/repro/tool/bin/repro
  register: rolled_back

- name: Restart the server where it was rolled back
  ansible.builtin.systemd_service:
    name: dflash.service
    state: restarted
  when: rolled_back is changed
"""

RETURN = r"""
version:
  description: The version the target holds after the run (check mode, would hold).
  returned: when repro ran to the end
  type: str
held:
  description: The version the target held before the run.
  returned: when repro ran to the end
  type: str
undone:
  description: The releases undone (check mode, that would be), newest first.
  returned: when repro ran to the end
  type: list
  elements: str
releases_left:
  description: The releases still kept afterwards.
  returned: when repro ran to the end
  type: list
  elements: str
result:
  description:
    - repro's JSON result (target, from, version, changed, undone, releases_left,
      overwritten, finished_interrupted, dry_run).
  returned: when repro ran to the end
  type: dict
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


def _diff(result):
    undone = "".join(f"  undo release {version}\n" for version in result["undone"])
    target = result["target"]
    return dict(
        before_header=f"{target} (holds)",
        after_header=f"{target} (after the rollback)",
        before=f"{result['from']}\n",
        after=f"{result['version']}\n",
        prepared=undone or "  finish a rollback or an upgrade cut short\n",
    )


def main():
    module = AnsibleModule(
        argument_spec=dict(
            target=dict(type="path", required=True),
            version=dict(type="str", required=True),
            force=dict(type="bool", default=False),
            executable=dict(type="path", default="repro"),
        ),
        supports_check_mode=True,
    )
    params = module.params
    executable = repro_executable(module)
    if not os.access(executable, os.X_OK):
        module.fail_json(
            msg=f"repro is not installed on this host ({executable}); a target to roll back "
            "is one repro unpacked, so give `executable` where that repro is",
            rc=127,
        )
    if not os.path.isdir(params["target"]):
        module.fail_json(
            msg=f"{params['target']} is not a directory on this host: nothing repro unpacked "
            "to roll back (check `target`)",
            rc=2,
        )
    argv = [executable, "rollback", "--json"]
    if params["force"]:
        argv.append("--force")
    if module.check_mode:
        argv.append("--dry-run")
    argv += ["--", params["target"], params["version"]]
    rc, result = run_repro_json(module, argv, "rollback", "result")
    changed = bool(result.get("changed"))
    output = dict(
        changed=changed,
        version=result.get("version", ""),
        held=result.get("from", ""),
        undone=list(result.get("undone", [])),
        releases_left=list(result.get("releases_left", [])),
        result=result,
        rc=rc,
    )
    if module._diff and changed:
        output["diff"] = _diff(result)
    module.exit_json(**output)


if __name__ == "__main__":
    main()
