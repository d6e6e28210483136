#!/usr/bin/env bash
# Hashing workers as threads or as processes on the GPU host's real venv (~49k files, 16
# cores): `repro scan`, a first pack (no scan cache), a pack again and a pack --wheels
# none --rehash, with REPRO_HASH_PROCESSES=0 (threads only), by default (at most 4
# processes for the small files) and with 8 processes, alternated, twice; then
# bench/gpu/scan_procs.py (the hashing alone, threads against processes) unless
# PACK_ONLY=1.
#
#   bash bench/gpu/h200-procs.sh OUTDIR
# Writes OUTDIR/procs.txt (the log), OUTDIR/procs.json and OUTDIR/scan-procs.json.
set -u
out="${1:?usage: h200-procs.sh OUTDIR}"
mkdir -p "$out"
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
exec > >(tee -a "$out/procs.txt") 2>&1
source "$root/bench/gpu/_setup.sh"

for round in 1 2; do
    for setting in 0 "" 8; do
        case "$setting" in 0) label=threads;; "") label="processes (default)";; *) label="processes $setting";; esac
        REPRO_HASH_PROCESSES=$setting run "$root" "$label: scan ($round)" scan --venv /tmp/oldbox/venv
        rm -rf /tmp/b /tmp/xdg
        REPRO_HASH_PROCESSES=$setting run "$root" "$label: first pack ($round)" pack /tmp/oldbox --wheels all --offline --version 1 -o /tmp/b/
        rm -rf /tmp/b
        REPRO_HASH_PROCESSES=$setting run "$root" "$label: pack again ($round)" pack /tmp/oldbox --wheels all --offline --version 1 -o /tmp/b/
        REPRO_HASH_PROCESSES=$setting run "$root" "$label: pack --wheels none --rehash ($round)" pack /tmp/oldbox --wheels none --offline --rehash --version 2 -o /tmp/b/
        rm -rf /tmp/b
    done
done
runs_json "$out/procs.json"
if [ "${PACK_ONLY:-0}" != 1 ]; then
    (cd /tmp && PYTHONPATH=/tmp/site python3 "$root/bench/gpu/scan_procs.py" "$out/scan-procs.json" 3)
fi
