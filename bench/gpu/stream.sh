#!/usr/bin/env bash
# The streamed round trip against the tar pipe, and its two sides timed apart, over the
# image's CUDA venv, alternated: which side sets the round trip's pace.
#   bash bench/gpu/stream.sh OUTDIR [ROUNDS]     (wheels in .whl/ as for h200.sh)
# Each round runs, in this order, each after a `sync` into a removed target:
#   repro pack -o - | repro unpack -        the round trip (the default installer)
#   tar cf - | tar xf -                      the same venv through the tar pipe
#   repro pack -o - > /dev/null              pack alone (no sync before: it writes nothing)
#   cat BUNDLE | repro unpack -              unpack alone, of the bytes pack streams (kept
#                                            as a file once, untimed; page cache warm)
# Wall time and disk peak of each are JSON lines in OUTDIR/runs.jsonl (diskpeak.py);
# medians, each round's pairs and the ratios in summary.json and log.txt. One untimed
# `pack -o - -v` first, each progress line time-stamped (stamps.py): when the first
# wheel leaves. ROUNDS=5 takes about 8 minutes on the H200 host (a round about 80 s and
# the syncs). APART=0 leaves the two timings apart out. VENV, SRV, UNPACK_ARGS (e.g.
# --cpu) for a dry run elsewhere.
set -u
out="${1:?usage: stream.sh OUTDIR [ROUNDS]}"
rounds="${2:-5}"
mkdir -p "$out"
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
exec > >(tee -a "$out/log.txt") 2>&1
source "$root/bench/gpu/_wheels.sh"
export PYTHONPATH="/tmp/site:$root"
python3 -m compileall -q "$root/repro" > /dev/null
VENV="${VENV:-$(python3 -c 'import sys; print(sys.prefix)')}"
SRV="${SRV:-/srv}"
export XDG_CACHE_HOME=/tmp/xdg
echo "cores: $(nproc); python: $(python3 --version); repro: $(git -C "$root" log -1 --format=%h 2>/dev/null)"
rm -rf /tmp/oldbox && mkdir -p /tmp/oldbox "$SRV" && cp -a "$VENV" /tmp/oldbox/venv
venv_disk=$(du -sB1 /tmp/oldbox/venv | cut -f1)
echo "venv: $venv_disk bytes on disk, $(find /tmp/oldbox/venv -type f | wc -l) files"
R="python3 -m repro"
U="${UNPACK_ARGS:-}"
P="$R pack /tmp/oldbox --wheels all --offline --version 1 -o -"
# the scan cache warm, as for every pack but the first (repro's own wheels built once)
$P > /tmp/stream.tar 2>/dev/null || exit 3
ls -l /tmp/stream.tar
echo "--- pack -o - > /dev/null, stage by stage (untimed)"
python3 "$root/bench/gpu/stamps.py" $P -v
sync
measure() {  # LABEL COMMAND [nosync]: fresh targets, a settled disk, then the command
    rm -rf "$SRV"/s "$SRV"/y "$SRV"/c
    mkdir -p "$SRV"/y
    [ "${3:-}" = nosync ] || sync
    python3 "$root/bench/gpu/diskpeak.py" "$1" "$SRV" "$2" | tee -a "$out/runs.jsonl"
}
for round in $(seq "$rounds"); do
    echo "--- round $round"
    measure "repro pack -o - | repro unpack -" \
        "$P 2>/dev/null | $R unpack - --target $SRV/s --offline --no-smoke $U --json > $out/stream.json"
    measure "tar cf - | tar xf -" "tar cf - -C /tmp/oldbox venv | tar xf - -C $SRV/y"
    if [ "${APART:-1}" = 1 ]; then
        measure "repro pack -o - > /dev/null" "$P 2>/dev/null > /dev/null" nosync
        measure "cat bundle | repro unpack -" \
            "cat /tmp/stream.tar | $R unpack - --target $SRV/c --offline --no-smoke $U > /dev/null 2>&1"
    fi
done
# the venv rebuilt through the stream is the source's: the same freeze, repro verify
/tmp/oldbox/venv/bin/python -m pip freeze --all > /tmp/freeze-source.txt 2>/dev/null
rm -rf "$SRV/s"
$P 2>/dev/null | $R unpack - --target "$SRV/s" --offline --no-smoke $U > /dev/null 2>&1
"$SRV/s/venv/bin/python" -m pip freeze --all > /tmp/freeze-rebuilt.txt 2>/dev/null
if cmp -s /tmp/freeze-source.txt /tmp/freeze-rebuilt.txt; then
    echo "freeze: identical ($(wc -l < /tmp/freeze-source.txt) lines)"
else
    echo "freeze: DIFFERS"; diff /tmp/freeze-source.txt /tmp/freeze-rebuilt.txt | head -20
fi
$R verify "$SRV/s" 2>&1 | tail -3
python3 - "$out" "$venv_disk" <<'PYEOF'
import json, statistics, sys
out, venv = sys.argv[1], int(sys.argv[2])
runs = [json.loads(line) for line in open(f"{out}/runs.jsonl")]
by = {}
for run in runs:
    by.setdefault(run["label"], []).append(run)
summary = {"venv_disk_bytes": venv, "groups": {}, "ratios": {}}
for label, group in by.items():
    walls = [r["wall_s"] for r in group]
    summary["groups"][label] = {
        "wall_s": walls, "median_s": statistics.median(walls), "rc": [r["rc"] for r in group],
        "disk_peak_over_venv": round(max(r["disk_peak_bytes"] for r in group) / venv, 3)}
    print(f"{label}: median {statistics.median(walls):.2f} s {walls}, exit {[r['rc'] for r in group]}")
trip, tar = "repro pack -o - | repro unpack -", "tar cf - | tar xf -"
pairs = [(trip, tar), ("repro pack -o - > /dev/null", trip), ("cat bundle | repro unpack -", trip),
         ("cat bundle | repro unpack -", tar)]
for a, b in pairs:
    if a in by and b in by:
        each = [x["wall_s"] / y["wall_s"] for x, y in zip(by[a], by[b])]
        summary["ratios"][f"{a} / {b}"] = {
            "medians": round(summary["groups"][a]["median_s"] / summary["groups"][b]["median_s"], 3),
            "paired_median": round(statistics.median(each), 3),
            "pairs": [round(r, 3) for r in each]}
        print(f"{a} / {b}: {summary['ratios'][f'{a} / {b}']['medians']:.2f}x by the medians, "
              f"paired median {statistics.median(each):.2f}x, rounds {[round(r, 2) for r in each]}")
json.dump(summary, open(f"{out}/summary.json", "w"), indent=1)
PYEOF
