"""Every verb maps every outcome to README's exit-code table, through the real CLI.

0 success, 1 verification or preflight failed, 2 usage error or unreadable input,
3 install failed, 4 patch conflict, 5 smoke ladder failed. The inputs are real: a
workspace whose venv holds six with a hand patch, bundles packed from it (its wheels
inside, or not; with a ladder whose server exits at once), a tampered copy whose
manifest was not updated, one re-manifested around a wrong pristine hash, targets that
`repro unpack` rebuilt (clean, drifted, unpatched).
"""

from __future__ import annotations

import ast
import builtins
import shutil
import tarfile
from dataclasses import dataclass
from pathlib import Path

import pytest

from repro import errors
from repro.bundle.manifesttree import write_manifest
from tests.support.bundles import tamper
from tests.support.run import run, run_repro
from tests.support.venvs import find_python

pytestmark = pytest.mark.slow

FAILING_LAUNCH = "python -c 'raise SystemExit(3)'"
SMOKE_PORT = 39187


@dataclass(frozen=True)
class Inputs:
    paths: dict[str, Path]

    def fill(self, argv: tuple[str, ...], tmp: Path) -> list[str]:
        names = {key: str(path) for key, path in self.paths.items()}
        return [part.format(tmp=tmp, **names) for part in argv]


def _repro_ok(*argv: str) -> None:
    result = run_repro(*argv)
    assert result.returncode == 0, f"{argv}: {result.stderr.decode()}"


def _workspace(root: Path, repro_toml: str, patch: str = "PATCHED = 1\n") -> Path:
    root.mkdir(parents=True)
    venv = root / ".venv"
    run([str(find_python("3.11")), "-m", "venv", str(venv)])
    run([str(venv / "bin" / "python"), "-m", "pip", "install", "-q", "six==1.16.0"])
    (six,) = venv.glob("lib/python3.11/site-packages/six.py")
    six.write_text(six.read_text() + patch)
    (root / "repro.toml").write_text(repro_toml)
    return root


def _pack(workspace: Path, out: Path, *extra: str) -> Path:
    _repro_ok("pack", str(workspace), "-o", str(out), "--name", "demo", *extra)
    return out


def _unpack(bundle: Path, target: Path) -> Path:
    _repro_ok("unpack", str(bundle), "--target", str(target), "--offline", "--cpu", "--no-smoke")
    return target


def _conflicting(bundle: Path, into: Path) -> Path:
    """The bundle extracted, patches.toml naming another pristine hash for six.py and
    its diff another context, the manifest written again: it verifies, and its patch
    matches neither the installed file nor, through the diff, its lines."""
    into.mkdir()
    with tarfile.open(bundle) as archive:
        archive.extractall(into, filter="data")
    (top,) = into.iterdir()
    toml = top / "patches" / "patches.toml"
    text = toml.read_text()
    start = text.index('pristine_sha256 = "') + len('pristine_sha256 = "')
    toml.write_text(text[:start] + "0" * 64 + text[start + 64 :])
    diff = top / "patches" / "diffs" / "six" / "six.py.diff"
    diff.write_text(diff.read_text().replace("append(_importer)", "append(_not_there)"))
    (top / "MANIFEST.sha256").unlink()
    write_manifest(top)
    return top


