#!/usr/bin/env bash
# The benchmark harness (`python -m bench`) on the GPU host, over a copy of the image's own
# venv (`--venv`): the same contenders, alternation, limits and goals as on the 2-core VM.
#
#   bash bench/gpu/harness.sh OUTDIR [bench options...]
#     e.g.  bash bench/gpu/harness.sh "$OUT" --only check --only scan --runs 5
#           bash bench/gpu/harness.sh "$OUT" --only unpack --only roundtrip --runs 3
# Groups: check, scan, pack, unpack (with its disk peak and preflight's need), roundtrip
# (pack -o - | unpack -, against tar | tar), scaling-pack and scaling (with --scaling N).
#
# repro's missing dependencies and venv-pack travel as wheels in .whl/ (bench/gpu/README.md).
# A results file already in bench/results/ under the same name (--machine-name, default
# gpu-h200) is merged into: run one group per call and the file gathers them.
# Writes to OUTDIR: the results .json and .md, and log.txt.
set -u
out="${1:?usage: harness.sh OUTDIR [bench options]}"
shift
mkdir -p "$out"
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
exec > >(tee -a "$out/log.txt") 2>&1
source "$root/bench/gpu/_wheels.sh"
export PYTHONPATH="/tmp/site:$root"
cache=/tmp/bench-cache
# venv-pack from its carried wheel (installed into /tmp/site above): the host reaches no
# index, so the harness's own tool venv could not install it
mkdir -p "$cache/tools/bin"
printf '#!/bin/sh\nexec python3 -m venv_pack "$@"\n' > "$cache/tools/bin/venv-pack"
chmod +x "$cache/tools/bin/venv-pack"
echo "cores: $(nproc),$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2); GNU time: $(ls /usr/bin/time 2>&1)"
df -h /tmp | tail -1
venv="$(python3 -c 'import sys; print(sys.prefix)')"
results="$root/bench/results"
touch /tmp/harness-started
cd /tmp && python3 -m bench --venv "$venv" --cache "$cache" --results "$results" \
    --machine-name gpu-h200 "$@"
status=$?
# the files this run wrote (whatever --machine-name named them)
find "$results" -maxdepth 1 -newer /tmp/harness-started \( -name '*.json' -o -name '*.md' \) \
    -exec cp {} "$out"/ \;
exit $status
