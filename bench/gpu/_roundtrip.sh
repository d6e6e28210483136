# shellcheck shell=bash disable=SC2154  # sourced: the caller sets root (and out)
# Sourced by the bench/gpu round-trip scripts (freshbox.sh, tfserve.sh) after they set
#   out=OUTDIR root=CHECKOUT
# Logs everything to $out/log.txt as well, defines `now`/`ms_since` and the timing table
# T (name -> ms), sets VENV to the image's venv and prints the host; `write_times` writes
# T to $out/times.json and shows it.
mkdir -p "$out"
export PYTHONUNBUFFERED=1
exec > >(tee -a "$out/log.txt") 2>&1
now() { date +%s%N; }
ms_since() { echo $(( ($(now) - $1) / 1000000 )); }
declare -A T
VENV="$(python3 -c 'import sys; print(sys.prefix)')"
echo "image venv: $VENV, $(python3 --version), $(nproc) cores"
nvidia-smi --query-gpu=name,driver_version,compute_cap --format=csv,noheader

write_times() {
    python3 - "$out/times.json" <<PYEOF
import json, sys
json.dump({$(for k in "${!T[@]}"; do printf '"%s": %s, ' "$k" "${T[$k]}"; done)}, open(sys.argv[1], "w"), indent=2)
PYEOF
    cat "$out/times.json"
}