@pytest.fixture(scope="module")
def inputs(tmp_path_factory: pytest.TempPathFactory) -> Inputs:
    root = tmp_path_factory.mktemp("exit-codes")
    ws = _workspace(root / "ws", "")
    bundles = root / "bundles"
    bundles.mkdir()
    good = _pack(ws, bundles / "demo-1.tar", "--version", "1", "--wheels", "all")
    # a bundle of another name: refused over demo's target (another version of demo
    # would upgrade it in place: tests/install/test_upgrade.py)
    other = _pack(
        ws, bundles / "other-2.tar", "--name", "other", "--version", "2", "--wheels", "all"
    )
    no_wheels = _pack(ws, bundles / "nowheels-1.tar", "--version", "1")
    smoke_ws = _workspace(
        root / "smoke-ws",
        f'[launch]\ncommands = ["{FAILING_LAUNCH}"]\n\n'
        f'[ladder]\nrungs = ["python", "server"]\ntimeout = 5\nport = {SMOKE_PORT}\n',
        patch="PATCHED = 2\n",
    )
    failing_smoke = _pack(smoke_ws, bundles / "smoke-1.tar", "--version", "1", "--wheels", "all")
    tampered = tamper(good, bundles / "tampered.tar", "env/pip-freeze.txt", b"six==9.9.9\n")
    truncated = bundles / "truncated.tar"
    truncated.write_bytes(good.read_bytes()[:5000])

    targets = root / "targets"
    clean = _unpack(good, targets / "clean")
    drifted = _unpack(good, targets / "drifted")
    (six,) = drifted.glob(".venv/lib/python3.11/site-packages/six.py")
    six.write_text(six.read_text() + "EDITED_ON_THE_TARGET = 1\n")
    to_unpatch = _unpack(good, targets / "to-unpatch")
    unpatched = _unpack(good, targets / "unpatched")
    _repro_ok("unpatch", str(unpatched))
    venv_gone = _unpack(good, targets / "venv-gone")
    shutil.rmtree(venv_gone / ".venv")

    empty_venv = root / "empty-venv"
    run([str(find_python("3.11")), "-m", "venv", "--without-pip", str(empty_venv)])
    not_a_target = root / "not-a-target"
    not_a_target.mkdir()
    return Inputs(
        {
            "ws": ws,
            "venv": ws / ".venv",
            "good": good,
            "other": other,
            "no_wheels": no_wheels,
            "failing_smoke": failing_smoke,
            "tampered": tampered,
            "conflicting": _conflicting(good, root / "conflicting"),
            "truncated": truncated,
            "clean": clean,
            "drifted": drifted,
            "to_unpatch": to_unpatch,
            "unpatched": unpatched,
            "venv_gone": venv_gone,
            "empty_venv": empty_venv,
            "not_a_target": not_a_target,
            "missing": root / "no-such-thing",
        }
    )


OK, INVALID, USAGE, INSTALL, CONFLICT, SMOKE = 0, 1, 2, 3, 4, 5

