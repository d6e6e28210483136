"""bench.upgrade's own logic: the one-wheel change it makes in a venv (a distribution
given another version, its RECORD still true, put back exactly), the choice of that
distribution, and the count of what an upgrade rewrote; and a run of one round over a
small real venv (slow), which must leave the venv it changed as it was."""

from __future__ import annotations

import csv
import hashlib
import io
import json
import os
from pathlib import Path
from typing import Any

import pytest

from bench.upgrade import (
    bump_distribution,
    dist_files,
    goals,
    identities,
    main,
    pick_distribution,
    render,
    rewritten,
)
from repro.wheel.record import record_hash
from tests.support.venvs import VenvRecipe, cached_venv, find_python


def _install(site: Path, name: str, version: str, files: dict[str, bytes]) -> Path:
    """An installed distribution as pip leaves it: its files, and a dist-info whose
    RECORD lists every one with its sha256 and size."""
    info = site / f"{name}-{version}.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
    (info / "WHEEL").write_text("Wheel-Version: 1.0\nRoot-Is-Purelib: true\nTag: py3-none-any\n")
    (info / "INSTALLER").write_text("pip\n")
    rows = []
    for rel, data in files.items():
        (site / rel).parent.mkdir(parents=True, exist_ok=True)
        (site / rel).write_bytes(data)
    for rel in [*files, *(f"{info.name}/{n}" for n in ("METADATA", "WHEEL", "INSTALLER"))]:
        data = (site / rel).read_bytes()
        rows.append(f"{rel},{record_hash(hashlib.sha256(data).digest())},{len(data)}\n")
    rows.append(f"{info.name}/RECORD,,\n")
    (info / "RECORD").write_text("".join(rows))
    return info


def _tree(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in root.rglob("*") if p.is_file()}


def _record_true(site: Path, info: Path) -> None:
    for row in csv.reader(io.StringIO((info / "RECORD").read_text())):
        path, digest, size = row
        data = (site / path).read_bytes()
        if digest:
            assert digest == record_hash(hashlib.sha256(data).digest()), path
            assert int(size) == len(data), path


@pytest.fixture
def site(tmp_path: Path) -> Path:
    site = tmp_path / "venv" / "lib" / "python3.11" / "site-packages"
    _install(site, "six", "1.16.0", {"six.py": b"VERSION = 1\n"})
    _install(
        site,
        "typing_extensions",
        "4.12.2",
        {"typing_extensions.py": b"X = 1\n", "typing_extensions/extra.py": b"Y = 2\n"},
    )
    _install(site, "idna", "3.7", {"idna/__init__.py": b"", "idna/core.py": b"A = 1\n"})
    return site


def test_a_bumped_distribution_has_its_new_version_and_a_true_record(
    site: Path, tmp_path: Path
) -> None:
    before = _tree(site)
    bumped = bump_distribution(site, "six", tmp_path / "backup")
    assert (bumped.old_version, bumped.new_version) == ("1.16.0", "1.16.0+bench")
    assert not (site / "six-1.16.0.dist-info").exists()
    info = site / "six-1.16.0+bench.dist-info"
    assert "\nVersion: 1.16.0+bench\n" in (info / "METADATA").read_text()
    assert (site / "six.py").read_bytes().startswith(b"VERSION = 1\n")
    assert (site / "six.py").read_bytes() != before["six.py"]
    _record_true(site, info)
    assert all(r[0].startswith(("six.py", info.name)) for r in csv.reader(io.StringIO(
        (info / "RECORD").read_text()
    )))  # fmt: skip

    bumped.restore()
    assert _tree(site) == before
    assert not (tmp_path / "backup").exists()


def test_a_local_version_gets_one_more_label(site: Path, tmp_path: Path) -> None:
    _install(site, "kernel", "1.0+cu130", {"kernel/__init__.py": b"K = 1\n"})
    bumped = bump_distribution(site, "kernel", tmp_path / "backup")
    assert bumped.new_version == "1.0+cu130.bench"
    _record_true(site, site / "kernel-1.0+cu130.bench.dist-info")


def test_the_distribution_is_a_candidate_without_a_patch(site: Path) -> None:
    assert pick_distribution(site, patched=set()) == "six"
    assert pick_distribution(site, patched={"six"}) == "idna"
    # none of the candidates: the pure-Python one with the fewest RECORD rows
    assert pick_distribution(site, patched={"six", "idna"}) == "typing-extensions"
    assert pick_distribution(site, patched=set(), wanted="typing_extensions") == (
        "typing-extensions"
    )
    with pytest.raises(SystemExit, match="not installed"):
        pick_distribution(site, patched=set(), wanted="numpy")


def test_what_an_upgrade_rewrote_is_counted_against_the_distribution(
    site: Path, tmp_path: Path
) -> None:
    root = tmp_path / "venv"
    (root / ".repro").mkdir()
    (root / ".repro" / "state.toml").write_text("x")
    cache = site / "__pycache__"
    cache.mkdir()
    (cache / "six.cpython-311.pyc").write_bytes(b"pyc")
    before = identities(root)
    assert ".repro/state.toml" not in before and not any("__pycache__" in p for p in before)
    owned = dist_files(root, site, "six")
    assert "lib/python3.11/site-packages/six.py" in owned

    bump_distribution(site, "six", tmp_path / "backup")
    (root / ".repro" / "state.toml").write_text("y")  # not counted
    os.utime(site / "idna" / "core.py", ns=(1, 1))  # touched: outside six
    after = identities(root)
    owned |= dist_files(root, site, "six")
    counted = rewritten(before, after, owned)
    assert counted["rewritten"] == 2  # six.py, idna/core.py
    assert counted["added"] == 4 and counted["removed"] == 4  # the dist-info, renamed
    assert counted["outside"] == ["lib/python3.11/site-packages/idna/core.py"]
    assert counted["touched"] == 10


