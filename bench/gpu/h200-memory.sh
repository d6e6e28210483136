#!/usr/bin/env bash
# Peak RSS of pack on the GPU host's real venv (~49k files), this checkout against an
# older one (OLD_TREE, a directory holding an older `repro/` package; optional), run
# alternately; and scan / check at --jobs 4, 8, 16 (does hashing scale past 8 threads?;
# PACK_ONLY=1 leaves these out).
#
#   bash bench/gpu/h200-memory.sh OUTDIR [OLD_TREE]
# Writes OUTDIR/memory.txt (the log) and OUTDIR/memory.json.
set -u
out="${1:?usage: h200-memory.sh OUTDIR [OLD_TREE]}"
old="${2:-}"
mkdir -p "$out"
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
exec > >(tee -a "$out/memory.txt") 2>&1
source "$root/bench/gpu/_setup.sh"
[ -n "$old" ] && python3 -m compileall -q "$old/repro" > /dev/null
trees=("$root")
[ -n "$old" ] && trees=("$root" "$old")
for round in 1 2; do
    for tree in "${trees[@]}"; do
        name=new; [ "$tree" = "$root" ] || name=old
        rm -rf /tmp/b /tmp/xdg
        # a first pack (no scan cache yet: older trees' --rehash saved none), then again
        run "$tree" "$name first pack ($round)" pack /tmp/oldbox --wheels all --offline --version 1 -o /tmp/b/
        rm -rf /tmp/b
        run "$tree" "$name pack again ($round)" pack /tmp/oldbox --wheels all --offline --version 1 -o /tmp/b/
        [ "$round" = 2 ] || rm -rf /tmp/b
    done
done
if [ "${PACK_ONLY:-0}" != 1 ]; then
    for jobs in 16 8 4; do
        run "$root" "scan --jobs $jobs" scan --venv /tmp/oldbox/venv --jobs "$jobs"
        run "$root" "check --jobs $jobs" check /tmp/b/oldbox-1.tar --jobs "$jobs"
    done
    for jobs in 16 8 4; do
        run "$root" "scan --jobs $jobs (2)" scan --venv /tmp/oldbox/venv --jobs "$jobs"
        run "$root" "check --jobs $jobs (2)" check /tmp/b/oldbox-1.tar --jobs "$jobs"
    done
fi
runs_json "$out/memory.json"