CASES: list[tuple[str, tuple[str, ...], int]] = [
    # check
    ("check-bundle", ("check", "{good}"), OK),
    ("check-tampered", ("check", "{tampered}"), INVALID),
    ("check-missing", ("check", "{missing}"), USAGE),
    ("check-truncated", ("check", "{truncated}"), USAGE),
    ("check-bad-jobs", ("check", "-j", "0", "{good}"), USAGE),
    # inspect
    ("inspect-bundle", ("inspect", "{good}"), OK),
    ("inspect-tampered", ("inspect", "{tampered}"), INVALID),
    ("inspect-missing", ("inspect", "{missing}"), USAGE),
    ("inspect-truncated", ("inspect", "{truncated}"), USAGE),
    ("inspect-file-and-json", ("inspect", "{good}", "--file", "bundle.toml", "--json"), USAGE),
    # diff
    ("diff-identical", ("diff", "{good}", "{good}"), OK),
    ("diff-different", ("diff", "{good}", "{failing_smoke}"), INVALID),
    ("diff-missing", ("diff", "{good}", "{missing}"), USAGE),
    ("diff-no-second", ("diff", "{good}"), USAGE),
    # scan
    ("scan-clean", ("scan", "--python", "{empty_venv}"), OK),
    ("scan-patched", ("scan", "--python", "{venv}"), INVALID),
    ("scan-missing", ("scan", "--venv", "{missing}"), USAGE),
    ("scan-not-a-venv", ("scan", "--python", "{not_a_target}"), USAGE),
    # smoke
    ("smoke-pass", ("smoke", "--python", "{venv}", "--rungs", "python", "--cpu"), OK),
    (
        "smoke-server-exits",
        (
            "smoke",
            "--python",
            "{venv}",
            "--rungs",
            "server",
            "--launch",
            FAILING_LAUNCH,
            "--port",
            str(SMOKE_PORT),
            "--timeout",
            "5",
        ),
        SMOKE,
    ),
    ("smoke-unknown-rung", ("smoke", "--python", "{venv}", "--rungs", "nope"), USAGE),
    ("smoke-all-skipped", ("smoke", "--python", "{venv}", "--rungs", "nccl", "--cpu"), SMOKE),
    ("smoke-missing", ("smoke", "--python", "{missing}"), USAGE),
    # unpack
    ("unpack-ok", ("unpack", "{good}", "--target", "{tmp}/t", "--offline", "--cpu"), OK),
    ("unpack-again", ("unpack", "{good}", "--target", "{clean}", "--offline", "--cpu"), OK),
    ("unpack-tampered", ("unpack", "{tampered}", "--target", "{tmp}/t", "--offline"), INVALID),
    ("unpack-missing", ("unpack", "{missing}", "--target", "{tmp}/t"), USAGE),
    (
        "unpack-python-is-a-venv",
        (
            "unpack",
            "{good}",
            "--target",
            "{tmp}/t",
            "--offline",
            "--cpu",
            "--no-smoke",
            "--python",
            "{empty_venv}",
        ),
        OK,
    ),
    ("unpack-bad-option", ("unpack", "{good}", "--installer", "conda"), USAGE),
    (
        "unpack-other-bundle-there",
        ("unpack", "{other}", "--target", "{clean}", "--offline", "--cpu"),
        USAGE,
    ),
    (
        "unpack-offline-without-wheels",
        ("unpack", "{no_wheels}", "--target", "{tmp}/t", "--offline", "--cpu", "--no-smoke"),
        INSTALL,
    ),
    (
        "unpack-patch-conflict",
        ("unpack", "{conflicting}", "--target", "{tmp}/t", "--offline", "--cpu", "--no-smoke"),
        CONFLICT,
    ),
    (
        "unpack-smoke-fails",
        ("unpack", "{failing_smoke}", "--target", "{tmp}/t", "--offline", "--cpu"),
        SMOKE,
    ),
    # unpatch
    ("unpatch-ok", ("unpatch", "{to_unpatch}"), OK),
    ("unpatch-nothing-left", ("unpatch", "{unpatched}"), OK),
    ("unpatch-changed-since", ("unpatch", "{drifted}"), CONFLICT),
    ("unpatch-not-a-target", ("unpatch", "{not_a_target}"), USAGE),
    ("unpatch-missing", ("unpatch", "{missing}"), USAGE),
    ("unpatch-venv-gone", ("unpatch", "{venv_gone}"), USAGE),
    # verify
    ("verify-clean", ("verify", "{clean}"), OK),
    ("verify-drifted", ("verify", "{drifted}"), INVALID),
    ("verify-not-a-target", ("verify", "{not_a_target}"), USAGE),
    ("verify-missing", ("verify", "{missing}"), USAGE),
    ("verify-venv-gone", ("verify", "{venv_gone}"), INVALID),
    # pack
    ("pack-ok", ("pack", "{ws}", "-o", "{tmp}/b.tar", "--version", "9"), OK),
    ("pack-zip", ("pack", "{ws}", "-o", "{tmp}/b.zip"), USAGE),
    ("pack-missing", ("pack", "{missing}", "-o", "{tmp}/b.tar"), USAGE),
    ("pack-json-to-stdout", ("pack", "{ws}", "-o", "-", "--json"), USAGE),
    # init
    ("init-ok", ("init", "{tmp}"), OK),
    ("init-exists", ("init", "{ws}"), USAGE),
    ("init-missing-option", ("init",), USAGE),
]


