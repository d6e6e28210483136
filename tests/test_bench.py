"""The benchmark harness (bench/) runs end to end and reports every contender.

A smoke test of the harness, never a timed assertion: it builds (or reuses) the real
small environment, runs every contender once without warm-up and checks that the
results file and the Markdown table hold them all.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from bench import measure
from bench.measure import Run, Series, paired_ratio
from bench.report import goals

ROOT = Path(__file__).resolve().parent.parent

CONTENDERS = {
    "check": [
        "repro check",
        "sha256sum -c",
        "repro check --jobs 1",
        "cat (read ceiling)",
        "read+sha256 ceiling (bench/ceiling.py)",
    ],
    "scan": [
        "repro scan",
        "sha256sum (files)",
        "cat (read ceiling)",
        "repro pack --wheels none --rehash",
        "read+sha256 ceiling (bench/ceiling.py)",
    ],
    "pack": [
        "repro pack --wheels all",
        "tar cf + sha256sum",
        "repro pack --wheels all --jobs 1",
        "write ceiling: cat | dd oflag=direct, sync",
        "repro pack --wheels all, REPRO_DIRECT_IO=0",
        "venv-pack --format tar",
        "venv-pack --format tar, then sync of its output",
        "repro pack --wheels all --rehash",
    ],
    "unpack": [
        "repro unpack --offline",
        "tar xf",
        "venv + pip install --no-index",
        "repro unpack --offline, cold uv cache",
        "repro unpack --offline, cold uv cache, REPRO_DIRECT_IO=1",
    ],
    "scaling-pack": [
        "repro pack --wheels all --rehash 1x",
        "repro pack --wheels all --rehash 2x",
        "repro pack --wheels all --rehash 1x --jobs 1",
        "repro pack --wheels all --rehash 2x --jobs 1",
        "repro scan 1x",
        "repro scan 2x",
        "tar cf + sha256sum 2x",
    ],
    "scaling": ["repro check 2x", "repro check 2x --jobs 1", "sha256sum -c 2x"],
}


def test_paired_ratio_pairs_run_by_run() -> None:
    a = Series("a", ("a",), [Run(2.0, 1), Run(9.0, 1), Run(3.0, 1)])
    b = Series("b", ("b",), [Run(1.0, 1), Run(3.0, 1), Run(6.0, 1)])
    # pairs: 2/1, 9/3, 3/6 -> the median of the ratios, not the ratio of the medians (3/3)
    assert paired_ratio(a, b) == {"median": 2.0, "min": 0.5, "max": 3.0}


def test_goals_are_judged_from_paired_ratios() -> None:
    result = {
        "groups": {
            "unpack": {
                "contenders": [
                    {"name": "repro unpack --offline", "peak_rss_mib": 200.0},
                ],
                "ratios": [
                    {"a": "repro unpack --offline", "b": "tar xf", "median": 1.2},
                    {
                        "a": "repro unpack --offline",
                        "b": "venv + pip install --no-index",
                        "median": 0.5,
                    },
                ],
            }
        }
    }
    judged = {goal["what"]: goal["met"] for goal in goals(result)}
    assert judged == {
        "unpack / tar xf": True,
        "unpack: speed-up over pip": False,
        "peak RSS of repro unpack --offline (MiB)": False,
    }


@pytest.mark.parametrize("gnu_time", [True, False], ids=["gnu-time", "python-wrapper"])
def test_peak_rss_and_exit_status_of_a_real_child(
    gnu_time: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Both meters (GNU time, and the wrapper used where it is not installed) read the
    child's own peak, not the harness's, and pass its exit status through."""
    if not gnu_time:
        monkeypatch.setattr(measure, "GNU_TIME", "/nonexistent/time")
    grab = "b = bytearray(80 << 20); b[::4096] = b'x' * len(b[::4096])"
    run = measure.run_once(measure.Contender("grab", (sys.executable, "-c", grab)))
    assert 80 * 1024 < run.max_rss_kib < 200 * 1024
    small = measure.run_once(measure.Contender("true", ("true",)))
    assert small.max_rss_kib < 20 * 1024  # not the harness's ~40 MiB and more
    with pytest.raises(measure.BenchFailed, match="exit 3"):
        measure.run_once(measure.Contender("fails", (sys.executable, "-c", "raise SystemExit(3)")))
    assert measure.rss_meter()["meter"] == (
        "GNU time %M" if gnu_time else "python -S -I wrapper (wait4)"
    )


