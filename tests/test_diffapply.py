from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from repro.diffapply import apply_unified_diff, unified_diff
from repro.errors import DiffApplyError

BASE = "".join(f"line {i}\n" for i in range(1, 41))


def _diff(a: str, b: str) -> str:
    return unified_diff(a, b, "f")


def _edit(text: str, **repl: str) -> str:
    for old, new in repl.items():
        text = text.replace(old.replace("_", " ") + "\n", new)
    return text


CASES = {
    "change_middle": _edit(BASE, line_20="line twenty\n"),
    "insert_start": "header\n" + BASE,
    "delete_end": BASE.replace("line 40\n", ""),
    "two_hunks": _edit(BASE, line_3="three\n", line_35="thirty five\nextra\n"),
    "no_newline_at_end": BASE.rstrip("\n"),
    "empty_to_text": BASE + "tail\nmore\n",
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_applies_exact(name: str) -> None:
    patched = CASES[name]
    assert apply_unified_diff(BASE, _diff(BASE, patched)) == patched


def test_applies_at_offset_on_drifted_target() -> None:
    patched = _edit(BASE, line_20="line twenty\n")
    drifted = "new first line\nanother\n" + BASE
    result = apply_unified_diff(drifted, _diff(BASE, patched))
    assert result == "new first line\nanother\n" + patched


def test_conflict_when_context_changed() -> None:
    patched = _edit(BASE, line_20="line twenty\n")
    drifted = BASE.replace("line 19\n", "line nineteen\n")
    with pytest.raises(DiffApplyError, match="hunk 1"):
        apply_unified_diff(drifted, _diff(BASE, patched))


@pytest.mark.parametrize("name", sorted(CASES))
def test_same_result_as_gnu_patch(name: str, tmp_path: Path) -> None:
    tool = shutil.which("patch")
    if tool is None:
        pytest.fail("GNU patch is expected on this machine")
    # Drift between the hunks: GNU patch anchors hunks that touch the start or the
    # end of a file, and repro does not, so drift there is a case of its own above.
    drifted = BASE.replace("line 12\n", "line 12\ndrift\n")
    target = tmp_path / "f"
    target.write_text(drifted)
    diff = _diff(BASE, CASES[name])
    subprocess.run([tool, "-s", "-F0", str(target)], input=diff.encode(), check=True)
    assert apply_unified_diff(drifted, diff) == target.read_text()
