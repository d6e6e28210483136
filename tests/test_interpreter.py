"""The target side: the scripts repro runs with the target's interpreter, and the one runner.

Every script of `repro/probe/` and `repro/ladder/scripts/` parses as Python 3.8 (the
oldest target the docs promise), imports nothing of repro, and (probe/) nothing outside
the standard library. `run_target_script` is tested with real interpreters: a venv whose
`.pth` file records what the child saw (isolation, site processing, environment).
"""

from __future__ import annotations

import ast
import json
import os
import platform
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

import repro
from repro.errors import InstallError, PreflightError, ProbeError, ReproError
from repro.interpreter import PROBE_DIR, probe_script, run_target_script, target_env

ROOT = Path(repro.__file__).resolve().parent
SCRIPT_DIRS = (ROOT / "probe", ROOT / "ladder" / "scripts")
SCRIPTS = sorted(p for d in SCRIPT_DIRS for p in d.glob("*.py"))
PROBE_SCRIPTS = sorted(p for p in PROBE_DIR.glob("*.py") if p.name != "__init__.py")
OLDEST = (3, 8)
# Subscripted builtins (PEP 585) and `X | Y` (PEP 604) raise when 3.8 evaluates them:
# in a signature or a module-level annotation, unless annotations are postponed.
BUILTIN_GENERICS = {"list", "dict", "tuple", "set", "frozenset", "type"}


def _rel(path: Path) -> str:
    return path.relative_to(ROOT.parent).as_posix()


def parses_as_38(text: str) -> bool:
    try:
        ast.parse(text, feature_version=OLDEST)
    except SyntaxError:
        return False
    return True


def evaluated_annotations(tree: ast.Module) -> list[ast.expr]:
    """The annotations Python 3.8 evaluates when the module runs: of every function's
    arguments and return, and of module- and class-level variables (not locals)."""
    found: list[ast.expr] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            args = node.args
            every = [*args.posonlyargs, *args.args, *args.kwonlyargs]
            every += [a for a in (args.vararg, args.kwarg) if a is not None]
            found += [a.annotation for a in every if a.annotation is not None]
            if node.returns is not None:
                found.append(node.returns)
        elif isinstance(node, ast.Module | ast.ClassDef):
            found += [s.annotation for s in node.body if isinstance(s, ast.AnnAssign)]
    return found


def too_new_for_38(annotation: ast.expr) -> list[str]:
    problems = []
    for node in ast.walk(annotation):
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.BitOr):
            problems.append(f"line {node.lineno}: `X | Y`")
        if (
            isinstance(node, ast.Subscript)
            and isinstance(node.value, ast.Name)
            and node.value.id in BUILTIN_GENERICS
        ):
            problems.append(f"line {node.lineno}: `{node.value.id}[...]`")
    return problems


def postpones_annotations(tree: ast.Module) -> bool:
    return any(
        isinstance(s, ast.ImportFrom)
        and s.module == "__future__"
        and any(a.name == "annotations" for a in s.names)
        for s in tree.body
    )


def imported_modules(tree: ast.Module) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module)
        elif isinstance(node, ast.ImportFrom):
            names.add("." * node.level + (node.module or ""))
    return names


def test_there_are_target_scripts_in_both_folders() -> None:
    assert {p.parent for p in SCRIPTS} == set(SCRIPT_DIRS)
    assert {"environment.py", "freeze.py", "venv_site.py"} <= {p.name for p in PROBE_SCRIPTS}


@pytest.mark.parametrize("script", SCRIPTS, ids=_rel)
def test_every_target_script_parses_as_python_38(script: Path) -> None:
    text = script.read_text(encoding="utf-8")
    try:
        ast.parse(text, filename=str(script), feature_version=OLDEST)
    except SyntaxError as exc:
        pytest.fail(f"{_rel(script)}:{exc.lineno}: not Python 3.8: {exc.msg}")
    tree = ast.parse(text)
    if not postpones_annotations(tree):
        problems = [p for a in evaluated_annotations(tree) for p in too_new_for_38(a)]
        assert not problems, f"{_rel(script)}: annotations 3.8 cannot evaluate: {problems}"


@pytest.mark.parametrize(
    "sample",
    [
        "match command:\n    case 'go':\n        pass\n",
        "with (open('a') as a, open('b') as b):\n    pass\n",
    ],
    ids=["match", "parenthesised-with"],
)
def test_the_parse_check_refuses_what_38_cannot_parse(sample: str) -> None:
    ast.parse(sample)  # this interpreter takes it
    assert not parses_as_38(sample)
    assert parses_as_38("if (n := 10) > 5:\n    pass\n")  # 3.8 has the walrus


