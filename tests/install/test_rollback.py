"""`repro rollback TARGET [VERSION]` through the real CLI: its dry run (the plan, refused
where the real run would be, nothing written) and its idempotence (a target that
already holds VERSION has nothing to do). Real bundles of a real venv packed twice
(tests/support/upgrades.py), unpacked offline."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.support.run import run_repro
from tests.support.upgrades import UpgradePair, differences, ok, tree, unpack

pytestmark = pytest.mark.slow


def _rollback(target: Path, *args: str) -> dict[str, object]:
    result: dict[str, object] = json.loads(ok(run_repro("rollback", str(target), *args, "--json")))
    return result


def test_dry_run_plans_and_writes_nothing_then_version_twice_changes_once(
    pair: UpgradePair, tmp_path: Path
) -> None:
    target = tmp_path / "t"
    ok(unpack(pair.v1, target))
    v1 = tree(target)
    ok(unpack(pair.v2, target))
    upgraded = tree(target)

    plan = _rollback(target, "1", "--dry-run")
    assert plan["dry_run"] is True and plan["changed"] is True, plan
    assert (plan["from"], plan["version"], plan["undone"]) == ("2", "1", ["1"])
    assert plan["releases_left"] == []
    assert differences(tree(target), upgraded) == []  # nothing written, not even a lock
    said = run_repro("rollback", str(target), "--dry-run")
    ok(said)
    assert "would hold 1 (from 2; undone: 1)" in said.stderr.decode()

    done = _rollback(target, "1")
    assert (done["changed"], done["from"], done["version"]) == (True, "2", "1"), done
    assert differences(tree(target), v1) == []
    ok(run_repro("verify", str(target)))

    # the same command again: it already holds 1, nothing to do, exit 0
    for args in (("1",), ("1", "--dry-run")):
        again = _rollback(target, *args)
        assert again["changed"] is False and again["undone"] == [], again
        assert differences(tree(target), v1) == []
    # without a version there is no release left to go back to: refused as before
    refused = run_repro("rollback", str(target))
    assert refused.returncode == 2 and "no release to go back to" in refused.stderr.decode()


def test_dry_run_refuses_as_the_real_run_would(pair: UpgradePair, tmp_path: Path) -> None:
    target = tmp_path / "t"
    ok(unpack(pair.v1, target))
    ok(unpack(pair.v2, target))
    (target / "bench" / "run.sh").write_text("#!/bin/sh\necho edited\n")
    before = tree(target)
    drifted = run_repro("rollback", str(target), "--dry-run")
    assert drifted.returncode == 1, drifted.stderr.decode()
    assert "bench/run.sh" in drifted.stderr.decode()
    missing = run_repro("rollback", str(target), "7", "--dry-run", "--force")
    assert missing.returncode == 2, missing.stderr.decode()
    assert "no release 7 to go back to (kept: 1)" in missing.stderr.decode()
    forced = _rollback(target, "--dry-run", "--force")
    assert forced["undone"] == ["1"] and forced["overwritten"], forced
    assert differences(tree(target), before) == []
