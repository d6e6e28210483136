"""`python -m bench.caches`: TorchInductor's first call, cold against the cache repro
restored.

    python -m bench.caches --runs 5                  # the VM: torch's CPU wheel
    python -m bench.caches --venv /path/to/venv      # a venv of your own with torch

A workspace whose unit sets TORCHINDUCTOR_CACHE_DIR serves nothing but names the cache a
small model's `torch.compile` (a few Linear/GELU layers) filled once; `repro pack
--caches` carries it, `repro unpack --cpu --offline` rebuilds the venv at another path
and restores the cache into TARGET/cache/inductor (named in TARGET/cache/caches.env,
which the units read). Then, in the rebuilt venv, alternated round by round after one
warm-up each (which also compiles the venv's bytecode):

- `cold`: the same script with TORCHINDUCTOR_CACHE_DIR an empty directory (made anew
  before each run): what a first start on a new box costs without the cache;
- `restored`: with the variable as caches.env sets it, the restored cache.

FX graph caching and AOT autograd caching are on for both (TORCHINDUCTOR_FX_GRAPH_CACHE,
TORCHINDUCTOR_AUTOGRAD_CACHE), so a warm run loads the compiled graph instead of
compiling it; each run's inductor counters are recorded, and a restored run that
missed the cache fails the bench. Timed: the whole process (start, import torch,
compile, first call) and the first call alone, as the script measures it. Medians, the
paired ratio cold/restored and the runs go to `OUT.json` and `OUT.md`. See
bench/README.md.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

from bench.measure import Contender, alternate, paired_ratio, paired_ratios, say, write_results
from repro.hashing import available_cores

# The model and its first call; writes its timing and the inductor counters as JSON to
# the file $BENCH_CACHES_OUT names.
SCRIPT = """\
import json, os, time
import torch
from torch._dynamo.utils import counters
torch.manual_seed(0)
layers = []
for _ in range(4):
    layers += [torch.nn.Linear(256, 256), torch.nn.GELU()]
model = torch.compile(torch.nn.Sequential(*layers))
started = time.perf_counter()
with torch.no_grad():
    model(torch.randn(16, 256))
seconds = time.perf_counter() - started
with open(os.environ["BENCH_CACHES_OUT"], "w") as out:
    json.dump({"first_call_s": seconds, "inductor": dict(counters["inductor"])}, out)
"""
CACHE_SETTINGS = {"TORCHINDUCTOR_FX_GRAPH_CACHE": "1", "TORCHINDUCTOR_AUTOGRAD_CACHE": "1"}
UNIT = """[Unit]
Description=a compiled model (bench.caches)

[Service]
Environment=TORCHINDUCTOR_CACHE_DIR={cache}
ExecStart={venv}/bin/python {home}/serve.py