RATIO = {"median": 0.17, "min": 0.17, "max": 0.17}


def _result(outside: list[str]) -> dict[str, Any]:
    series = [
        {"name": name, "median_s": m, "min_s": m, "max_s": m, "runs_s": [m]}
        for name, m in (
            ("apply delta (patch)", 1.5),
            ("rollback (patch)", 0.8),
            ("upgrade one wheel (delta)", 2.0),
            ("rollback (one wheel)", 0.9),
            ("full unpack of NEW", 9.0),
        )
    ]
    return {
        "machine": "vm",
        "environment": "small",
        "date": "2026-12-06",
        "venv_files": 9400,
        "venv_bytes": 320_000_000,
        "cores": 2,
        "runs": 1,
        "warmup": True,
        "load_average": [1.0, 1.5, 2.0],
        "pack_seconds": {"full_1": 9.0, "delta_2": 4.0},
        "carried": {"delta2": {"bundle.toml": 763}, "delta3": {"env/wheels/six.whl": 38868}},
        "one_wheel": {"name": "six", "old": "1.16.0", "new": "1.16.0+bench"},
        "sizes": {
            "full_bundle_bytes": 86_000_000,
            "delta_bytes": 71_680,
            "delta_ratio": 71_680 / 86_000_000,
            "goal_met": False,
            "delta3_bytes": 90_000,
        },
        "rsync": {"available": False, "note": "--no-rsync"},
        "group": {
            "series": series,
            "ratios": {"apply delta (patch) / full unpack of NEW": RATIO},
            "medians_s": {s["name"]: s["median_s"] for s in series},
            "one_wheel": [
                {
                    "rewritten": 3,
                    "added": 4,
                    "removed": 4,
                    "touched": 11 + len(outside),
                    "outside": outside,
                    "distribution_files": 7,
                    "files": 9400,
                }
            ],
        },
    }  # fmt: skip


def test_goals_and_the_table() -> None:
    result = _result([])
    result["goals"] = goals(result)
    met = {name: goal["met"] for name, goal in result["goals"].items()}
    assert met == {
        "delta <= 1 MB and <= 0.05 % of the full bundle": False,
        "apply the delta <= 5 s (GPU host)": True,
        "rollback <= 5 s (GPU host)": True,
        "one-wheel upgrade rewrites only that distribution's files": True,
    }
    table = render(result)
    assert "| apply delta (patch) / full unpack of NEW | 0.170 |" in table
    assert "| 1 | 9,400 | 7 | 3 | 4 | 4 | 0 |" in table

    assert "The delta v3 carries 1 files: env/wheels/six.whl (38,868 B)." in table

    touched = _result(["services/bench-serve.service"])
    assert not goals(touched)["one-wheel upgrade rewrites only that distribution's files"]["met"]


def test_table_rewrites_the_markdown_of_a_results_file(tmp_path: Path) -> None:
    result = _result([])
    result["goals"] = goals(result)
    path = tmp_path / "2026-12-06-vm-upgrade.json"
    path.write_text(json.dumps(result))
    assert main(["--table", str(path)]) == 0
    assert path.with_suffix(".md").read_text() == render(result)


@pytest.mark.slow
def test_a_small_run_writes_its_results(tmp_path: Path) -> None:
    venv = cached_venv(
        VenvRecipe("bench-upgrade", find_python("3.11"), ("six==1.16.0", "idna==3.7"))
    )
    results = tmp_path / "results"
    code = main(
        [
            "--venv", str(venv), "--cache", str(tmp_path / "cache"), "--results", str(results),
            "--runs", "1", "--warmup", "0", "--unpack-arg=--cpu", "--machine-name", "t",
            "--no-rsync",
        ]
    )  # fmt: skip
    assert code == 0
    (json_file,) = results.glob("*-t-upgrade.json")
    result = json.loads(json_file.read_text())
    assert [s["name"] for s in result["group"]["series"]] == [
        "apply delta (patch)",
        "rollback (patch)",
        "upgrade one wheel (delta)",
        "rollback (one wheel)",
        "full unpack of NEW",
    ]
    assert result["one_wheel"] == {"name": "six", "old": "1.16.0", "new": "1.16.0+bench"}
    (count,) = result["group"]["one_wheel"]
    assert count["outside"] == [] and count["touched"] > 0
    assert "env/wheels/six-1.16.0+bench-py2.py3-none-any.whl" in result["carried"]["delta3"]
    # the workspace's copy of the venv is as it was: six 1.16.0, its RECORD true
    (copy,) = (tmp_path / "cache").glob("venv-*/venv")
    (site,) = copy.glob("lib/python*/site-packages")
    assert [p.name for p in site.glob("six-*.dist-info")] == ["six-1.16.0.dist-info"]
    _record_true(site, site / "six-1.16.0.dist-info")
    assert not (tmp_path / "cache" / "work-upgrade-venv").exists()