def test_the_annotation_check_finds_what_38_cannot_evaluate() -> None:
    tree = ast.parse(
        "def f(a: list[int], b: 'str | None' = None) -> int | None: ...\n"
        "X: dict[str, int] = {}\n"
        "def g() -> None:\n    local: list[int] = []\n"
    )
    problems = [p for a in evaluated_annotations(tree) for p in too_new_for_38(a)]
    assert sorted(problems) == ["line 1: `X | Y`", "line 1: `list[...]`", "line 2: `dict[...]`"]


@pytest.mark.parametrize("script", SCRIPTS, ids=_rel)
def test_every_target_script_imports_nothing_of_repro(script: Path) -> None:
    imported = imported_modules(ast.parse(script.read_text(encoding="utf-8")))
    ours = sorted(n for n in imported if n == "repro" or n.startswith(("repro.", ".")))
    assert not ours, f"{_rel(script)} imports {ours}"


@pytest.mark.parametrize("script", PROBE_SCRIPTS, ids=_rel)
def test_every_probe_script_imports_only_the_standard_library(script: Path) -> None:
    imported = imported_modules(ast.parse(script.read_text(encoding="utf-8")))
    outside = sorted(n for n in imported if n.split(".")[0] not in sys.stdlib_module_names)
    assert not outside, f"{_rel(script)} imports {outside}"


def test_probe_script_finds_the_files_of_repro_probe_only() -> None:
    assert probe_script("environment.py") == PROBE_DIR / "environment.py"
    assert probe_script("environment.py").is_file()
    for name in ("nope.py", "../interpreter.py", "__pycache__"):
        with pytest.raises(ValueError, match="no target-side script"):
            probe_script(name)


def test_target_env_keeps_path_and_the_loader_path_and_fixes_the_locale() -> None:
    environ = {"PATH": "/x/bin", "LD_LIBRARY_PATH": "/x/lib", "HOME": "/h", "LANG": "de_DE"}
    environ |= {"PYTHONPATH": "/p", "VIRTUAL_ENV": "/v", "PIP_INDEX_URL": "http://i"}
    assert target_env(environ) == {
        "PATH": "/x/bin",
        "LD_LIBRARY_PATH": "/x/lib",
        "LC_ALL": "C.UTF-8",
    }
    assert target_env({}) == {"PATH": os.defpath, "LC_ALL": "C.UTF-8"}


# A .pth file runs whenever site processing does: it records what the child saw.
OBSERVER = (
    "import json, os, sys; "
    "open({out!r}, 'w').write(json.dumps("
    "{{'isolated': sys.flags.isolated, 'no_site': sys.flags.no_site, "
    "'env': dict(os.environ), 'path': sys.path}}))\n"
)


@pytest.fixture(scope="module")
def venv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("target") / "venv"
    subprocess.run(
        [sys.executable, "-m", "venv", "--without-pip", str(root)], check=True, timeout=120
    )
    return root


def _site_packages(venv: Path) -> Path:
    (found,) = venv.glob("lib/python*/site-packages")
    return found


@pytest.fixture
def observed(venv: Path, tmp_path: Path) -> Iterator[Path]:
    """Where the venv's interpreter writes what it saw, when its site processing runs."""
    out = tmp_path / "observed.json"
    pth = _site_packages(venv) / "observe.pth"
    pth.write_text(OBSERVER.format(out=str(out)))
    yield out
    pth.unlink()


