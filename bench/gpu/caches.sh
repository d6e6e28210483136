#!/usr/bin/env bash
# Compile caches that travel (issue 33), on one H100/H200: time to the first token of a
# torch.compile'd model served by the workspace's own server, unpacked with the caches
# repro carried against the same unpack without them, and the user's whole wait (time to
# serving: `repro unpack` start to the first token).
#
# The workspace (WORK/cws) holds a unit that runs bench/gpu/compiled_server.py (stdlib,
# torch, transformers: a tiny random Llama made by tests/support/make_tiny_llama.py,
# its forward compiled at start for each of BATCH_SIZES in COMPILE_MODE, readiness once
# compiled) in the image's venv, with TRITON_CACHE_DIR and TORCHINDUCTOR_CACHE_DIR under
# WORK/cws/cache. One run warms them;
# repro, installed from its wheel into a clean venv (/tmp/tool), packs the workspace
# twice, `--caches` and without; the workspace is moved away; both bundles are unpacked
# offline at WORK/srv-warm and WORK/srv-cold with the whole ladder, its server rung
# included: each unpack's report gives the time to serving (its wall time up to the
# server rung's launch, plus the rung's ready_s and ttft_s) to serving.jsonl. Then ROUNDS
# rounds alternated of the ladder's server rung (`repro smoke --bundle
# TARGET/.repro/bundle --rungs server`, which launches the unit's command with
# TARGET/cache/caches.env as the units read it): `cold` (the cache directories its unit
# names, ${REPRO_HOME}/cache/..., emptied before each run) and `restored`.
# Each rung's ready_s (launch to the compile's end) and ttft_s (request to first token)
# go to runs.jsonl; medians and the ratio of first token (ready + TTFT) to summary.json;
# each server log's `phases:` line (imports, load, compile) to phases.jsonl.
# Goal: the first token at least 3x sooner with the caches.
#
# STAGE=prepare does everything up to the rounds, STAGE=rounds only the rounds (on the same
# machine, still warm: a call of at most 10 minutes each); the default does both.
#
#   bash bench/gpu/caches.sh OUTDIR          (.whl/ holds repro's wheel, .whl/deps/ its
#                                             dependencies for the image's Python 3.12)
#   COMPILE_MODE=max-autotune-no-cudagraphs BATCH_SIZES=1,2 bash bench/gpu/caches.sh OUTDIR
#                                            (as SGLang's --enable-torch-compile compiles)
#   CACHES_CPU=1 REPRO=.venv/bin/repro PYTHON=/path/venv/bin/python WORK=/tmp/cg \
#     bash bench/gpu/caches.sh OUTDIR      (a dry run on a CPU box: device cpu, --cpu)
set -u
out="${1:?usage: caches.sh OUTDIR}"
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cpu="${CACHES_CPU:-0}"
work="${WORK:-/data}"
python="${PYTHON:-python3}"
mode="${COMPILE_MODE:-default}"  # torch.compile's mode in the server
sizes="${BATCH_SIZES:-1}"  # the batch sizes it compiles for (dynamic=False)
stage="${STAGE:-all}"
rounds="${ROUNDS:-3}"
# shellcheck source=_roundtrip.sh source-path=SCRIPTDIR
source "$root/bench/gpu/_roundtrip.sh"
VENV="$("$python" -c 'import sys; print(sys.prefix)')"

device=cuda:0 cpuflag=()
if [ "$cpu" = 1 ]; then device=cpu cpuflag=(--cpu); fi
ws="$work/cws" warm="$work/srv-warm" cold="$work/srv-cold" models="$work/cws-models"
if [ "$stage" = rounds ]; then
    [ -x "$warm/venv/bin/python" ] && [ -x "$cold/venv/bin/python" ] || {
        echo "no unpacked targets at $warm and $cold: run STAGE=prepare on this machine first"
        exit 2
    }
    REPRO="${REPRO:-/tmp/tool/bin/repro}"
fi
if [ -z "${REPRO:-}" ]; then
    echo "== repro from its wheel, in a clean venv"
    rm -rf /tmp/tool
    python3 -m venv /tmp/tool
    /tmp/tool/bin/pip install -q --no-index --find-links "$root/.whl" \
        --find-links "$root/.whl/deps" repro || exit 2
    REPRO=/tmp/tool/bin/repro
fi
repro() { env -u PYTHONPATH -u VIRTUAL_ENV "$REPRO" "$@"; }

