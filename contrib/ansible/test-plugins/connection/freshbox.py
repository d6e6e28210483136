# Test-only connection plugin: runs each command inside a bubblewrap "fresh box"
# (tests/support/freshbox.py), so an inventory of local hosts has really separate roots.
# Not part of the collection: the repro test suite points ANSIBLE_CONNECTION_PLUGINS here.

from __future__ import annotations

import json
import os
import shutil
import subprocess

from ansible.errors import AnsibleError
from ansible.module_utils.common.text.converters import to_bytes, to_text
from ansible.plugins.connection.local import Connection as LocalConnection

DOCUMENTATION = """
name: freshbox
short_description: run commands inside a bubblewrap box (repro tests only)
description:
  - Every command runs as C(bwrap ... -- /bin/sh -c CMD) with the box's argv prefix and
    environment from a JSON spec; files are put and fetched through the host directory
    that is the box's root inside.
options:
  box_spec:
    description: JSON file with argv (the bwrap prefix), env, root (host) and inner_root.
    vars:
      - name: freshbox_spec
"""


class Connection(LocalConnection):
    transport = "freshbox"

    def _spec(self) -> dict:
        with open(self.get_option("box_spec"), encoding="utf-8") as handle:
            return json.load(handle)

    def _host_path(self, inner: str) -> str:
        spec = self._spec()
        rel = os.path.relpath(os.path.normpath(inner), spec["inner_root"])
        if rel == ".." or rel.startswith("../"):
            raise AnsibleError(f"{inner} is outside the box's writable root")
        return os.path.join(spec["root"], rel)

    def exec_command(self, cmd, in_data=None, sudoable=True):
        spec = self._spec()
        setenv = [part for key, value in spec["env"].items() for part in ("--setenv", key, value)]
        argv = [*spec["argv"], *setenv, "--chdir", spec["inner_root"], "--", "/bin/sh", "-c"]
        argv.append(to_text(cmd))
        result = subprocess.run(
            argv,
            input=in_data if in_data is not None else b"",
            capture_output=True,
            env={"PATH": "/usr/bin:/bin"},
            timeout=1800,
            check=False,
        )
        return result.returncode, result.stdout, result.stderr

    def put_file(self, in_path, out_path):
        destination = self._host_path(out_path)
        shutil.copyfile(to_bytes(in_path), to_bytes(destination))

    def fetch_file(self, in_path, out_path):
        shutil.copyfile(to_bytes(self._host_path(in_path)), to_bytes(out_path))
