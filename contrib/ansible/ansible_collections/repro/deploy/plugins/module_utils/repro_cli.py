"""What the collection's modules share: the repro on the host, and one run of it whose
JSON result is read, or whose error is said as repro said it."""

import json
import os


def repro_executable(module):
    """The `executable` parameter as a path: a bare name looked up on the host's PATH."""
    executable = module.params["executable"]
    if os.sep not in executable:
        executable = module.get_bin_path(executable) or executable
    return executable


def error_message(stderr, rc, command):
    """repro's error and hint lines: what the operator acts on (progress lines left out)."""
    lines = [line.rstrip() for line in stderr.splitlines() if line.strip()]
    for index, line in enumerate(lines):
        if line.startswith(("error:", "repro: error:")):
            return "\n".join(lines[index:])
    return "\n".join(lines[-20:]) or f"repro {command} failed with exit code {rc}"


def run_repro_json(module, argv, command, printed):
    """Run `argv` (repro `command` with --json); its exit code and its JSON `printed`
    (a "report", a "result"). A failure fails the task with repro's own message."""
    rc, stdout, stderr = module.run_command(argv, environ_update={"NO_COLOR": "1"})
    if rc != 0:
        module.fail_json(
            msg=error_message(stderr, rc, command), rc=rc, stdout=stdout, stderr=stderr
        )
    try:
        return rc, json.loads(stdout)
    except ValueError as exc:
        module.fail_json(
            msg=f"repro {command} printed no JSON {printed}: {exc}",
            rc=rc,
            stdout=stdout,
            stderr=stderr,
        )