# `phases:` of a server log (compiled_server.py's), as one JSON line tagged with $2 and $3
phases() {
    python3 - "$@" <<'PY'
import json, re, sys
text = open(sys.argv[1], errors="replace").read() if sys.argv[1] else ""
found = re.findall(r"phases: (\{[^}]*\})", text)
print(json.dumps({"side": sys.argv[2], "run": sys.argv[3], **(json.loads(found[-1]) if found else {})}))
PY
}

# time to serving of one `repro unpack --json` report ($1) and its wall ms ($2), tagged $3
serving() {
    python3 - "$@" <<'PY'
import json, sys
report, wall, side = json.load(open(sys.argv[1])), int(sys.argv[2]) / 1000, sys.argv[3]
rungs = ((report.get("smoke") or {}).get("ladder") or {}).get("rungs", [])
rung = next((r for r in rungs if r["name"] == "server"), None)
if rung is None or rung["status"] != "pass":
    sys.exit(f"{side}: the server rung did not pass: {rung and rung['summary']}")
facts = rung["facts"]
until = wall - rung["duration_s"]
print(json.dumps({"side": side, "unpack_wall_s": round(wall, 3),
                  "until_launch_s": round(until, 3), "ready_s": facts["ready_s"],
                  "ttft_s": facts["ttft_s"],
                  "first_token_s": round(until + facts["ready_s"] + facts["ttft_s"], 3),
                  "rungs": {r["name"]: [r["status"], r["duration_s"]] for r in rungs},
                  "log": facts.get("log")}))
PY
}

if [ "$stage" != rounds ]; then
rm -rf "$ws" "$ws.gone" "$warm" "$cold" "$models" /tmp/cws-bundles
echo "== the workspace: a compiled model's server, its caches warmed once"
mkdir -p "$ws/services" "$ws/cache" "$models"
cp "$root/bench/gpu/compiled_server.py" "$ws/serve.py"
env -u PYTHONPATH "$python" "$root/tests/support/make_tiny_llama.py" "$models/tiny" \
    --head-dim 64 || exit 2
cat > "$ws/repro.toml" <<EOF
[bundle]
name = "cws"

[env]
venv = "$VENV"

[files]
include = ["serve.py"]

[ladder]
timeout = 300
EOF
cat > "$ws/services/compiled.service" <<EOF
[Unit]
Description=a torch.compile'd model (bench/gpu/caches.sh)

[Service]
Environment=HF_HUB_OFFLINE=1
Environment=TRITON_CACHE_DIR=$ws/cache/triton TORCHINDUCTOR_CACHE_DIR=$ws/cache/inductor
ExecStart=$VENV/bin/python $ws/serve.py --model $models/tiny --port 8012 --device $device --mode $mode --batch-sizes $sizes
EOF
t=$(now)
env -u PYTHONPATH TRITON_CACHE_DIR="$ws/cache/triton" TORCHINDUCTOR_CACHE_DIR="$ws/cache/inductor" \
    timeout 300 "$python" "$ws/serve.py" --model "$models/tiny" --port 8012 --device "$device" --mode "$mode" --batch-sizes "$sizes" \
    > "$out/warmup-server.log" 2>&1 &
server=$!
until grep -q "listening on" "$out/warmup-server.log" 2>/dev/null; do
    kill -0 $server 2>/dev/null || { cat "$out/warmup-server.log"; exit 3; }
    sleep 0.5
