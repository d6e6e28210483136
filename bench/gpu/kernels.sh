#!/usr/bin/env bash
# Kernels for the new architecture, on one H200 (`nvidia-h200`, sm_90), offline (issue 31).
# A tiny torch CUDA extension (bench/gpu/kernelext: `reprokernel.add_one(x)`) is built with
# TORCH_CUDA_ARCH_LIST=8.0 (sm_80 only, no PTX) and installed from its source directory
# into a copy of the image's venv, in a workspace whose repro.toml names its check
# (`[kernels.reprokernel] check = ["{python}", "check_op.py"]`). Then, with repro
# installed from its wheel into a tool venv:
#   1. the op run in the source venv fails on the H200 (no code for 9.0);
#   2. `repro pack --wheels all --offline`; `repro inspect --gpu H200` exits 4 and says
#      none for reprokernel;
#   3. the workspace and the source tree moved away, `repro unpack --offline` at another
#      path: the preflight finds no sm_90 code, the carried source is rebuilt for 9.0
#      (`--rebuild-kernels auto`, the default), the kernels rung runs check_op.py on
#      cuda:0 against torch's x + 1; the rebuilt .so's fatbin is read back;
#   4. the same extension installed from a wheel instead (direct_url.json names a file,
#      no source carried), packed again: the unpack stops at the preflight with the hint.
# Everything goes to OUT: log.txt (all output), times.json, pack.json, inspect.txt,
# nosource.txt, unpack-report.json, build.log, state.toml, summary.txt (the numbers).
#
#   bash bench/gpu/kernels.sh OUTDIR   (from a checkout; .whl/ holds repro's wheel and
#                                       .whl/deps/ its dependencies for Python 3.12)
set -euo pipefail
out="${1:?usage: kernels.sh OUTDIR}"
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
mkdir -p "$out"
out="$(cd "$out" && pwd)"
exec > >(tee -a "$out/log.txt") 2>&1
export PYTHONUNBUFFERED=1 PIP_NO_INDEX=1 PIP_DISABLE_PIP_VERSION_CHECK=1

now() { date +%s%N; }
ms_since() { echo $(( ($(now) - $1) / 1000000 )); }
declare -A T RC
# timed NAME SECONDS CMD...: run CMD under a timeout, record its wall ms in T[NAME] and
# its exit code in RC[NAME]; a failure is recorded, not fatal (the caller judges it)
timed() {
    local name="$1" limit="$2"; shift 2
    local t rc=0
    t=$(now)
    timeout "$limit" "$@" || rc=$?
    T[$name]=$(ms_since "$t")
    RC[$name]=$rc
    echo "-- $name: exit $rc in ${T[$name]} ms" >&2
}
# a repro or target command without the image's own PYTHONPATH / VIRTUAL_ENV
clean() { env -u PYTHONPATH -u VIRTUAL_ENV "$@"; }

VENV="$(python3 -c 'import sys; print(sys.prefix)')"
echo "image venv: $VENV, $(python3 --version), $(nproc) cores"
nvidia-smi --query-gpu=name,driver_version,compute_cap --format=csv,noheader || true

ws=/data/kws src=/data/kernelext bundles=/tmp/kbundles
srv=/srv/kws srv_nosrc=/srv/kws-nosrc
rm -rf /tmp/tool "$ws" "$ws.gone" "$src" "$src.gone" /tmp/kwheel-src /tmp/kwheels \
    "$bundles" "$srv" "$srv_nosrc"
mkdir -p "$bundles" /tmp/kwheels

echo "== the toolchain: nvcc and the CUDA headers torch's cpp_extension will use"
nvcc_path="$(command -v nvcc || true)"
if [ -z "$nvcc_path" ]; then
    for candidate in /usr/local/cuda/bin/nvcc /usr/local/cuda-*/bin/nvcc \
        "$(find "$VENV" -path '*/bin/nvcc' -type f 2>/dev/null | head -n 1)"; do
        if [ -n "$candidate" ] && [ -x "$candidate" ]; then nvcc_path="$candidate"; break; fi
    done
