#!/usr/bin/env bash
# Where `repro pack --wheels none --rehash` spends what `repro scan` does not, on the GPU
# host: both twice with each progress line time-stamped (bench/gpu/stamps.py), then pack
# under cProfile (the top of the profile by cumulative time, main thread).
#   bash bench/gpu/packnone.sh OUTDIR
set -u
out="${1:?usage: packnone.sh OUTDIR}"
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
mkdir -p "$out"
exec > >(tee -a "$out/log.txt") 2>&1
source "$root/bench/gpu/_setup.sh"
export PYTHONPATH="/tmp/site:$root"
st() { (cd /tmp && python3 "$root/bench/gpu/stamps.py" "$@"); }
for round in 1 2; do
    echo "== round $round: scan"
    st python3 -m repro scan --venv /tmp/oldbox/venv
    echo "== round $round: pack --wheels none --rehash"
    rm -rf /tmp/pn; st python3 -m repro pack /tmp/oldbox -o /tmp/pn/ --wheels none --offline --rehash --version 1
done
rm -rf /tmp/pn
(cd /tmp && python3 -m cProfile -o /tmp/pn.prof -m repro pack /tmp/oldbox -o /tmp/pn/ --wheels none \
    --offline --rehash --version 1 > /dev/null 2>&1)
python3 -c "
import pstats; s = pstats.Stats('/tmp/pn.prof'); s.sort_stats('cumulative').print_stats(40)
s.sort_stats('tottime').print_stats(25)" | grep -v '^$' | cut -c1-150
