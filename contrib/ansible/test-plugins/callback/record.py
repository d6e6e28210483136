# Test-only callback plugin: writes every task result and the final stats as one JSON
# document to $REPRO_ANSIBLE_RECORD (ansible-core has no json callback of its own).
# Not part of the collection: the repro test suite enables it.

from __future__ import annotations

import json
import os
import time

from ansible.plugins.callback import CallbackBase

DOCUMENTATION = """
name: record
type: aggregate
short_description: record task results as JSON (repro tests only)
description:
  - Writes every task result (with its seconds, host by host) and the final stats to the
    file named by REPRO_ANSIBLE_RECORD.
"""


class CallbackModule(CallbackBase):
    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = "aggregate"
    CALLBACK_NAME = "record"
    CALLBACK_NEEDS_ENABLED = True

    def __init__(self):
        super().__init__()
        self.results = []
        self.started = {}

    def v2_runner_on_start(self, host, task):
        self.started[(host.get_name(), task._uuid)] = time.monotonic()

    def _add(self, result, status):
        host = result._host.get_name()
        start = self.started.pop((host, result._task._uuid), None)
        self.results.append(
            {
                "task": result._task.get_name(),
                "host": host,
                "status": status,
                "seconds": None if start is None else round(time.monotonic() - start, 2),
                "result": result._result,
            }
        )

    def v2_runner_on_ok(self, result):
        self._add(result, "changed" if result._result.get("changed") else "ok")

    def v2_runner_on_failed(self, result, ignore_errors=False):
        self._add(result, "failed")

    def v2_runner_on_skipped(self, result):
        self._add(result, "skipped")

    def v2_playbook_on_stats(self, stats):
        summary = {host: stats.summarize(host) for host in sorted(stats.processed)}
        with open(os.environ["REPRO_ANSIBLE_RECORD"], "w", encoding="utf-8") as handle:
            json.dump({"results": self.results, "stats": summary}, handle, default=str)
