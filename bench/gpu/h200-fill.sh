#!/usr/bin/env bash
# Evidence run on one H200 (`nvidia-h200`): how pack's hole writers scale with threads on
# the 16-core host. Copies the image's CUDA venv, measures the disk's O_DIRECT write speed
# (dd), packs once with every file read (--rehash), then packs again (scan cache warm)
# with --jobs 2, 4, 8 and 16, each with its peak RSS and stage times.
#
#   bash bench/gpu/h200-fill.sh OUTDIR     (repro's missing dependencies in .whl/)
set -u
out="${1:?usage: h200-fill.sh OUTDIR}"
mkdir -p "$out"
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
exec > >(tee -a "$out/log.txt") 2>&1
if ls "$root"/.whl/*.whl >/dev/null 2>&1; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
        --target /tmp/site "$root"/.whl/*.whl || exit 2
fi
export PYTHONPATH="/tmp/site:$root" PYTHONUNBUFFERED=1
python3 -m compileall -q "$root/repro" > /dev/null
VENV="$(python3 -c 'import sys; print(sys.prefix)')"
echo "cores: $(nproc)"
rm -rf /tmp/oldbox; mkdir -p /tmp/oldbox; cp -a "$VENV" /tmp/oldbox/venv; du -sh /tmp/oldbox/venv
sync; sleep 3
stamp() { python3 -c 'import sys, time
t0 = time.time()
for line in sys.stdin:
    sys.stdout.write("%7.2f s %s" % (time.time() - t0, line))'; }
TIME=(); [ -x /usr/bin/time ] && TIME=(/usr/bin/time -f "%e s wall, peak RSS %M KiB")
for _ in 1 2; do
    t=$(date +%s%N)
    dd if=/dev/zero of=/tmp/dd.bin bs=8M count=900 oflag=direct status=none
    echo "dd 7.5 GB oflag=direct: $(( ($(date +%s%N) - t) / 1000000 )) ms"
    rm -f /tmp/dd.bin
done
run() {
    echo "== pack $*"
    rm -rf /tmp/b; "${TIME[@]}" python3 -m repro pack /tmp/oldbox --wheels all --offline --version 1 -o /tmp/b/ "$@" 2> >(stamp) > /dev/null
    rm -rf /tmp/b; sleep 2
}
run --rehash
for j in 16 8 4 2 8 4; do run --jobs "$j"; done
