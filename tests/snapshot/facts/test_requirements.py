"""pack's `pip check` of the target: the evaluation as tables, then real venvs.

The tables give `unmet_requirements` installed sets and a marker environment; the
rest reads real METADATA (the real sglang wheel installed with --no-deps, a venv
made incomplete on purpose) and runs the real `repro pack`.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tarfile
from pathlib import Path
from typing import Any

import pytest
from packaging.markers import default_environment

from repro.install.venv.installer import find_uv
from repro.snapshot.facts.installed import list_installed
from repro.snapshot.facts.requirements import (
    DistRequirements,
    UnmetRequirement,
    check_environment,
    describe_unmet,
    marker_environment,
    unmet_requirements,
)
from tests.snapshot.conftest import PYTHON_312, Venv
from tests.support.incomplete_env import EXPECTED_UNMET, make_workspace, pip_check
from tests.support.run import run_repro
from tests.support.venvs import find_python

LINUX_311 = {
    "implementation_name": "cpython",
    "implementation_version": "3.11.7",
    "os_name": "posix",
    "platform_machine": "x86_64",
    "platform_release": "6.1.0",
    "platform_system": "Linux",
    "platform_version": "#1 SMP",
    "python_full_version": "3.11.7",
    "platform_python_implementation": "CPython",
    "python_version": "3.11",
    "sys_platform": "linux",
}


def dist(name: str, version: str, *requires: str) -> DistRequirements:
    return DistRequirements(name, version, requires)


TABLE: list[tuple[str, list[DistRequirements], set[str]]] = [
    ("met", [dist("a", "1", "b>=1"), dist("b", "1.5")], set()),
    ("missing", [dist("a", "1", "b")], {"a 1 requires b, which is not installed"}),
    (
        "missing with a specifier",
        [dist("a", "1", "b<3,>=1")],
        {"a 1 requires b<3,>=1, which is not installed"},
    ),
    (
        "conflict",
        [dist("x", "1.0", "y<2"), dist("y", "2.1")],
        {"x 1.0 requires y<2, but 2.1 is installed"},
    ),
    ("marker false", [dist("a", "1", 'b; sys_platform == "win32"')], set()),
    ("machine false", [dist("a", "1", 'b; platform_machine == "aarch64"')], set()),
    (
        "marker true",
        [dist("a", "1", 'b; python_version >= "3.8" and os_name == "posix"')],
        {"a 1 requires b, which is not installed"},
    ),
    (
        "full version",
        [dist("a", "1", 'b; python_full_version < "3.11.8"', 'c; python_full_version < "3.11.7"')],
        {"a 1 requires b, which is not installed"},
    ),
    ("extra marker: pip check sets extra to ''", [dist("a", "1", 'b; extra == "socks"')], set()),
    (
        "another dist asking for a[socks] does not bring the extra in",
        [dist("a", "1", 'b; extra == "socks"'), dist("c", "1", "a[socks]")],
        set(),
    ),
    (
        "requirement with extras: the extras are not followed",
        [dist("c", "1", "a[socks]>=1", "d[x,y]"), dist("a", "1", 'b; extra == "socks"')],
        {"c 1 requires d[x,y], which is not installed"},
    ),
    ("canonical names", [dist("a", "1", "Foo_Bar>=1"), dist("foo.bar", "1.0")], set()),
    (
        "a missing name is reported canonical",
        [dist("My_Pkg", "1", "Typing_Extensions")],
        {"My_Pkg 1 requires typing-extensions, which is not installed"},
    ),
    ("self-requirement met", [dist("x", "1.0", "x[extra]", 'x[more]; extra == "all"')], set()),
    (
        "self-requirement conflict",
        [dist("x", "1.0", "x>=2")],
        {"x 1.0 requires x>=2, but 1.0 is installed"},
    ),
    ("pre-release allowed by >=", [dist("a", "1", "b>=1"), dist("b", "2.0rc1")], set()),
    (
        "pre-release of the excluded version",
        [dist("a", "1", "b<2"), dist("b", "2.0rc1")],
        {"a 1 requires b<2, but 2.0rc1 is installed"},
    ),
    (
        "a URL requirement",
        [dist("a", "1", "pkg @ https://e.invalid/pkg.whl")],
        {"a 1 requires pkg @ https://e.invalid/pkg.whl, which is not installed"},
    ),
    (
        "a URL requirement met by name",
        [dist("a", "1", "pkg @ https://e.invalid/p.whl"), dist("pkg", "1")],
        set(),
    ),
    ("an unparsable line is left out", [dist("a", "1", "b >>> 1", "=c")], set()),
    ("no requirements at all", [dist("a", "1")], set()),
]


@pytest.mark.parametrize(
    ("dists", "expected"), [case[1:] for case in TABLE], ids=[c[0] for c in TABLE]
)
def test_unmet_requirements_table(dists: list[DistRequirements], expected: set[str]) -> None:
    unmet = unmet_requirements(dists, LINUX_311)
    assert {u.describe() for u in unmet} == expected
    assert len(unmet) == len(expected)


def test_findings_are_structured_and_sorted() -> None:
    dists = [dist("Zeta", "2", "y<2"), dist("alpha", "1", "b", "a_c"), dist("y", "3")]
    unmet = unmet_requirements(dists, LINUX_311)
    assert [u.to_json() for u in unmet] == [
        {
            "dist": "alpha",
            "version": "1",
            "requires": "a-c",
            "problem": "missing",
            "installed": None,
        },
        {"dist": "alpha", "version": "1", "requires": "b", "problem": "missing", "installed": None},
        {
            "dist": "Zeta",
            "version": "2",
            "requires": "y<2",
            "problem": "conflict",
            "installed": "3",
        },
    ]


def test_the_warning_is_capped_with_the_count() -> None:
    unmet = [UnmetRequirement("a", "1", f"dep{i:02d}", "missing", None) for i in range(25)]
    text = describe_unmet(unmet, shown=20)
    assert text is not None
    lines = text.splitlines()
    assert lines[0].startswith(
        "25 unmet requirement(s) in the environment (25 missing, 0 conflicting)"
    )
    assert lines[1] == "  a 1 requires dep00, which is not installed"
    assert len(lines) == 22
    assert lines[-1] == "  ... and 5 more (env/pack-report.json lists them all)"
    assert describe_unmet([]) is None


def test_the_marker_environment_is_the_target_interpreters() -> None:
    """Asked of this interpreter, it is exactly what packaging computes in-process;
    asked of a 3.12 one, it is that one's."""
    assert marker_environment(Path(sys.executable)) == default_environment()
    other = marker_environment(PYTHON_312)
    assert other["python_version"] == "3.12"
    assert other["python_full_version"].startswith("3.12.")


