#!/usr/bin/env bash
# Upgrades in place on the GPU host (issue 32), over a copy of the image's venv: a
# one-line patch change packed as a delta (its size against the full bundle and
# `rsync --stats` of the two extracted bundles), applied to a running target against a
# full unpack of the new bundle at a fresh path, a delta that changes one wheel (the
# files it rewrites, by inode and mtime, against that distribution's), and rollback;
# alternated, medians and paired ratios (`python -m bench.upgrade`, bench/README.md).
#
#   bash bench/gpu/upgrade.sh OUTDIR [bench.upgrade options...]
#     default: 3 runs after a warm-up, packed --wheels all --offline (no index here)
#
# repro's missing dependencies travel as wheels in .whl/ (bench/gpu/README.md).
# Variables: VENV (the venv measured; the image's python3's sys.prefix), WORK (the
# copy of it, the bundles and the targets: ~45 GB at the image's 7.77 GB venv;
# /tmp/upgrade), RUNS (3), MACHINE (the results' name; gpu-<the GPU's model>),
# UNPACK_ARGS (more arguments of every unpack, e.g. --cpu for a dry run without a GPU).
# Writes to OUTDIR: <date>-MACHINE-upgrade.json and .md, and log.txt.
set -u
out="${1:?usage: upgrade.sh OUTDIR [bench.upgrade options]}"
shift
mkdir -p "$out" && out="$(cd "$out" && pwd)"
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
exec > >(tee -a "$out/log.txt") 2>&1
source "$root/bench/gpu/_wheels.sh"
export PYTHONPATH="/tmp/site:$root"
VENV="${VENV:-$(python3 -c 'import sys; print(sys.prefix)')}"
WORK="${WORK:-/tmp/upgrade}"
RUNS="${RUNS:-3}"
gpu="$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1 \
    | grep -o -i -E 'h100|h200|b200|b300|a100' | head -1 | tr 'A-Z' 'a-z')"
MACHINE="${MACHINE:-gpu-${gpu:-unknown}}"
export XDG_CACHE_HOME="$WORK/xdg"
extra=()
for arg in ${UNPACK_ARGS:-}; do extra+=("--unpack-arg=$arg"); done
echo "cores: $(nproc); python: $(python3 --version); venv: $VENV"
echo "rsync: $(command -v rsync || echo 'not installed: the rsync anchor is left out')"
mkdir -p "$WORK"
df -h "$WORK" | tail -1
free -g | head -2
python3 -m compileall -q "$root/repro" "$root/bench" > /dev/null
cd "$root" && python3 -m bench.upgrade --venv "$VENV" --cache "$WORK/cache" \
    --work "$WORK/work" --offline --runs "$RUNS" --machine-name "$MACHINE" \
    --results "$out" "${extra[@]}" "$@"
status=$?
rm -rf "$WORK"
echo "bench.upgrade: exit $status"
exit "$status"
