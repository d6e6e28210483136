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