@pytest.mark.slow
def test_real_sglang_installed_without_its_dependencies(sglang_env: Venv) -> None:
    unmet = check_environment(sglang_env.python, list_installed(sglang_env.site_packages))
    sglang = [u for u in unmet if u.dist == "sglang"]
    assert len(sglang) > 20
    assert all(u.problem == "missing" for u in sglang)
    version = sglang[0].version
    assert f"sglang {version} requires aiohttp, which is not installed" in {
        u.describe() for u in sglang
    }


@pytest.mark.slow
def test_a_venv_without_pip_made_by_uv_on_another_python(tmp_path: Path) -> None:
    """No pip and no packaging in the target, and not the tool's Python: still checked."""
    uv = find_uv()
    assert uv is not None
    venv = tmp_path / "venv"
    for argv in (
        [str(uv), "venv", "--quiet", "--python", str(PYTHON_312), str(venv)],
        [str(uv), "pip", "install", "--quiet", "--python", str(venv / "bin" / "python"),
         "--no-deps", "requests==2.32.3"],
    ):  # fmt: skip
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=600, check=False)
        assert proc.returncode == 0, proc.stderr
    site = venv / "lib" / "python3.12" / "site-packages"
    dists = list_installed(site)
    assert [d.canonical_name for d in dists] == ["requests"]
    unmet = check_environment(venv / "bin" / "python", dists)
    assert {u.describe() for u in unmet} == {
        "requests 2.32.3 requires certifi>=2017.4.17, which is not installed",
        "requests 2.32.3 requires charset-normalizer<4,>=2, which is not installed",
        "requests 2.32.3 requires idna<4,>=2.5, which is not installed",
        "requests 2.32.3 requires urllib3<3,>=1.21.1, which is not installed",
    }


# --- through `repro pack` ---------------------------------------------------------


def pack_report(bundle: Path) -> dict[str, Any]:
    with tarfile.open(bundle) as archive:
        member = next(m for m in archive.getmembers() if m.name.endswith("env/pack-report.json"))
        stream = archive.extractfile(member)
        assert stream is not None
        report: dict[str, Any] = json.loads(stream.read())
    return report


def packed(workspace: Path, out: Path) -> tuple[Path, str]:
    result = run_repro("pack", str(workspace), "-o", f"{out}/", "--name", "rc", "--version", "1")
    assert result.returncode == 0, result.stderr.decode()
    return out / "rc-1.tar", result.stderr.decode()


@pytest.mark.slow
def test_pack_warns_of_and_records_an_incomplete_environment(tmp_path: Path) -> None:
    workspace = make_workspace(tmp_path / "ws", find_python("3.11"))
    bundle, err = packed(workspace, tmp_path / "out")
    assert "warning: 5 unmet requirement(s) in the environment (4 missing, 1 conflicting)" in err
    # every line the venv's own pip check prints, in repro's words
    for line in pip_check(workspace).splitlines():
        name_version, _, rest = line.partition(" requires ")
        if rest:
            assert f"  {name_version} requires {rest.split(',')[0]}" in err
    assert "  requests 2.32.3 requires idna<4,>=2.5, but 2.4 is installed" in err
    report = pack_report(bundle)
    found = {
        (u["dist"], u["requires"], u["problem"], u["installed"])
        for u in report["unmet_requirements"]
    }
    assert found == EXPECTED_UNMET
    assert all(u["version"] for u in report["unmet_requirements"])
    assert any(w.startswith("5 unmet requirement(s)") for w in report["warnings"])
    # the same bundle, byte for byte, when packed again
    again, _ = packed(workspace, tmp_path / "again")
    assert again.read_bytes() == bundle.read_bytes()


@pytest.mark.slow
def test_a_complete_environment_reports_none(tmp_path: Path) -> None:
    workspace = make_workspace(tmp_path / "ws", find_python("3.11"), complete=True)
    assert pip_check(workspace).strip() == "No broken requirements found."
    bundle, err = packed(workspace, tmp_path / "out")
    assert "unmet requirement" not in err
    report = pack_report(bundle)
    assert report["unmet_requirements"] == []
