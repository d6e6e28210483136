#!/usr/bin/env bash
# Pack and unpack of the image's CUDA venv through the page cache and past it
# (REPRO_DIRECT_IO=1), alternated A B A B on a settled disk: the copy that makes the
# "old box" is synced first, so no run competes with its writeback.
#   bash bench/gpu/h200-writes.sh OUTDIR     (wheels in .whl/ as for h200.sh)
set -u
out="${1:?usage: h200-writes.sh OUTDIR}"
mkdir -p "$out"
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
exec > >(tee -a "$out/log.txt") 2>&1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site "$root"/.whl/*.whl || exit 2
export PYTHONPATH="/tmp/site:$root"
python3 -m compileall -q "$root/repro" > /dev/null
VENV="$(python3 -c 'import sys; print(sys.prefix)')"
rm -rf /tmp/oldbox && mkdir -p /tmp/oldbox && cp -a "$VENV" /tmp/oldbox/venv && sync
now() { date +%s%N; }
for round in 1 2 3; do
    for direct in 0 1; do
        rm -rf /tmp/b; sync
        t=$(now); REPRO_DIRECT_IO=$direct python3 -m repro pack /tmp/oldbox --wheels all \
            --offline --version 1 -o /tmp/b/ > /dev/null 2>&1; rc=$?
        echo "round $round pack REPRO_DIRECT_IO=$direct exit $rc: $(( ($(now) - t) / 1000000 )) ms"
    done
done
rm -rf /tmp/b; python3 -m repro pack /tmp/oldbox --wheels all --offline --version 1 -o /tmp/b/ > /dev/null 2>&1
cat /tmp/b/oldbox-1.tar > /dev/null
python3 -m repro unpack /tmp/b/oldbox-1.tar --offline --no-smoke --target /srv/warm > /dev/null 2>&1  # fills uv's cache
rm -rf /srv/warm
for round in 1 2 3; do
    for direct in 0 1; do
        rm -rf /srv/u; sync
        t=$(now); REPRO_DIRECT_IO=$direct python3 -m repro unpack /tmp/b/oldbox-1.tar --offline \
            --no-smoke --target /srv/u > /dev/null 2>&1; rc=$?
        echo "round $round unpack --no-smoke REPRO_DIRECT_IO=$direct exit $rc: $(( ($(now) - t) / 1000000 )) ms"
    done
done
rm -rf /srv/u /tmp/b
