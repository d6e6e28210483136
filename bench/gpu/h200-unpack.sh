#!/usr/bin/env bash
# unpack against `tar xf`, and the streamed round trip against `tar cf - | tar xf -`,
# with the disk each takes at its fullest, over the image's CUDA venv, alternated.
#   bash bench/gpu/h200-unpack.sh OUTDIR [ROUNDS]     (wheels in .whl/ as for h200.sh)
# Each command runs after a `sync`, into a target removed before; its wall time and the
# peak of the file system's used bytes above the start (diskpeak.py) are one JSON line
# of OUTDIR/runs.jsonl. LADDER=1: one more unpack with the ladder, its report kept;
# UV=0 leaves out the unpack by uv with a cold cache, UNPACK=0 unpack and `tar xf`,
# STREAM=0 the streamed round trips; FLOOR=1 adds the streamed round trip up to the
# install (`unpack - --dry-run`: received, verified, preflight passed).
set -u
out="${1:?usage: h200-unpack.sh OUTDIR [ROUNDS]}"
rounds="${2:-3}"
mkdir -p "$out"
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
exec > >(tee -a "$out/log.txt") 2>&1
source "$root/bench/gpu/_wheels.sh"
export PYTHONPATH="/tmp/site:$root"
python3 -m compileall -q "$root/repro" > /dev/null
VENV="${VENV:-$(python3 -c 'import sys; print(sys.prefix)')}"
SRV="${SRV:-/srv}"
export XDG_CACHE_HOME=/tmp/xdg
echo "cores: $(nproc); python: $(python3 --version)"
rm -rf /tmp/oldbox && mkdir -p /tmp/oldbox "$SRV" && cp -a "$VENV" /tmp/oldbox/venv
df -T /tmp "$SRV" | sed 's/^/df: /'
venv_bytes=$(du -sb /tmp/oldbox/venv | cut -f1)
venv_disk=$(du -sB1 /tmp/oldbox/venv | cut -f1)
echo "venv: $venv_bytes bytes apparent, $venv_disk on disk, $(find /tmp/oldbox/venv -type f | wc -l) files"
rm -rf /tmp/b && python3 -m repro pack /tmp/oldbox --wheels all --offline --version 1 -o /tmp/b/ > /dev/null 2>&1 || exit 3
ls -l /tmp/b
tar cf /tmp/venv.tar -C /tmp/oldbox venv
sync
measure() {  # LABEL COMMAND: fresh targets, a settled disk, then the command sampled
    # caches cold: uv's and repro's scan cache (every pack hashes the venv again). repro's
    # own wheels for setup_env.sh stay: built once per repro version (the pack above),
    # not once per pack (rebuilding them cost 2.7-4 s a pack on the VM; the runs of
    # 2026-12-03 removed them too)
    rm -rf "$SRV"/u "$SRV"/x "$SRV"/s "$SRV"/y "$XDG_CACHE_HOME/uv" "$XDG_CACHE_HOME/repro/scan"
    mkdir -p "$SRV"/x "$SRV"/y; sync
    python3 "$root/bench/gpu/diskpeak.py" "$1" "$SRV" "$2" | tee -a "$out/runs.jsonl"
}
R="python3 -m repro"
U="${UNPACK_ARGS:-}"  # e.g. --cpu where no GPU is
for round in $(seq "$rounds"); do
    echo "--- round $round"
    if [ "${UNPACK:-1}" = 1 ]; then
        measure "repro unpack --offline --no-smoke" \
            "$R unpack /tmp/b/oldbox-1.tar --target $SRV/u --offline --no-smoke $U --json > $out/unpack.json"
        measure "tar xf" "tar xf /tmp/venv.tar -C $SRV/x"
    fi
    if [ "${STREAM:-1}" = 1 ]; then
        measure "repro pack -o - | repro unpack -" \
            "$R pack /tmp/oldbox --wheels all --offline --version 1 -o - 2>/dev/null | $R unpack - --target $SRV/s --offline --no-smoke $U --json > $out/stream.json"
        measure "tar cf - | tar xf -" "tar cf - -C /tmp/oldbox venv | tar xf - -C $SRV/y"
    fi
    if [ "${FLOOR:-0}" = 1 ]; then
        # the streamed round trip up to the install: received, verified, preflight passed
        measure "repro pack -o - | repro unpack - --dry-run" \
            "$R pack /tmp/oldbox --wheels all --offline --version 1 -o - 2>/dev/null | $R unpack - --target $SRV/s --offline --no-smoke $U --dry-run > /dev/null"
    fi
    if [ "${UV:-1}" = 1 ]; then
        measure "repro unpack --offline --no-smoke --installer uv, cold uv cache" \
            "$R unpack /tmp/b/oldbox-1.tar --target $SRV/u --offline --no-smoke $U --installer uv > /dev/null"
    fi
