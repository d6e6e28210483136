#!/usr/bin/env bash
# The move planned without the target box, on the image's real CUDA venv (`nvidia-h200`):
# a workspace holding the image's venv (torch 2.11.0+cu130 from an index, the nvidia-*
# CUDA wheels, triton) is packed by a repro installed from its wheel, then
# `repro inspect BUNDLE --gpu X` judges every shared object of every distribution for
# the H200 it runs on, for a B300, a B200, an RTX PRO 6000 and an A10 (8.6); `pack
# --require-gpu` is tried for each and its exit code kept; the unpack preflight
# (`--dry-run`) judges the same audit against the real nvidia-smi of the host.
#
#   bash bench/gpu/inspect-gpu.sh OUTDIR    (.whl/ holds repro's wheel, .whl/deps/ its deps)
set -u
out="${1:?usage: inspect-gpu.sh OUTDIR}"
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
# shellcheck source=_roundtrip.sh source-path=SCRIPTDIR
source "$root/bench/gpu/_roundtrip.sh"

rm -rf /tmp/tool /data/plan /tmp/bundles /tmp/planned
python3 -m venv /tmp/tool
/tmp/tool/bin/pip install -q --no-index --find-links "$root/.whl" --find-links "$root/.whl/deps" repro || exit 2
repro=/tmp/tool/bin/repro
ws=/data/plan
mkdir -p "$ws/services" /tmp/bundles
t=$(now); cp -a "$VENV" "$ws/venv"; T[copy_venv]=$(ms_since $t)
du -sh "$ws/venv"
t=$(now); "$repro" pack "$ws" --wheels none -o /tmp/bundles/ --json --gpu H200 --gpu B300 > "$out/pack.json"
echo "pack exit $?"; T[pack]=$(ms_since $t)
bundle=$(ls /tmp/bundles/*.tar)
t=$(now); "$repro" pack "$ws" --wheels none -o /tmp/bundles/again.tar --json > /dev/null
echo "pack again exit $?"; T[pack_again]=$(ms_since $t)
tar xOf "$bundle" --wildcards '*/env/kernels.toml' > "$out/kernels.toml"
echo "distributions with GPU code: $(grep -c '^name = ' "$out/kernels.toml")"
for gpu in H200 B300 B200 "RTX PRO 6000" 8.6; do
    tag=$(echo "$gpu" | tr ' .' '__')
    { echo "== repro inspect BUNDLE --gpu '$gpu'"; } >> "$out/inspect.txt"
    t=$(now); "$repro" inspect "$bundle" --gpu "$gpu" >> "$out/inspect.txt" 2>&1
    rc=$?; T[inspect_$tag]=$(ms_since $t)
    echo "exit $rc" >> "$out/inspect.txt"
    echo "inspect --gpu '$gpu': exit $rc"
    "$repro" pack "$ws" --wheels none -o "/tmp/bundles/req-$tag.tar" --require-gpu "$gpu" \
        > /tmp/require.txt 2>&1
    rc=$?
    { echo "== repro pack --require-gpu '$gpu': exit $rc, output $(ls /tmp/bundles/req-$tag.tar 2>/dev/null || echo none)"
      grep -v '^pack: ' /tmp/require.txt; } >> "$out/require.txt"
    echo "pack --require-gpu '$gpu': exit $rc"
done
t=$(now); "$repro" unpack "$bundle" --target /tmp/planned --dry-run --json > "$out/dry-run.json"
echo "unpack --dry-run exit $?"; T[dry_run]=$(ms_since $t)
nvidia-smi --query-gpu=name,compute_cap --format=csv,noheader
write_times
