"""repro/probe/compile_check.py: patched files compiled by the target's interpreter,
whose grammar may differ from ours; errors named by the file's site-packages path."""

from __future__ import annotations

import json
from pathlib import Path

from repro.interpreter import run_target_script
from tests.probe.conftest import interpreter


def _check(python: Path, files: dict[str, str], where: Path) -> list[dict[str, object]]:
    items = []
    for name, text in files.items():
        path = where / name.replace("/", "_")
        path.write_text(text)
        items.append([name, str(path)])
    proc = run_target_script(python, "compile_check.py", timeout=60, input=json.dumps(items))
    assert proc.returncode == 0, proc.stderr
    result: list[dict[str, object]] = json.loads(proc.stdout)
    return result


def test_good_files_pass_and_broken_ones_are_named(python: Path, tmp_path: Path) -> None:
    errors = _check(
        python,
        {
            "pkg/ok.py": "x = 1\n",
            "pkg/broken.py": "def f(:\n    pass\n",
            "pkg/nul.py": "x = '\0'\n",
        },
        tmp_path,
    )
    # A NUL byte is refused by compile() itself (ValueError before 3.12, SyntaxError since).
    assert [e["path"] for e in errors] == ["pkg/broken.py", "pkg/nul.py"]
    assert errors[0]["line"] == 1


def test_the_targets_grammar_decides(tmp_path: Path) -> None:
    """A `match` statement (3.10) compiles on 3.10 and 3.12; the grammar judged is the
    target's, so a patch written for a newer Python than the target's is caught."""
    text = "match 1:\n    case 1:\n        pass\n"
    assert _check(interpreter("3.10"), {"m.py": text}, tmp_path) == []
    # `type X = int` is 3.12 grammar: the 3.10 and 3.11 targets refuse it.
    new = "type Alias = int\n"
    assert _check(interpreter("3.12"), {"n.py": new}, tmp_path) == []
    for version in ("3.10", "3.11"):
        errors = _check(interpreter(version), {"n.py": new}, tmp_path)
        assert [e["path"] for e in errors] == ["n.py"], version
