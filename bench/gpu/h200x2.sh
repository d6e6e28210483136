#!/usr/bin/env bash
# Evidence run on two H200s (the `nvidia-h200-x2` device kind): the ladder's python,
# torch and nccl rungs on the machine's own environment. The environment is passed
# through unchanged (NCCL_NVLS_ENABLE=0, TORCH_SYMM_MEM_DISABLE_MULTICAST=1 and
# NVSHMEM_DISABLE_NVLS=1 stay as the machine sets them).
#   bash bench/gpu/h200x2.sh OUTDIR
set -u
out="${1:?usage: h200x2.sh OUTDIR}"
mkdir -p "$out"
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
export PYTHONUNBUFFERED=1
exec > >(tee -a "$out/log-x2.txt") 2>&1
if ls "$root"/.whl/*.whl >/dev/null 2>&1; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
        --target /tmp/site "$root"/.whl/*.whl || exit 2
fi
export PYTHONPATH="/tmp/site:$root"
nvidia-smi > "$out/nvidia-smi-x2.txt" 2>&1
nvidia-smi topo -m >> "$out/nvidia-smi-x2.txt" 2>&1
env | grep -E '^(NCCL|TORCH_SYMM|NVSHMEM)_' | sort
PY="$(python3 -c 'import sys; print(sys.executable)')"
python3 -m repro smoke --python "$PY" --rungs python,torch,nccl --json > "$out/ladder-h200x2.json"
echo "smoke exit $?"
# The same rungs inside `repro unpack`'s ladder: a copy of the image's venv packed with
# every wheel, unpacked offline at another path, the whole ladder run in the rebuilt
# venv (nccl across both GPUs). VENV, SRV and UNPACK_ARGS (e.g. --cpu) for a dry run
# elsewhere.
VENV="${VENV:-$(python3 -c 'import sys; print(sys.prefix)')}"
SRV="${SRV:-/srv}"
rm -rf /tmp/x2box /tmp/x2b "$SRV/x2" && mkdir -p /tmp/x2box "$SRV" && cp -a "$VENV" /tmp/x2box/venv
python3 -m repro pack /tmp/x2box --wheels all --offline --version 1 -o /tmp/x2b/ > /dev/null 2>&1 || exit 3
python3 -m repro unpack /tmp/x2b/x2box-1.tar --target "$SRV/x2" --offline ${UNPACK_ARGS:-} \
    --json > "$out/unpack-ladder-x2.json"
echo "unpack with the ladder: exit $?"
python3 - "$out/unpack-ladder-x2.json" <<'PYEOF'
import json, sys
report = json.load(open(sys.argv[1]))
for rung in ((report.get("smoke") or {}).get("ladder") or {}).get("rungs", []):
    print(f"rung {rung['name']}: {rung['status']}: {rung['summary']}")
PYEOF
