"""Scan edge cases on a venv built for them: a namespace root shared by two distributions,
a new subdirectory inside a package, and console scripts edited beyond their `#!` line."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from repro.snapshot.facts.environment import probe_environment
from repro.snapshot.scan.compare import scan_environment
from tests.snapshot.conftest import PYTHON_311, make_venv
from tests.support.run import run
from tests.support.wheels import pyproject_toml


def _namespace_project(root: Path, name: str, sub: str) -> Path:
    package = root / "nsroot" / sub
    package.mkdir(parents=True)
    (package / "__init__.py").write_text(f"def main() -> int:\n    return {len(sub)}\n")
    (root / "pyproject.toml").write_text(
        pyproject_toml(
            name,
            "1.0",
            [f"nsroot.{sub}"],
            more=f'\n[project.scripts]\n{name}-tool = "nsroot.{sub}:main"\n',
        )
    )
    return root


@pytest.mark.slow
def test_namespace_roots_subdirectories_and_scripts(tmp_path: Path) -> None:
    wheels = tmp_path / "wheels"
    for name, sub in (("ns-alpha", "alpha"), ("ns-beta", "beta")):
        project = _namespace_project(tmp_path / name, name, sub)
        run(
            [
                sys.executable,
                "-m",
                "pip",
                "wheel",
                "-q",
                "--no-deps",
                "-w",
                str(wheels),
                str(project),
            ]
        )
    venv = make_venv(PYTHON_311, tmp_path / "venv")
    run(
        [
            str(venv.python),
            "-m",
            "pip",
            "install",
            "-q",
            "--no-index",
            "--find-links",
            str(wheels),
            "ns-alpha",
            "ns-beta",
        ]
    )
    site = venv.site_packages
    facts = probe_environment(venv.python)
    assert scan_environment(facts, packages=["ns-alpha", "ns-beta"]).clean

    (site / "nsroot" / "stray.py").write_text("# whose is this?\n")
    (site / "nsroot" / "alpha" / "extra" / "deep").mkdir(parents=True)
    (site / "nsroot" / "alpha" / "extra" / "deep" / "mod.py").write_text("X = 1\n")
    # a venv moved by hand: the script's #! rewritten, body intact -> not a patch
    alpha = venv.root / "bin" / "ns-alpha-tool"
    body = alpha.read_bytes().split(b"\n", 1)[1]
    alpha.write_bytes(b"#!/srv/moved/venv/bin/python\n" + body)
    # a script edited below its #! line -> a patch
    beta = venv.root / "bin" / "ns-beta-tool"
    beta.write_bytes(beta.read_bytes() + b"print('hand edit')\n")

    report = scan_environment(facts, packages=["ns-alpha", "ns-beta"])
    found = {(p.dist, p.path, p.kind) for p in report.patched}
    assert found == {
        ("ns-alpha", "nsroot/alpha/extra/deep/mod.py", "added"),
        ("ns-beta", "../../../bin/ns-beta-tool", "modified"),
    }
    assert report.ambiguous_added == ("nsroot/stray.py",)


@pytest.mark.parametrize(
    ("metadata", "expected"),
    [
        # the description after the headers may hold header-like lines: never read as ones
        (
            "Metadata-Version: 2.1\nName: real\nVersion: 1.0\n\nName: fake\nVersion: 9\n",
            ("real", "1.0"),
        ),
        (
            "Metadata-Version: 2.1\r\nName: crlf\r\nVersion: 2.0\r\n\r\nVersion: 9\r\n",
            ("crlf", "2.0"),
        ),
        ("Metadata-Version: 2.1\nName: nobody\nVersion: 3\n", ("nobody", "3")),
        ("Name: folded\nSummary: one\n  two\nVersion: 4\n\n" + "x\n" * 10000, ("folded", "4")),
    ],
)
def test_metadata_headers_end_at_the_first_empty_line(
    tmp_path: Path, metadata: str, expected: tuple[str, str]
) -> None:
    from repro.snapshot.facts.installed import read_metadata_name_version

    info = tmp_path / "x-1.dist-info"
    info.mkdir()
    (info / "METADATA").write_bytes(metadata.encode())
    assert read_metadata_name_version(info) == expected


def test_metadata_without_version_in_its_headers_is_refused(tmp_path: Path) -> None:
    from repro.errors import InputError
    from repro.snapshot.facts.installed import read_metadata_name_version

    info = tmp_path / "x-1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Name: x\n\nVersion: 1.0\n")
    with pytest.raises(InputError, match=r"METADATA: no Name or Version header"):
        read_metadata_name_version(info)