[Install]
WantedBy=multi-user.target
"""


def _run(argv: list[str], **kwargs: Any) -> None:
    say("$ " + " ".join("SCRIPT" if word == SCRIPT else word for word in argv))
    subprocess.run(argv, check=True, **kwargs)


def _venv(args: argparse.Namespace) -> Path:
    """The venv with torch: --venv, or one made under --dir once (pip, the machine's
    index and find-links)."""
    if args.venv is not None:
        return Path(args.venv).absolute()
    venv: Path = args.dir / "venv"
    if not (venv / ".bench-complete").exists():
        shutil.rmtree(venv, ignore_errors=True)
        _run([args.python, "-m", "venv", str(venv)])
        _run([str(venv / "bin" / "python"), "-m", "pip", "install", "-q", args.torch, "numpy"])
        (venv / ".bench-complete").write_text("")
    return venv


def _repro(*argv: str) -> list[str]:
    return [sys.executable, "-m", "repro", *argv]


def _counters(path: Path) -> dict[str, Any]:
    document: dict[str, Any] = json.loads(path.read_text())
    return document


def _markdown(result: dict[str, Any]) -> str:
    rows = [
        f"# Compile caches: {result['machine']}, {result['date']}",
        "",
        f"torch {result['torch']} on {result['cores']} cores; a model of 4 Linear(256)/GELU "
        f"layers, `torch.compile`d, first call. The cache repro packed "
        f"({result['cache_files']} files, {result['cache_bytes'] / 1024:.0f} KiB) restored by "
        f"`repro unpack` at another path; {result['runs']} runs each, alternated, after one "
        "warm-up. `python -m bench.caches`.",
        "",
        "| contender | process median s | first call median s | process runs s | "
        "first call runs s | inductor counters (last run) |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for item in result["series"]:
        runs = ", ".join(f"{s:.2f}" for s in item["runs_s"])
        calls = ", ".join(f"{s:.2f}" for s in item["first_call_runs_s"])
        counters = ", ".join(f"{k} {v}" for k, v in sorted(item["counters"].items()))
        rows.append(
            f"| {item['name']} | {item['median_s']:.2f} | {item['first_call_median_s']:.2f} | "
            f"{runs} | {calls} | {counters} |"
        )
    ratios = result["ratios"]
    rows += [
        "",
        f"- cold / restored, whole process (paired, median): "
        f"**{ratios['process']['median']:.2f}x** "
        f"(range {ratios['process']['min']:.2f}-{ratios['process']['max']:.2f})",
        f"- cold / restored, first call (paired, median): "
        f"**{ratios['first_call']['median']:.2f}x** "
        f"(range {ratios['first_call']['min']:.2f}-{ratios['first_call']['max']:.2f})",
        f"- the restored cache was hit on every restored run: {result['restored_hit_every_run']}",
    ]
    return "\n".join(rows) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.caches",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--runs", type=int, default=5, help="timed runs per contender [5]")
    parser.add_argument("--dir", type=Path, default=Path("/tmp/bench-caches"), help="work dir")
    parser.add_argument("--venv", help="a venv with torch [made under --dir]")
    parser.add_argument("--python", default="python3.11", help="for the venv made [python3.11]")
    parser.add_argument("--torch", default="torch==2.13.0", help="torch to install [2.13.0]")
    parser.add_argument("--machine", default="vm", help="the machine, in the file name [vm]")
    parser.add_argument("--out", type=Path, help="OUT.json and OUT.md [bench/results/...]")
    args = parser.parse_args(argv)
    args.dir = args.dir.absolute()
    args.dir.mkdir(parents=True, exist_ok=True)
    root = Path(__file__).resolve().parent.parent
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(root), os.environ.get("PYTHONPATH", "")]),
    }
    venv = _venv(args)

    # the source: a workspace whose unit names the cache, filled by one compile
    for leftover in ("ws", "source-cache", "out", "target", "cold-cache", "runs"):
        shutil.rmtree(args.dir / leftover, ignore_errors=True)
    workspace = args.dir / "ws"
    (workspace / "services").mkdir(parents=True)
    source_cache = args.dir / "source-cache"
    (workspace / "repro.toml").write_text(
        f'[bundle]\nname = "compiled"\n\n[env]\nvenv = "{venv}"\n'
    )
    (workspace / "serve.py").write_text(SCRIPT)
    (workspace / "services" / "compiled.service").write_text(
        UNIT.format(cache=source_cache, venv=venv, home=workspace)
    )
    runs = args.dir / "runs"
    runs.mkdir()
    compile_env = {**env, **CACHE_SETTINGS, "TORCHINDUCTOR_CACHE_DIR": str(source_cache)}
    compile_env["BENCH_CACHES_OUT"] = str(runs / "source.json")
    _run([str(venv / "bin" / "python"), "-c", SCRIPT], env=compile_env)
    say(f"source compile: {_counters(runs / 'source.json')}")
    out = args.dir / "out"
    _run(_repro("pack", str(workspace), "-o", f"{out}/", "--caches", "--wheels", "all",
                "--version", "1", "-q"), env=env, stdout=subprocess.DEVNULL)  # fmt: skip
    bundle = out / "compiled-1.tar"
    target = args.dir / "target"
    _run(_repro("unpack", str(bundle), "--target", str(target), "--cpu", "--offline",
                "--no-smoke", "-q"), env=env, stdout=subprocess.DEVNULL)  # fmt: skip
    caches_env = (target / "cache" / "caches.env").read_text()
    restored = next(
        line.split("=", 1)[1]
        for line in caches_env.splitlines()
        if line.startswith("TORCHINDUCTOR_CACHE_DIR=")
    )
    shutil.rmtree(source_cache)  # only the restored cache can be hit now
    python = str(target / "venv" / "bin" / "python")
    cold_cache = args.dir / "cold-cache"

    def fresh_cold() -> None:
        shutil.rmtree(cold_cache, ignore_errors=True)
        cold_cache.mkdir()

    seen: dict[str, list[dict[str, Any]]] = {"cold": [], "restored": []}

    def contender(name: str, cache: str, prepare: Any) -> Contender:
        result = runs / f"{name}.json"
        run_env = {**env, **CACHE_SETTINGS, "TORCHINDUCTOR_CACHE_DIR": cache}
        run_env["BENCH_CACHES_OUT"] = str(result)
        return Contender(
            name,
            (python, "-c", SCRIPT),
            env=run_env,
            prepare=prepare,
            cleanup=lambda: seen[name].append(_counters(result)),
        )

    contenders = [
        contender("cold", str(cold_cache), fresh_cold),
        contender("restored", restored, None),
    ]
    series = alternate(contenders, args.runs, warmup=True, say=say)
    by_name = {s.name: s for s in series}
    measured = {name: items[-args.runs :] for name, items in seen.items()}
    first_calls = {name: [i["first_call_s"] for i in items] for name, items in measured.items()}
    hit_every_run = all(
        i["inductor"].get("fxgraph_cache_hit", 0) >= 1
        and not i["inductor"].get("fxgraph_cache_miss")
        for i in seen["restored"]  # the warm-up too: the first start on what repro restored
    )
    torch_version = subprocess.run(
        [python, "-c", "import torch; print(torch.__version__)"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    restored_files = [p for p in Path(restored).rglob("*") if p.is_file()]
    date = datetime.date.today().isoformat()
    result: dict[str, Any] = {
        "date": date,
        "machine": args.machine,
        "platform": platform.platform(),
        "cores": available_cores(),
        "torch": torch_version,
        "runs": args.runs,
        "cache_files": len(restored_files),
        "cache_bytes": sum(p.stat().st_size for p in restored_files),
        "caches_env": caches_env,
        "series": [
            {
                **s.summary(),
                "first_call_runs_s": [round(x, 3) for x in first_calls[s.name]],
                "first_call_median_s": round(statistics.median(first_calls[s.name]), 3),
                "counters": measured[s.name][-1]["inductor"],
            }
            for s in series
        ],
        "ratios": {
            "process": paired_ratio(by_name["cold"], by_name["restored"]),
            "first_call": paired_ratios(first_calls["cold"], first_calls["restored"]),
        },
        "restored_hit_every_run": hit_every_run,
        # the warm-up of each (the first start on the restored cache included)
        "warmup_counters": {name: items[0]["inductor"] for name, items in seen.items() if items},
    }
    path = args.out or root / "bench" / "results" / f"{date}-{args.machine}-caches"
    write_results(path, result, _markdown(result))
    return 0 if hit_every_run else 1


if __name__ == "__main__":
    raise SystemExit(main())