@pytest.mark.parametrize(("argv", "expected"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_each_outcome_has_its_documented_exit_code(
    inputs: Inputs, tmp_path: Path, argv: tuple[str, ...], expected: int
) -> None:
    result = run_repro(*inputs.fill(argv, tmp_path), env={"NO_COLOR": "1"})
    stderr = result.stderr.decode(errors="replace")
    assert result.returncode == expected, f"{argv}: {result.returncode}\n{stderr}"
    if expected != OK:
        # a failure says what went wrong (a verdict on stdout, an error on stderr), never
        # as a traceback
        assert result.stdout.strip() or stderr.strip(), argv
        assert "Traceback" not in stderr


def test_every_verb_has_a_success_and_a_failure() -> None:
    verbs = {"check", "inspect", "diff", "scan", "smoke", "unpack"}
    verbs |= {"unpatch", "verify", "pack", "init"}
    outcomes: dict[str, set[int]] = {}
    for _, argv, expected in CASES:
        outcomes.setdefault(argv[0], set()).add(expected)
    assert set(outcomes) == verbs
    for verb, codes in outcomes.items():
        assert OK in codes and codes - {OK}, verb
    assert outcomes["unpack"] == {OK, INVALID, USAGE, INSTALL, CONFLICT, SMOKE}


def test_the_table_in_readme_is_the_one_tested() -> None:
    readme = (Path(__file__).resolve().parent.parent / "README.md").read_text()
    for code, meaning in (
        (OK, "success"),
        (INVALID, "verification"),
        (USAGE, "usage"),
        (INSTALL, "install failed"),
        (CONFLICT, "patch conflict"),
        (SMOKE, "smoke"),
    ):
        rows = [line for line in readme.splitlines() if line.startswith(f"| {code} ")]
        assert rows and meaning in rows[0].lower(), (code, rows)


def test_the_gpu_plan_exception_is_in_readme() -> None:
    """`repro inspect --gpu` exits 0 native, 1 PTX only, 4 none, 2 no audit: a deliberate
    exception to the table, stated under it (tests/cli/test_inspect_gpu.py runs them)."""
    readme = (Path(__file__).resolve().parent.parent / "README.md").read_text()
    text = " ".join(readme.split())
    assert "One deliberate exception: `repro inspect BUNDLE --gpu ARCH`" in text
    assert "exits 0 when every distribution has native code there, 1 when" in text
    assert "4 when some has no code at all, and 2 for a bundle packed before the audit" in text
    assert (errors.EXIT_GPU_PTX_ONLY, errors.EXIT_GPU_NO_CODE) == (1, 4)
    assert errors.NoKernelAudit.exit_code == USAGE


# --- the one hierarchy: every error class in repro/errors.py, each with its own code ---------

REPRO = Path(__file__).resolve().parent.parent / "repro"
BUILTIN_EXCEPTIONS = {
    name
    for name, value in vars(builtins).items()
    if isinstance(value, type) and issubclass(value, BaseException)
}


def _base_names(node: ast.ClassDef) -> set[str]:
    names = set()
    for base in node.bases:
        if isinstance(base, ast.Name):
            names.add(base.id)
        elif isinstance(base, ast.Attribute):
            names.add(base.attr)
    return names


def _sets_exit_code(node: ast.ClassDef) -> bool:
    """`exit_code = ...` in the class body, or `self.exit_code = ...` in its __init__."""
    for item in node.body:
        targets: list[ast.expr] = []
        if isinstance(item, ast.Assign):
            targets = item.targets
        elif isinstance(item, ast.AnnAssign) and item.value is not None:
            targets = [item.target]
        elif isinstance(item, ast.FunctionDef) and item.name == "__init__":
            for statement in ast.walk(item):
                if isinstance(statement, ast.Assign):
                    targets += statement.targets
        for target in targets:
            if isinstance(target, ast.Name) and target.id == "exit_code":
                return True
            if isinstance(target, ast.Attribute) and target.attr == "exit_code":
                return True
    return False


def test_every_error_class_is_in_errors_py_with_an_exit_code_of_its_own() -> None:
    """One hierarchy (DESIGN.md, principle 7): no exception class is defined anywhere in
    repro/ but errors.py, and each one there says its exit code itself, on purpose,
    rather than inheriting one it may not mean."""
    errors_tree = ast.parse((REPRO / "errors.py").read_text())
    defined = {n.name: n for n in errors_tree.body if isinstance(n, ast.ClassDef)}
    assert "ReproError" in defined and "LockedError" in defined
    without_code = [name for name, node in defined.items() if not _sets_exit_code(node)]
    assert without_code == []

    exception_names = BUILTIN_EXCEPTIONS | set(defined)
    elsewhere = []
    for path in sorted(REPRO.rglob("*.py")):
        if path == REPRO / "errors.py":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ClassDef) and _base_names(node) & exception_names:
                elsewhere.append(f"{path.relative_to(REPRO.parent)}:{node.lineno} {node.name}")
    assert elsewhere == []

    table = {errors.EXIT_INVALID, errors.EXIT_USAGE, errors.EXIT_INSTALL}
    table |= {errors.EXIT_PATCH_CONFLICT, errors.EXIT_SMOKE}
    for name in defined:
        cls = getattr(errors, name)
        if issubclass(cls, errors.ReproError):
            assert cls.exit_code in table, name


def test_another_run_holding_the_lock_is_not_a_failed_verification() -> None:
    """The lock says the command cannot run now (2), not that anything was invalid (1)."""
    assert errors.LockedError.exit_code == errors.EXIT_USAGE