@pytest.mark.slow
def test_harness_smoke_small(tmp_path: Path) -> None:
    results = tmp_path / "results"
    completed = subprocess.run(
        [sys.executable, "-m", "bench", "--size", "small", "--runs", "1", "--warmup", "0",
         "--scaling", "2", "--results", str(results), "--work", str(tmp_path / "work")],
        cwd=ROOT, capture_output=True, text=True, timeout=3600, check=False,
    )  # fmt: skip
    assert completed.returncode == 0, completed.stderr[-3000:]
    (json_path,) = results.glob("*.json")
    (md_path,) = results.glob("*.md")
    document = json.loads(json_path.read_text())
    small = document["sizes"]["small"]
    for group, names in CONTENDERS.items():
        found = [item["name"] for item in small["groups"][group]["contenders"]]
        assert found == names, group
        for item in small["groups"][group]["contenders"]:
            assert len(item["runs_s"]) == 1 and item["median_s"] > 0 and item["peak_rss_mib"] > 0
    assert small["facts"]["venv_bytes"] > 100e6
    assert {goal["what"] for goal in small["goals"]} >= {
        "check: speed-up over sha256sum -c",
        "pack --wheels all / venv-pack",
        "pack --wheels all / write ceiling (info)",
        "pack --wheels all, page cache / venv-pack (info)",
        "unpack: speed-up over pip",
        "unpack, cold uv cache, direct writes (info): speed-up over pip",
        "first pack: 2x / 1x time per byte (info)",
        "scan: 2x / 1x time per byte (info)",
        "first pack 2x / (tar cf + sha256sum 2x)",
        "check: 2x / 1x time per byte (info, medians)",
    }
    # the cold-cache contenders measure uv's cache: they ask for uv; the plain one takes
    # the default installer
    argv = {item["name"]: item["argv"] for item in small["groups"]["unpack"]["contenders"]}
    assert "--installer" not in argv["repro unpack --offline"]
    for name in CONTENDERS["unpack"][3:]:
        assert argv[name][-2:] == ["--installer", "uv"], name
    scaled = small["groups"]["scaling-pack"]["payload"]
    assert scaled["copies"] == 2 and scaled["bytes"] > 1.8 * small["facts"]["venv_bytes"]
    table = md_path.read_text()
    assert completed.stdout.strip() == table.strip()
    for names in CONTENDERS.values():
        for name in names:
            assert f"`{name}`" in table


def test_repro_check_starts_without_importing_other_commands() -> None:
    """Commands load when run: `repro check` does not pay for pack, unpack, demo, ladder."""
    code = (
        "import sys\n"
        "from repro.cli import cli\n"
        "try:\n"
        "    cli.main(['check', '--help'], standalone_mode=False)\n"
        "finally:\n"
        "    heavy = sorted(m for m in sys.modules if m.startswith(("
        "'repro.verbs.demo', 'repro.snapshot', 'repro.install', 'repro.ladder', 'requests',"
        " 'repro.verbs.sbom', 'cyclonedx')))\n"
        "    print('HEAVY', heavy)\n"
    )
    completed = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True
    )
    assert "Verify a bundle archive" in completed.stdout
    assert "HEAVY []" in completed.stdout


def test_every_command_loads_under_its_name() -> None:
    import click

    from repro.cli import COMMANDS, cli, load_command

    context = click.Context(cli)
    assert cli.list_commands(context) == sorted(COMMANDS)
    for name in COMMANDS:
        command = load_command(name)
        assert command.name == name
        assert cli.get_command(context, name) is command


def test_scan_probe_imports_nothing_from_the_target(tmp_path: Path) -> None:
    """`repro scan` probes without importing the target's key modules (torch: seconds and
    ~600 MB RSS, seen by bench/ on the full environment); pack reads them from files
    unless asked to import them (tests/test_modulefiles.py)."""
    from repro.snapshot.environment import probe_environment

    venv = tmp_path / "venv"
    subprocess.run(
        [sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120
    )
    python = venv / "bin" / "python"
    site = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True, text=True, check=True, timeout=60,
    ).stdout.strip()  # fmt: skip
    marker = tmp_path / "imported"
    package = Path(site) / "transformers"
    package.mkdir()
    (package / "__init__.py").write_text(
        f"open({str(marker)!r}, 'w').close()\n__version__ = '0.0.1'\n"
    )
    assert probe_environment(python, imports=False).modules == ()
    assert not marker.exists()
    facts = probe_environment(python)
    assert [m.module for m in facts.modules] == ["transformers"]
    assert marker.exists()


def test_scaling_goals_divide_the_time_ratio_by_the_bytes_ratio() -> None:
    pack = "repro pack --wheels all --rehash"
    result = {
        "facts": {"venv_bytes": 100, "bundle_payload_bytes": 50},
        "groups": {
            "scaling-pack": {
                "payload": {"files": 40, "bytes": 400, "copies": 4},
                "contenders": [
                    {"name": f"{pack} 1x", "peak_rss_mib": 80.0},
                    {"name": f"{pack} 4x", "peak_rss_mib": 160.0},
                ],
                "ratios": [
                    {"a": f"{pack} 4x", "b": f"{pack} 1x", "median": 3.0},
                    {"a": "repro scan 4x", "b": "repro scan 1x", "median": 4.4},
                    {"a": f"{pack} 4x", "b": "tar cf + sha256sum 4x", "median": 0.3},
                ],
            },
            "check": {"contenders": [{"name": "repro check", "median_s": 2.0, "peak_rss_mib": 1}]},
            "scaling": {
                "payload": {"files": 8, "bytes": 200, "copies": 4},
                "contenders": [{"name": "repro check 4x", "median_s": 8.0}],
                "ratios": [],
            },
        },
    }
    judged = {goal["what"]: (goal["value"], goal["met"]) for goal in goals(result)}
    assert judged["first pack: 4x / 1x time per byte (info)"] == (0.75, None)
    assert judged["scan: 4x / 1x time per byte (info)"] == (1.1, None)
    assert judged["first pack --jobs 1: 4x / 1x time per byte (info)"] == (None, None)
    assert judged["first pack 4x / (tar cf + sha256sum 4x)"] == (0.3, True)
    assert judged[f"peak RSS of {pack} 1x (MiB)"] == (80.0, True)
    assert judged[f"peak RSS of {pack} 4x (MiB)"] == (160.0, False)
    assert judged["check: 4x / 1x time per byte (info, medians)"] == (1.0, None)
