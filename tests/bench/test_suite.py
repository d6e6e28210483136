"""The benchmark harness (bench/) runs end to end and reports every contender.

A smoke test of the harness, never a timed assertion: it builds (or reuses) the real
small environment, runs every contender once without warm-up and checks that the
results file and the Markdown table hold them all.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from bench import measure, report, suite
from bench.disk import allocated_bytes, disk_facts, preflight_need
from bench.measure import Run, Series, paired_ratio
from bench.report import goals
from repro.errors import ReproError
from repro.install.preflight import check_disk
from tests.install.test_preflight import info_with, inputs_for

ROOT = Path(__file__).resolve().parents[2]

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
        "repro unpack --offline --installer uv, its cache as it is",
    ],
    "roundtrip": [
        "repro pack -o - piped into repro unpack -",
        "tar cf - piped into tar xf -",
        "the same, up to the install (unpack - --dry-run)",
        "repro pack -o - into /dev/null",
        "cat bundle piped into repro unpack -",
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
        "unpack's disk peak / venv",
        "unpack's preflight need / venv",
        "streamed round trip / tar pipe",
        "streamed round trip up to the install / tar pipe (info)",
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
    roundtrip = small["groups"]["roundtrip"]["ratios"]
    assert [(r["a"], r["b"]) for r in roundtrip] == [
        (report.ROUNDTRIP, report.TAR_ROUNDTRIP),
        (report.ROUNDTRIP_STAGED, report.TAR_ROUNDTRIP),
        (report.STREAM_PACK, report.ROUNDTRIP),
        (report.STREAM_UNPACK, report.ROUNDTRIP),
    ]
    assert all(r["median"] > 0 for r in roundtrip)
    disk = small["groups"]["unpack"]["disk"]
    assert disk["contender"] == "repro unpack --offline"
    assert len(disk["peak_bytes_runs"]) == 1 and disk["peak_bytes"] > 0
    # the bundle is extracted and the venv installed on the work directory's file system
    assert disk["peak_over_venv"]["median"] > 0.3
    assert disk["venv_allocated_bytes"] > 100e6
    assert "GiB needed" in disk["preflight_detail"]
    assert disk["preflight_need_over_venv"] > 0.3
    scaled = small["groups"]["scaling-pack"]["payload"]
    assert scaled["copies"] == 2 and scaled["bytes"] > 1.8 * small["facts"]["venv_bytes"]
    table = md_path.read_text()
    assert completed.stdout.strip() == table.strip()
    for names in CONTENDERS.values():
        for name in names:
            assert f"`{name}`" in table
    assert f"| `{report.ROUNDTRIP}` / `{report.TAR_ROUNDTRIP}` |" in table
    assert "| disk peak / venv:" in table and "| preflight need / venv:" in table


def test_disk_peak_of_a_real_child(tmp_path: Path) -> None:
    """The sampled peak sees a file that a child writes and removes again before it exits
    (the last sample, after the exit, would not); without `disk` nothing is sampled."""
    size = 64 << 20
    write = (
        "import os, sys, time\n"
        "path = sys.argv[1]\n"
        "with open(path, 'wb') as f:\n"
        "    f.write(os.urandom(1 << 20) * 64); f.flush(); os.fsync(f.fileno())\n"
        "time.sleep(0.5)\n"
        "os.unlink(path)\n"
    )
    argv = (sys.executable, "-c", write, str(tmp_path / "blob"))
    # the floor leaves room for what other writers free on a shared machine meanwhile
    run = measure.run_once(measure.Contender("write", argv, disk=tmp_path))
    assert run.disk_peak_bytes is not None and run.disk_peak_bytes >= size * 3 // 4
    assert not (tmp_path / "blob").exists()
    series = Series("write", argv, [run])
    assert series.summary()["disk_peak_bytes_runs"] == [run.disk_peak_bytes]
    plain = measure.run_once(measure.Contender("write", argv))
    assert plain.disk_peak_bytes is None
    assert "disk_peak_bytes_runs" not in Series("write", argv, [plain]).summary()


def test_allocated_bytes_is_what_du_counts(tmp_path: Path) -> None:
    """Blocks, not apparent sizes (a sparse file counts what it holds), hard links once,
    links not followed: the number `du -s -B1` prints for the same tree."""
    tree = tmp_path / "venv"
    (tree / "lib").mkdir(parents=True)
    data = tree / "lib" / "data.bin"
    data.write_bytes(os.urandom(1 << 20))
    os.link(data, tree / "lib" / "again.bin")
    (tree / "lib" / "link").symlink_to(tmp_path)  # outside the tree: not followed
    with (tree / "sparse").open("wb") as sparse:
        sparse.truncate(100 << 20)
    du = subprocess.run(
        ["du", "-s", "-B1", str(tree)], capture_output=True, text=True, check=True, timeout=60
    )
    counted = allocated_bytes(tree)
    assert counted == int(du.stdout.split()[0])
    assert 1 << 20 <= counted < 2 << 20


def test_preflight_need_is_read_from_the_disk_check(tmp_path: Path) -> None:
    """The stated need as preflight's own check_disk words it, and a clear error naming the
    source where the report has no such check or words it otherwise."""
    need = int(2.26 * 2**30)
    check = check_disk(
        inputs_for(info_with(), tmp_path / "t", install_bytes=need), free=lambda _: 10 << 30
    )
    report_json = {"preflight": {"checks": [check.to_json()]}}
    assert preflight_need(report_json, source="out-json") == (round(2.3 * 2**30), check.detail)
    with pytest.raises(ReproError, match="out-json: the report has no preflight check named"):
        preflight_need({"preflight": None}, source="out-json")
    odd = {"preflight": {"checks": [{"name": "disk", "detail": "plenty"}]}}
    with pytest.raises(ReproError, match="out-json: preflight's disk check says no"):
        preflight_need(odd, source="out-json")


def test_disk_ratios_and_the_round_trip_pair_in_the_table() -> None:
    """unpack's disk against the venv's size (median and range of the runs' peaks; the
    stated need), and the round trip's paired ratio, as the Markdown table prints them."""
    disk = disk_facts("repro unpack --offline", [2_000_000_000, 4_000_000_000, 3_000_000_000],
                      1_000_000_000, 2_500_000_000, "1.0 GiB free at /w|x, about 2.3 GiB needed",
                      Path("/w|x"))  # fmt: skip
    assert disk["peak_bytes"] == 3_000_000_000
    assert disk["peak_over_venv"] == {"median": 3.0, "min": 2.0, "max": 4.0}
    assert disk["preflight_need_over_venv"] == 2.5
    contender = {"name": "x", "runs_s": [1.0], "median_s": 1.0, "min_s": 1.0, "max_s": 1.0,
                 "spread_pct": 0.0, "peak_rss_mib": 1.0}  # fmt: skip
    ratio = {"a": report.ROUNDTRIP, "b": report.TAR_ROUNDTRIP, "median": 1.25, "min": 1.2,
             "max": 1.3}  # fmt: skip
    document = {
        "sizes": {
            "small": {
                "facts": {"venv_bytes": 1e9, "venv_files": 10, "bundle_bytes": 1e9},
                "machine": {"cores": 2, "load_average": [0.5]},
                "hashlib_bytes_per_s": 1e9,
                "groups": {
                    "unpack": {"contenders": [contender], "ratios": [], "disk": disk},
                    "roundtrip": {"contenders": [contender], "ratios": [ratio]},
                },
                "goals": [],
            }
        }
    }
    table = report.table(document).splitlines()
    assert f"| `{report.ROUNDTRIP}` / `{report.TAR_ROUNDTRIP}` | 1.25 | 1.20-1.30 |" in table
    (peak,) = [line for line in table if line.startswith("| disk peak / venv:")]
    assert peak.endswith("| 3.00 (2.00-4.00) | 3.00 (2.00-4.00) |")
    (stated,) = [line for line in table if line.startswith("| preflight need / venv:")]
    assert "about 2.3 GiB needed" in stated and stated.endswith("| 2.50 | 2.50 |")
    # the path's "|" escaped: the row keeps its three cells
    assert "/w\\|x" in stated and len(re.split(r"(?<!\\)\|", stated)) == 5


def test_a_failing_side_of_a_pipeline_fails_the_run() -> None:
    """The round trip runs as one pipeline under pipefail: a pack that fails while unpack
    exits 0 (or the reverse) is a failed run, not a fast one."""
    for script in ("false | cat", "echo x | false"):
        with pytest.raises(measure.BenchFailed, match="exit 1"):
            measure.run_once(measure.Contender("pipe", suite._shell(script)))


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
        " 'repro.verbs.sbom', 'repro.bundle.sbom', 'cyclonedx')))\n"
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
    unless asked to import them (tests/snapshot/facts/test_modulefiles.py)."""
    from repro.snapshot.facts.environment import probe_environment

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
