#!/usr/bin/env bash
# Compile caches that travel (issue 33), on one H100/H200: time to the first token of a
# torch.compile'd model served by the workspace's own server, unpacked with the caches
# repro carried against the same unpack without them.
#
# The workspace (WORK/cws) holds a unit that runs bench/gpu/compiled_server.py (stdlib,
# torch, transformers: a tiny random Llama made by tests/support/make_tiny_llama.py,
# its forward compiled at start, readiness once compiled) in the image's venv, with
# TRITON_CACHE_DIR and TORCHINDUCTOR_CACHE_DIR under WORK/cws/cache. One run warms them;
# repro, installed from its wheel into a clean venv (/tmp/tool), packs the workspace
# twice, `--caches` and without; the workspace is moved away; both bundles are unpacked
# offline (--no-smoke) at WORK/srv-warm and WORK/srv-cold. Then, after one import of
# torch and transformers in each rebuilt venv (its bytecode), three rounds alternated of
# the ladder's server rung (`repro smoke --bundle TARGET/.repro/bundle --rungs server`,
# which launches the unit's command with TARGET/cache/caches.env as the units read it):
# `cold` (the cache directories its unit names, ${REPRO_HOME}/cache/..., emptied
# before each run) and `restored`.
# Each rung's ready_s (launch to the compile's end) and ttft_s (request to first token)
# go to runs.jsonl; medians and the ratio of first token (ready + TTFT) to summary.json.
# Goal: the first token at least 3x sooner with the caches.
#
#   bash bench/gpu/caches.sh OUTDIR          (.whl/ holds repro's wheel, .whl/deps/ its
#                                             dependencies for the image's Python 3.12)
#   COMPILE_MODE=max-autotune bash bench/gpu/caches.sh OUTDIR   (kernels benchmarked at compile)
#   CACHES_CPU=1 REPRO=.venv/bin/repro PYTHON=/path/venv/bin/python WORK=/tmp/cg \
#     bash bench/gpu/caches.sh OUTDIR      (a dry run on a CPU box: device cpu, --cpu)
set -u
out="${1:?usage: caches.sh OUTDIR}"
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cpu="${CACHES_CPU:-0}"
work="${WORK:-/data}"
python="${PYTHON:-python3}"
mode="${COMPILE_MODE:-default}"  # torch.compile mode of the server (max-autotune: as engines)
# shellcheck source=_roundtrip.sh source-path=SCRIPTDIR
source "$root/bench/gpu/_roundtrip.sh"
VENV="$("$python" -c 'import sys; print(sys.prefix)')"

device=cuda:0 cpuflag=()
if [ "$cpu" = 1 ]; then device=cpu cpuflag=(--cpu); fi
ws="$work/cws" warm="$work/srv-warm" cold="$work/srv-cold" models="$work/cws-models"
rm -rf "$ws" "$ws.gone" "$warm" "$cold" "$models" /tmp/cws-bundles
if [ -z "${REPRO:-}" ]; then
    echo "== repro from its wheel, in a clean venv"
    rm -rf /tmp/tool
    python3 -m venv /tmp/tool
    /tmp/tool/bin/pip install -q --no-index --find-links "$root/.whl" \
        --find-links "$root/.whl/deps" repro || exit 2
    REPRO=/tmp/tool/bin/repro
fi
repro() { env -u PYTHONPATH -u VIRTUAL_ENV "$REPRO" "$@"; }

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
ExecStart=$VENV/bin/python $ws/serve.py --model $models/tiny --port 8012 --device $device --mode $mode
EOF
t=$(now)
env -u PYTHONPATH TRITON_CACHE_DIR="$ws/cache/triton" TORCHINDUCTOR_CACHE_DIR="$ws/cache/inductor" \
    timeout 300 "$python" "$ws/serve.py" --model "$models/tiny" --port 8012 --device "$device" --mode "$mode" \
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

echo "== elsewhere: both unpacked offline"
t=$(now); repro unpack /tmp/cws-bundles/with/cws-1.tar --target "$warm" --offline --no-smoke \
    --models "$models" "${cpuflag[@]}" -v --json > "$out/unpack-caches.json" 2> "$out/unpack-caches.txt" || exit 5
T[unpack_caches]=$(ms_since $t)
grep -i "caches" "$out/unpack-caches.txt"
t=$(now); repro unpack /tmp/cws-bundles/without/cws-1.tar --target "$cold" --offline \
    --no-smoke --models "$models" "${cpuflag[@]}" --json > "$out/unpack.json" || exit 5
T[unpack]=$(ms_since $t)
cat "$warm/cache/caches.env"
cp "$warm/services/compiled.service" "$out/compiled.service"
for target in "$warm" "$cold"; do  # the venv's bytecode, before any timed start
    env -u PYTHONPATH "$target/venv/bin/python" -c \
        'import torch, transformers, torch._inductor.compile_fx; from transformers import LlamaForCausalLM'
done

echo "== three rounds, alternated: the server rung, cold and restored"
: > "$out/runs.jsonl"
for round in 1 2 3; do
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
    done
done
python3 - "$out/runs.jsonl" "$out/summary.json" <<'PY'
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
json.dump(summary, open(sys.argv[2], "w"), indent=2)
print(json.dumps(summary, indent=2))
PY
write_times
# At most 8 files come back from the GPU host: the per-run files travel in one archive.
(cd "$out" && tar cf details.tar --remove-files smoke-*.json logs-* warmup-server.log \
    pack.json pack-caches.json unpack.json unpack-caches.json unpack-caches.txt \
    inspect.json compiled.service 2>/dev/null)