def test_site_true_runs_isolated_with_the_minimal_environment(
    venv: Path, observed: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("REPRO_TEST_PARENT_ONLY", "1")
    monkeypatch.setenv("PYTHONPATH", "/nowhere")
    proc = run_target_script(venv / "bin" / "python", "scheme.py", timeout=60, site=True)
    assert proc.returncode == 0, proc.stderr
    seen = json.loads(observed.read_text())
    assert seen["isolated"] == 1 and seen["no_site"] == 0
    assert seen["env"] == target_env()
    assert "REPRO_TEST_PARENT_ONLY" not in seen["env"]
    assert "/nowhere" not in seen["path"]
    # site on: sys.prefix is the venv's, so is its install scheme
    assert json.loads(proc.stdout)["purelib"] == str(_site_packages(venv))


def test_an_environment_given_is_the_childs_whole_environment(venv: Path, observed: Path) -> None:
    env = {"PATH": os.defpath, "REPRO_TEST_PASSED": "yes"}
    proc = run_target_script(venv / "bin" / "python", "scheme.py", timeout=60, site=True, env=env)
    assert proc.returncode == 0, proc.stderr
    seen = json.loads(observed.read_text())
    assert seen["isolated"] == 1
    assert {k: v for k, v in seen["env"].items() if k != "LC_CTYPE"} == env


def test_without_site_nothing_of_site_packages_runs(venv: Path, observed: Path) -> None:
    proc = run_target_script(venv / "bin" / "python", "venv_site.py", ["dirs"], timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert not observed.exists()  # the .pth never ran
    # the venv found from the interpreter's location, not from site.py's sys.prefix
    assert json.loads(proc.stdout) == [str(_site_packages(venv))]


def test_a_timeout_raises_the_error_class_naming_interpreter_and_script(venv: Path) -> None:
    pth = _site_packages(venv) / "slow.pth"
    pth.write_text("import time; time.sleep(30)\n")
    python = venv / "bin" / "python"
    try:
        with pytest.raises(InstallError) as caught:
            run_target_script(
                python, "scheme.py", timeout=1, site=True, error=InstallError, timeout_hint="wait"
            )
    finally:
        pth.unlink()
    assert caught.value.message == f"{python} scheme.py: did not finish within 1s"
    assert caught.value.hint == "wait"
    assert caught.value.exit_code == InstallError.exit_code


@pytest.mark.parametrize("error", [ProbeError, InstallError, PreflightError])
def test_an_interpreter_that_cannot_start_raises_the_error_class(
    tmp_path: Path, error: type[ReproError]
) -> None:
    missing = tmp_path / "nope" / "python"
    with pytest.raises(error, match=f"cannot run {missing} markers.py: "):
        run_target_script(missing, "markers.py", timeout=10, error=error)
    not_executable = tmp_path / "python"
    not_executable.write_text("")
    with pytest.raises(error, match=f"cannot run {not_executable} markers.py: "):
        run_target_script(not_executable, "markers.py", timeout=10, error=error)


def test_the_default_error_is_probe_error_and_a_failing_script_is_returned(
    tmp_path: Path,
) -> None:
    with pytest.raises(ProbeError):
        run_target_script(tmp_path / "python", "markers.py", timeout=10)
    proc = run_target_script(Path(sys.executable), "venv_site.py", ["unknown"], timeout=60)
    assert proc.returncode == 2
    assert "usage: venv_site.py" in proc.stderr


# Each target-side script run for real through the runner, with this interpreter.
def test_every_probe_script_runs_through_the_runner(tmp_path: Path) -> None:
    python = Path(sys.executable)
    bad, good = tmp_path / "0.py", tmp_path / "1.py"
    bad.write_text("def f(:\n")
    good.write_text("x = 1\n")
    items = json.dumps([["pkg/bad.py", str(bad)], ["pkg/good.py", str(good)]])
    runs = {
        "environment.py": run_target_script(
            python, "environment.py", ["--no-imports"], timeout=120, site=True
        ),
        "freeze.py": run_target_script(python, "freeze.py", timeout=120, site=True),
        "scheme.py": run_target_script(python, "scheme.py", timeout=60, site=True),
        "markers.py": run_target_script(python, "markers.py", timeout=60),
        "tag_facts.py": run_target_script(python, "tag_facts.py", timeout=60),
        "python_facts.py": run_target_script(python, "python_facts.py", timeout=60),
        "venv_site.py": run_target_script(python, "venv_site.py", ["scheme", "/x"], timeout=60),
        "compile_check.py": run_target_script(python, "compile_check.py", timeout=60, input=items),
        "bytecode.py": run_target_script(python, "bytecode.py", ["1", str(tmp_path)], timeout=60),
    }
    assert set(runs) == {p.name for p in PROBE_SCRIPTS}
    for name, proc in runs.items():
        assert proc.returncode == 0, f"{name}: {proc.stderr}"
    assert "pytest==" in runs["freeze.py"].stdout
    assert json.loads(runs["environment.py"].stdout)["modules"] == []
    facts = json.loads(runs["python_facts.py"].stdout)
    assert facts["version"] == platform.python_version()
    assert json.loads(runs["markers.py"].stdout)["python_full_version"] == facts["version"]
    assert json.loads(runs["tag_facts.py"].stdout)["python_version"] == list(sys.version_info[:2])
    assert json.loads(runs["venv_site.py"].stdout)["prefix"] == "/x"
    errors = json.loads(runs["compile_check.py"].stdout)
    assert [(e["path"], e["line"]) for e in errors] == [("pkg/bad.py", 1)]
    compiled = json.loads(runs["bytecode.py"].stdout)
    assert compiled == {"files": 2, "compiled": 1, "left": [str(bad)]}
