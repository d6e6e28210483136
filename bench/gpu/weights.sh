#!/usr/bin/env bash
# Hashing a model's weight set on the GPU host: repro's parallel hashing (what pack pins
# weights with, what unpack --verify-weights and verify --weights check them with)
# against sha256sum of the same synthetic .safetensors shards, with cat as the read
# limit, on a warm page cache and a cold one (`python -m bench.weights`).
#
#   bash bench/gpu/weights.sh OUTDIR [bench.weights options...]
#     default: 16 shards x 1024 MB (16 GB) under /tmp/bench-weights, 5 runs
#     e.g.     bash bench/gpu/weights.sh "$OUT" --shards 32 --shard-mb 2048 --runs 3
#
# repro's missing dependencies travel as wheels in .whl/ (bench/gpu/README.md).
# Writes to OUTDIR: gpu-h200-weights.json and .md, and log.txt.
set -u
out="${1:?usage: weights.sh OUTDIR [bench.weights options]}"
shift
mkdir -p "$out"
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
exec > >(tee -a "$out/log.txt") 2>&1
source "$root/bench/gpu/_wheels.sh"
export PYTHONPATH="/tmp/site:$root"
echo "cores: $(nproc),$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2)"
echo "sha256sum: $(sha256sum --version | head -1)"
df -h /tmp | tail -1
free -g | head -2
cd /tmp && python3 -m bench.weights --shards 16 --shard-mb 1024 --runs 5 \
    --machine gpu-h200 --out "$out/gpu-h200-weights" "$@"