done
# the rebuilt venv is the source's: the same freeze, every file of every RECORD as hashed
# (rebuilt through the stream when only the streamed round trip was measured)
rm -rf "$SRV/u"
if [ "${UNPACK:-1}" = 0 ] && [ "${STREAM:-1}" = 1 ]; then
    $R pack /tmp/oldbox --wheels all --offline --version 1 -o - 2>/dev/null \
        | $R unpack - --target "$SRV/u" --offline --no-smoke $U > "$out/rebuilt.txt" 2>&1
else
    $R unpack /tmp/b/oldbox-1.tar --target "$SRV/u" --offline --no-smoke $U > /dev/null 2>&1
fi
/tmp/oldbox/venv/bin/python -m pip freeze --all > /tmp/freeze-source.txt 2>/dev/null
"$SRV/u/venv/bin/python" -m pip freeze --all > /tmp/freeze-rebuilt.txt 2>/dev/null
if cmp -s /tmp/freeze-source.txt /tmp/freeze-rebuilt.txt; then
    echo "freeze: identical ($(wc -l < /tmp/freeze-source.txt) lines)"
else
    echo "freeze: DIFFERS"; diff /tmp/freeze-source.txt /tmp/freeze-rebuilt.txt | head -20
fi
$R verify "$SRV/u" 2>&1 | tail -3
if [ "${LADDER:-0}" = 1 ]; then
    rm -rf "$SRV/u"
    $R unpack /tmp/b/oldbox-1.tar --target "$SRV/u" --offline --json > "$out/unpack-ladder.json"
    echo "unpack with the ladder: exit $?"
fi
python3 - "$out" "$venv_disk" <<'PYEOF'
import json, statistics, sys
out, venv = sys.argv[1], int(sys.argv[2])
runs = [json.loads(line) for line in open(f"{out}/runs.jsonl")]
by = {}
for run in runs:
    by.setdefault(run["label"], []).append(run)
summary = {"venv_disk_bytes": venv, "groups": {}}
for label, group in by.items():
    walls = [r["wall_s"] for r in group]
    peaks = [r["disk_peak_bytes"] for r in group]
    summary["groups"][label] = {"wall_s": walls, "median_s": statistics.median(walls),
                                "disk_peak_over_venv": round(max(peaks) / venv, 3),
                                "rc": [r["rc"] for r in group]}
    print(f"{label}: median {statistics.median(walls):.2f} s {walls}, "
          f"disk peak {max(peaks) / venv:.2f}x the venv, exit {[r['rc'] for r in group]}")
m = {k: v["median_s"] for k, v in summary["groups"].items()}
ratios = {}
if "tar xf" in m:
    ratios["unpack / tar xf"] = m["repro unpack --offline --no-smoke"] / m["tar xf"]
if "tar cf - | tar xf -" in m:
    ratios["streamed round trip / tar cf - | tar xf -"] = (
        m["repro pack -o - | repro unpack -"] / m["tar cf - | tar xf -"])
floor = "repro pack -o - | repro unpack - --dry-run"
if floor in m and "tar cf - | tar xf -" in m:
    ratios["streamed to verified staging / tar cf - | tar xf -"] = (
        m[floor] / m["tar cf - | tar xf -"])
uv = "repro unpack --offline --no-smoke --installer uv, cold uv cache"
if uv in m:
    ratios["unpack with uv, cold cache / tar xf"] = m[uv] / m["tar xf"]
for name, value in ratios.items():
    print(f"{name}: {value:.2f}x")
summary["ratios"] = {k: round(v, 3) for k, v in ratios.items()}
report = {}
for name in ("unpack.json", "stream.json"):  # the file's unpack, else the streamed one
    try:
        report = json.load(open(f"{out}/{name}"))
        break
    except (OSError, ValueError):
        pass
need = [c for c in report.get("preflight", {}).get("checks", []) if c["name"] == "disk"]
summary["preflight_disk"] = need[0]["detail"] if need else None
print("preflight:", summary["preflight_disk"])
json.dump(summary, open(f"{out}/summary.json", "w"), indent=1)
PYEOF