done
T[warmup_compile]=$(ms_since $t)
kill $server; wait $server 2>/dev/null
grep "compiled in" "$out/warmup-server.log"
du -sh "$ws/cache"/* 2>/dev/null

echo "== pack: with --caches and without"
t=$(now); repro pack "$ws" --wheels all --offline --caches -o /tmp/cws-bundles/with/ \
    --json > "$out/pack-caches.json" || exit 4
T[pack_caches]=$(ms_since $t)
t=$(now); repro pack "$ws" --wheels all --offline -o /tmp/cws-bundles/without/ \
    --json > "$out/pack.json" || exit 4
T[pack]=$(ms_since $t)
python3 - "$out/pack-caches.json" <<'PY' || exit 4
import json, sys
packed = json.load(open(sys.argv[1]))
print("\n".join(packed["caches"]))
if "serve.py" not in packed["files"] or not packed["caches"]:
    sys.exit(f"serve.py or the caches not carried: {packed['files']}, {packed['left_out']}")
PY
repro inspect /tmp/cws-bundles/with/cws-1.tar --json > "$out/inspect.json"
mv "$ws" "$ws.gone"

echo "== elsewhere: both unpacked offline, the whole ladder run (time to serving)"
: > "$out/serving.jsonl"
for side in restored cold; do
    bundle=/tmp/cws-bundles/with/cws-1.tar target=$warm
    if [ $side = cold ]; then bundle=/tmp/cws-bundles/without/cws-1.tar target=$cold; fi
    t=$(now)
    repro unpack "$bundle" --target "$target" --offline --models "$models" "${cpuflag[@]}" \
        -v --json > "$out/unpack-$side.json" 2> "$out/unpack-$side.txt" || {
        tail -30 "$out/unpack-$side.txt"; exit 5; }
    T[unpack_$side]=$(ms_since $t)
    serving "$out/unpack-$side.json" "${T[unpack_$side]}" "$side" >> "$out/serving.jsonl" || exit 5
    tail -1 "$out/serving.jsonl"
    log=$(python3 -c 'import json,sys; print(json.loads(open(sys.argv[1]).readlines()[-1])["log"] or "")' "$out/serving.jsonl")
    phases "$log" "$side" serving >> "$out/phases.jsonl"
done
grep -i "caches" "$out/unpack-restored.txt"
cat "$warm/cache/caches.env"
cp "$warm/services/compiled.service" "$out/compiled.service"
python3 - "$out/serving.jsonl" <<'PY'
import json, sys
runs = {r["side"]: r for r in map(json.loads, open(sys.argv[1]))}
print(f"time to serving: cold {runs['cold']['first_token_s']} s, restored "
      f"{runs['restored']['first_token_s']} s: {runs['cold']['first_token_s'] / runs['restored']['first_token_s']:.2f}x")
PY
write_times
fi
# At most 8 files come back from the GPU host: the per-run files travel in one archive.
details() {
    (cd "$out" && tar cf "details-$stage.tar" --remove-files smoke-*.json logs-* \
        warmup-server.log pack.json pack-caches.json unpack-*.json unpack-*.txt \
        inspect.json 2>/dev/null)
}
[ "$stage" = prepare ] && { details; exit 0; }

echo "== $rounds rounds, alternated: the server rung, cold and restored"
: > "$out/runs.jsonl"
for round in $(seq 1 "$rounds"); do
    for side in cold restored; do
        target=$cold
        # the cold side's unit names ${REPRO_HOME}/cache/...: emptied before each run
        if [ $side = restored ]; then target=$warm; else rm -rf "$cold/cache"; fi
        repro smoke --bundle "$target/.repro/bundle" --venv "$target/venv" \
            --models "$models" --rungs server "${cpuflag[@]}" --log-dir "$out/logs-$side-$round" --json \
            > "$out/smoke-$side-$round.json"
        python3 - "$out/smoke-$side-$round.json" "$side" "$round" >> "$out/runs.jsonl" <<'PY'
import json, sys
report = json.load(open(sys.argv[1]))
rung = next(r for r in report["rungs"] if r["name"] == "server")
facts = rung.get("facts", {})
print(json.dumps({"side": sys.argv[2], "round": int(sys.argv[3]), "status": rung["status"],
                  "ready_s": facts.get("ready_s"), "ttft_s": facts.get("ttft_s"),
                  "summary": rung["summary"]}))
PY
        tail -1 "$out/runs.jsonl"
        phases "$(ls "$out/logs-$side-$round"/server-*.log 2>/dev/null | head -1)" "$side" \
            "$round" >> "$out/phases.jsonl"
    done
done
python3 - "$out/runs.jsonl" "$out/summary.json" "$mode" "$sizes" <<'PY'
import json, statistics, sys
runs = [json.loads(line) for line in open(sys.argv[1])]
summary = {}
for side in ("cold", "restored"):
    mine = [r for r in runs if r["side"] == side and r["ready_s"] is not None]
    first = [r["ready_s"] + (r["ttft_s"] or 0) for r in mine]
    summary[side] = {
        "runs": len(mine),
        "ready_s": [r["ready_s"] for r in mine],
        "ttft_s": [r["ttft_s"] for r in mine],
        "first_token_s": [round(x, 3) for x in first],
        "median_ready_s": statistics.median(r["ready_s"] for r in mine) if mine else None,
        "median_first_token_s": statistics.median(first) if first else None,
    }
cold, warm = summary["cold"]["median_first_token_s"], summary["restored"]["median_first_token_s"]
summary["first_token_ratio"] = round(cold / warm, 2) if cold and warm else None
summary["goal"] = "first token >= 3x sooner with the caches"
summary["config"] = {"mode": sys.argv[3], "batch_sizes": sys.argv[4]}
json.dump(summary, open(sys.argv[2], "w"), indent=2)
print(json.dumps(summary, indent=2))
PY
write_times
details