fi
if [ -z "$nvcc_path" ]; then echo "no nvcc on this host: nothing to build"; exit 2; fi
PATH="$(dirname "$nvcc_path"):$PATH"
CUDA_HOME="${CUDA_HOME:-$(dirname "$(dirname "$nvcc_path")")}"
export PATH CUDA_HOME
echo "nvcc: $nvcc_path; CUDA_HOME=$CUDA_HOME"
nvcc --version | tail -n 2
command -v ninja || echo "no ninja: cpp_extension falls back to setuptools' compiler loop"
clean python3 -c 'import setuptools, torch; print("setuptools", setuptools.__version__, "torch", torch.__version__, "cuda", torch.version.cuda, torch.cuda.get_arch_list())' || true

echo "== repro from its wheel, offline"
python3 -m venv /tmp/tool
clean /tmp/tool/bin/pip install -q --no-index --find-links "$root/.whl" \
    --find-links "$root/.whl/deps" repro
repro=/tmp/tool/bin/repro
clean "$repro" --version || true

echo "== the old box: a copy of the image's venv, the extension built for sm_80 from its source dir"
mkdir -p "$ws"
t=$(now); cp -a "$VENV" "$ws/venv"; T[copy_venv]=$(ms_since "$t")
cp -a "$root/bench/gpu/kernelext" "$src"
cp "$src/check_op.py" "$ws/check_op.py"
cat > "$ws/repro.toml" <<'EOF'
[bundle]
name = "kws"

[env]
venv = "venv"

[files]
include = ["check_op.py"]

[kernels.reprokernel]
check = ["{python}", "check_op.py"]
EOF
# from its parent, as a user would (`pip install ./kernelext`): direct_url.json names the dir
cd "$(dirname "$src")"
TORCH_CUDA_ARCH_LIST=8.0 timed build_install 300 env -u PYTHONPATH -u VIRTUAL_ENV "$ws/venv/bin/python" -m pip install \
    --no-build-isolation --no-deps --no-index "./$(basename "$src")"
cd "$root"
if [ "${RC[build_install]}" != 0 ]; then echo "the extension did not build"; exit 3; fi
site="$(clean "$ws/venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["platlib"])')"
cat "$site"/reprokernel-0.1.0.dist-info/direct_url.json; echo
so_old="$(ls "$site"/reprokernel/_C*.so)"
echo "built: $so_old"
clean /tmp/tool/bin/python -c 'import sys; from repro.gpu.cubin import elf_archs; print("archs of the built .so:", elf_archs(sys.argv[1]))' "$so_old" || true
if command -v cuobjdump > /dev/null; then cuobjdump --list-elf "$so_old" || true; fi
echo "source tree after the build (what the packer sees):"
(cd "$src" && find . -maxdepth 3 | sort)

echo "== before the move: the op on this H200 from the sm_80 build"
cd "$ws"
timed check_before 120 env -u PYTHONPATH -u VIRTUAL_ENV "$ws/venv/bin/python" check_op.py > /tmp/kcheck-before.json
cd "$root"
cat /tmp/kcheck-before.json

echo "== pack (--wheels all, offline), then inspect --gpu H200"
timed pack 240 env -u PYTHONPATH -u VIRTUAL_ENV "$repro" pack "$ws" --wheels all --offline -o "$bundles/with-source.tar" \
    --gpu H200 --json > "$out/pack.json"
ls -la "$bundles"
{
    echo "\$ repro inspect with-source.tar --gpu H200"
    timed inspect 120 env -u PYTHONPATH -u VIRTUAL_ENV "$repro" inspect "$bundles/with-source.tar" --gpu H200
    echo
    echo "\$ repro inspect with-source.tar --gpu sm_80 --gpu H200 --gpu B300"
    timed inspect_more 120 env -u PYTHONPATH -u VIRTUAL_ENV "$repro" inspect "$bundles/with-source.tar" --gpu sm_80 --gpu H200 --gpu B300
} > "$out/inspect.txt" 2>&1
cat "$out/inspect.txt"
# `timed` ran in the braces' redirection, the same shell: its T and RC are here
reprokernel_line="$(grep -i 'reprokernel' "$out/inspect.txt" | head -n 3 || true)"

echo "== elsewhere: the workspace and the source tree gone; unpack offline with the ladder"
mv "$ws" "$ws.gone"; mv "$src" "$src.gone"
timed unpack 420 env -u PYTHONPATH -u VIRTUAL_ENV "$repro" unpack "$bundles/with-source.tar" --target "$srv" --offline \
    --rebuild-kernels auto --json > "$out/unpack.json"
cp "$srv/.repro/unpack-report.json" "$out/unpack-report.json" 2>/dev/null || cp "$out/unpack.json" "$out/unpack-report.json"
rm -f "$out/unpack.json"
cp "$srv/.repro/kernels/reprokernel/build.log" "$out/build.log" 2>/dev/null || echo "(no build.log)" > "$out/build.log"
cp "$srv/.repro/state.toml" "$out/state.toml" 2>/dev/null || echo "(no state.toml)" > "$out/state.toml"
so_new="$(ls "$srv"/venv/lib/python3*/site-packages/reprokernel/_C*.so 2>/dev/null || true)"
archs_new="(no rebuilt .so)"
if [ -n "$so_new" ]; then
    archs_new="$(clean /tmp/tool/bin/python -c 'import sys; from repro.gpu.cubin import elf_archs; print(elf_archs(sys.argv[1]))' "$so_new" || true)"
    if command -v cuobjdump > /dev/null; then cuobjdump --list-elf "$so_new" || true; fi
fi
echo "archs of the rebuilt .so: $archs_new"
timed verify 120 env -u PYTHONPATH -u VIRTUAL_ENV "$repro" verify "$srv"
mv "$ws.gone" "$ws"; mv "$src.gone" "$src"

echo "== the source not carried: the extension from a wheel (direct_url.json names a file)"
cp -a "$root/bench/gpu/kernelext" /tmp/kwheel-src
TORCH_CUDA_ARCH_LIST=8.0 timed build_wheel 300 env -u PYTHONPATH -u VIRTUAL_ENV "$ws/venv/bin/python" -m pip wheel \
    --no-build-isolation --no-deps --no-index -w /tmp/kwheels /tmp/kwheel-src
clean "$ws/venv/bin/python" -m pip uninstall -y reprokernel
clean "$ws/venv/bin/python" -m pip install --no-deps --no-index /tmp/kwheels/reprokernel-*.whl
cat "$site"/reprokernel-0.1.0.dist-info/direct_url.json; echo
# no [kernels] table: nothing names a source for it
python3 - "$ws/repro.toml" <<'PY'
import sys
path = sys.argv[1]
text = open(path).read()
open(path, "w").write(text.split("[kernels.reprokernel]")[0].rstrip() + "\n")
PY
cat "$ws/repro.toml"
timed pack_nosource 240 env -u PYTHONPATH -u VIRTUAL_ENV "$repro" pack "$ws" --wheels all --offline -o "$bundles/no-source.tar" --json
mv "$ws" "$ws.gone"
{
    echo "\$ repro inspect no-source.tar --gpu H200"
    timed inspect_nosource 120 env -u PYTHONPATH -u VIRTUAL_ENV "$repro" inspect "$bundles/no-source.tar" --gpu H200
    echo "exit ${RC[inspect_nosource]}"
    echo
    echo "\$ repro unpack no-source.tar --target $srv_nosrc --offline"
    timed unpack_nosource 300 env -u PYTHONPATH -u VIRTUAL_ENV "$repro" unpack "$bundles/no-source.tar" \
        --target "$srv_nosrc" --offline
    echo "exit ${RC[unpack_nosource]}"
} > "$out/nosource.txt" 2>&1
cat "$out/nosource.txt"
mv "$ws.gone" "$ws"

echo "== times"
python3 - "$out/times.json" <<PYEOF
import json, sys
json.dump({"ms": {$(for k in "${!T[@]}"; do printf '"%s": %s, ' "$k" "${T[$k]}"; done)},
           "exit": {$(for k in "${!RC[@]}"; do printf '"%s": %s, ' "$k" "${RC[$k]}"; done)}},
          open(sys.argv[1], "w"), indent=2, sort_keys=True)
PYEOF
cat "$out/times.json"

echo "== summary"
SO_OLD="$so_old" ARCHS_NEW="$archs_new" INSPECT_LINES="$reprokernel_line" \
    CHECK_BEFORE="$(cat /tmp/kcheck-before.json)" \
    clean /tmp/tool/bin/python "$root/bench/gpu/kernels_summary.py" "$out" | tee "$out/summary.txt"
