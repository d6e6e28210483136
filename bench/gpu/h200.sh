#!/usr/bin/env bash
# Evidence run on one H200 (the `nvidia-h200` device kind): the smoke ladder on the
# machine's own torch environment, two deliberately broken cases, and the air-gapped
# round trip of the image's real CUDA venv (pack --wheels all, check, unpack --offline,
# ladder in the rebuilt venv), timed against the copy approach (tar cf / tar xf). The
# first pack reads every file; "pack_again" finds the scan cache warm; the page-cache
# pack and pack --wheels none run with --rehash, to compare with the first.
#
#   bash bench/gpu/h200.sh OUTDIR        (from a checkout; repro's missing dependencies
#                                          as wheels in .whl/, see bench/gpu/README.md)
# Writes at most 8 files to OUTDIR: nvidia-smi.txt, ladder-h200.json, ladder-broken.json,
# roundtrip.json, pack.json, unpack-report.json, check.json, log.txt.
set -u
out="${1:?usage: h200.sh OUTDIR}"
mkdir -p "$out"
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
export PYTHONUNBUFFERED=1
log="$out/log.txt"
exec > >(tee -a "$log") 2>&1

if ls "$root"/.whl/*.whl >/dev/null 2>&1; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
        --target /tmp/site "$root"/.whl/*.whl || exit 2
fi
export PYTHONPATH="/tmp/site:$root"
# repro as an install runs it: byte-compiled once (pip does this when it installs)
python3 -m compileall -q "$root/repro" > /dev/null
R=(python3 -m repro)
echo "cores: $(nproc), $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2)"
now() { date +%s%N; }
ms_since() { echo $(( ($(now) - $1) / 1000000 )); }
declare -A T

nvidia-smi > "$out/nvidia-smi.txt" 2>&1
nvidia-smi --query-gpu=name,compute_cap,driver_version,memory.total --format=csv >> "$out/nvidia-smi.txt"
PY="$(python3 -c 'import sys; print(sys.executable)')"
VENV="$(python3 -c 'import sys; print(sys.prefix)')"
echo "image python: $PY  venv: $VENV"

echo "== 1. ladder on the image's environment"
t=$(now); "${R[@]}" smoke --python "$PY" --json > "$out/ladder-h200.json"; echo "smoke exit $?"
T[ladder]=$(ms_since $t)

echo "== 2. broken cases"
CUDA_VISIBLE_DEVICES="" "${R[@]}" smoke --python "$PY" --rungs python,torch --json \
    > /tmp/broken-novisible.json; echo "CUDA_VISIBLE_DEVICES='' smoke exit $?"
base="$(python3 -c 'import os,sys; print(os.path.realpath(sys.executable))')"
ver="$(python3 -c 'import sys; print("%d.%d" % sys.version_info[:2])')"
prefix="$(dirname "$(dirname "$base")")"
mkdir -p /tmp/pynoh/bin /tmp/pynoh/lib
cp "$base" "/tmp/pynoh/bin/python$ver"
ln -sfn "$prefix/lib/python$ver" "/tmp/pynoh/lib/python$ver"
for so in "$prefix"/lib/libpython*.so*; do [ -e "$so" ] && cp -a "$so" /tmp/pynoh/lib/; done
LD_LIBRARY_PATH="/tmp/pynoh/lib:${LD_LIBRARY_PATH:-}" "/tmp/pynoh/bin/python$ver" -m venv --without-pip /tmp/noh-venv
site_noh="$(/tmp/noh-venv/bin/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
python3 -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])' > "$site_noh/image-site.pth"
echo "headerless interpreter include dir: $(/tmp/noh-venv/bin/python -c 'import sysconfig; print(sysconfig.get_paths()["include"])')"
TRITON_CACHE_DIR=/tmp/triton-noh "${R[@]}" smoke --python /tmp/noh-venv/bin/python \
    --rungs python,torch,triton --keep-going --json > /tmp/broken-noheaders.json
echo "no-Python.h smoke exit $?"
python3 - "$out/ladder-broken.json" <<'PYEOF'
import json, sys
docs = {}
for name in ("novisible", "noheaders"):
    try:
        docs[name] = json.load(open(f"/tmp/broken-{name}.json"))
    except Exception as exc:  # keep what we have
        docs[name] = {"error": repr(exc)}
json.dump(docs, open(sys.argv[1], "w"), indent=2)
PYEOF

echo "== 3. round trip of the real venv, air-gapped"
rm -rf /tmp/oldbox /tmp/bundles /tmp/copy /srv/rebuilt; mkdir -p /tmp/oldbox
t=$(now); cp -a "$VENV" /tmp/oldbox/venv; T[copy_source]=$(ms_since $t)
site="$(/tmp/oldbox/venv/bin/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
printf '\n# local hotfix carried by repro\nREPRO_HOTFIX = True\n' >> "$site/transformers/__init__.py"
printf 'def hotfix():\n    return "applied"\n' > "$site/transformers/repro_hotfix.py"
du -sh /tmp/oldbox/venv
find /tmp/oldbox/venv -type f | wc -l

echo "-- copy approach: tar cf, tar xf, torch check"
t=$(now); tar cf /tmp/venv.tar -C /tmp/oldbox venv; T[tar_cf]=$(ms_since $t)
t=$(now); sha256sum /tmp/venv.tar > /dev/null; T[tar_sha256sum]=$(ms_since $t)
mkdir -p /tmp/copy
t=$(now); tar xf /tmp/venv.tar -C /tmp/copy; T[tar_xf]=$(ms_since $t)
t=$(now); "${R[@]}" smoke --python /tmp/copy/venv/bin/python --rungs python,torch --json > /tmp/copy-smoke.json
T[copy_smoke]=$(ms_since $t)
rm -rf /tmp/copy /tmp/venv.tar
echo "-- venv-pack of the same venv (its wheel carried in .whl/)"
t=$(now); python3 -c 'import sys; from venv_pack.__main__ import main; sys.argv[0] = "venv-pack"; main()' \
    -p /tmp/oldbox/venv -o /tmp/venv-pack.tar --format tar -q; echo "venv-pack exit $?"
T[venv_pack]=$(ms_since $t)
t=$(now); sync /tmp/venv-pack.tar; T[venv_pack_sync]=$(ms_since $t)
rm -f /tmp/venv-pack.tar

echo "-- repro: pack --wheels all, check, unpack --offline, ladder"
stamp() { python3 -c 'import sys, time
t0 = time.time()
for line in sys.stdin:
    sys.stdout.write("%7.2f s %s" % (time.time() - t0, line))'; }
t=$(now); timeout 280 "${R[@]}" pack /tmp/oldbox --wheels all --offline --version 1 -o /tmp/bundles/ --json 2> >(stamp) > "$out/pack.json"
echo "pack exit $?"; T[pack]=$(ms_since $t)
ls -la /tmp/bundles
# pack writes past the page cache: the first check reads the bundle from disk, the second
# from memory (as tar xf reads the venv tar that tar cf just wrote)
t=$(now); "${R[@]}" check /tmp/bundles/oldbox-1.tar > /dev/null; echo "check (bundle on disk) exit $?"
T[check_from_disk]=$(ms_since $t)
t=$(now); "${R[@]}" check /tmp/bundles/oldbox-1.tar --json > "$out/check.json"; echo "check exit $?"
T[check]=$(ms_since $t)
t=$(now); sha256sum /tmp/bundles/oldbox-1.tar >/dev/null; T[bundle_sha256sum]=$(ms_since $t)
echo "-- pack again: the scan cache of the first pack is warm"
TIME=(); [ -x /usr/bin/time ] && TIME=(/usr/bin/time -f "pack again: peak RSS %M KiB")
t=$(now); "${TIME[@]}" "${R[@]}" pack /tmp/oldbox --wheels all --offline --version 2 -o /tmp/bundles2/ 2> >(stamp) > /dev/null
echo "pack again exit $?"; T[pack_again]=$(ms_since $t)
rm -rf /tmp/bundles2
echo "-- pack stages: scan alone, pack --wheels none --rehash, a profiled pack --wheels all"
t=$(now); "${R[@]}" scan --venv /tmp/oldbox/venv > /dev/null; echo "scan exit $?"; T[scan]=$(ms_since $t)
t=$(now); "${R[@]}" pack /tmp/oldbox --wheels none --offline --rehash --version 1 -o /tmp/bundles-none/ > /dev/null 2>&1
echo "pack --wheels none exit $?"; T[pack_wheels_none]=$(ms_since $t)
rm -rf /tmp/bundles-none
t=$(now); REPRO_DIRECT_IO=0 "${R[@]}" pack /tmp/oldbox --wheels all --offline --rehash --version 1 -o /tmp/bundles-pc/ > /dev/null 2>&1
echo "pack through the page cache exit $?"; T[pack_page_cache]=$(ms_since $t)
rm -rf /tmp/bundles-pc
python3 -m cProfile -o /tmp/pack.prof -m repro pack /tmp/oldbox --wheels all --offline --version 1 \
    -o /tmp/bundles-prof/ 2> >(stamp) > /dev/null
rm -rf /tmp/bundles-prof
python3 -c 'import pstats; pstats.Stats("/tmp/pack.prof").sort_stats("cumulative").print_stats(35)' \
    | grep -v "^$" | cut -c1-160 | tail -40
t=$(now); timeout 250 "${R[@]}" unpack /tmp/bundles/oldbox-1.tar --offline --target /srv/rebuilt --json > /tmp/unpack.json
echo "unpack exit $?"; T[unpack_with_ladder]=$(ms_since $t)
cp /srv/rebuilt/.repro/unpack-report.json "$out/unpack-report.json" 2>/dev/null
t=$(now); "${R[@]}" unpack /tmp/bundles/oldbox-1.tar --offline --target /srv/rebuilt --json > /tmp/unpack2.json
echo "second unpack exit $?"; T[unpack_again]=$(ms_since $t)
# transformers replaces its module by a lazy one: the appended line is read from the file
"$(python3 -c "import json; print(json.load(open('/tmp/unpack.json'))['venv'])")/bin/python" -c 'import transformers, transformers.repro_hotfix as h; print("patched:", "REPRO_HOTFIX = True" in open(transformers.__file__).read(), h.hotfix())'
t=$(now); "${R[@]}" unpack /tmp/bundles/oldbox-1.tar --offline --no-smoke --target /srv/rebuilt2 > /dev/null 2>&1
echo "unpack --no-smoke exit $?"; T[unpack_no_smoke]=$(ms_since $t)
rm -rf /srv/rebuilt2
t=$(now); REPRO_DIRECT_IO=0 "${R[@]}" unpack /tmp/bundles/oldbox-1.tar --offline --no-smoke --target /srv/rebuilt2 > /dev/null 2>&1
echo "unpack --no-smoke through the page cache exit $?"; T[unpack_no_smoke_page_cache]=$(ms_since $t)
rm -rf /srv/rebuilt2
t=$(now); "${R[@]}" unpack /tmp/bundles/oldbox-1.tar --offline --no-smoke --target /srv/rebuilt2 > /dev/null 2>&1
echo "unpack --no-smoke (again) exit $?"; T[unpack_no_smoke_2]=$(ms_since $t)
rm -rf /srv/rebuilt2

{
  echo "{"
  first=1
  for k in "${!T[@]}"; do
    [ $first -eq 1 ] || echo ","
    first=0
    printf '  "%s": %s' "$k" "${T[$k]}"
  done
  echo "}"
} > /tmp/times.json
python3 - "$out/roundtrip.json" <<'PYEOF'
import json, subprocess, sys
t = {k: v / 1000 for k, v in json.load(open("/tmp/times.json")).items()}
copy = t.get("tar_cf", 0) + t.get("tar_xf", 0)
verified_copy = copy + t.get("tar_sha256sum", 0)
repro_total = t.get("pack", 0) + t.get("check", 0) + t.get("unpack_with_ladder", 0)
doc = {
    "seconds": t,
    "copy_approach_s": copy,
    "copy_approach_with_sha256sum_s": verified_copy,
    "repro_pack_check_unpack_ladder_s": repro_total,
    "ratio_repro_to_copy": repro_total / copy if copy else None,
    "ratio_pack_to_tar_cf_plus_sha256sum": t.get("pack", 0) / (t.get("tar_cf", 0) + t.get("tar_sha256sum", 0) or 1),
    "ratio_pack_to_venv_pack": t["pack"] / t["venv_pack"] if t.get("venv_pack") else None,
    "ratio_pack_again_to_venv_pack": t["pack_again"] / t["venv_pack"] if t.get("venv_pack") and t.get("pack_again") else None,
    "ratio_pack_again_to_tar_cf_plus_sha256sum": t.get("pack_again", 0) / (t.get("tar_cf", 0) + t.get("tar_sha256sum", 0) or 1),
    "ratio_pack_to_venv_pack_with_sync": t["pack"] / (t["venv_pack"] + t.get("venv_pack_sync", 0)) if t.get("venv_pack") else None,
    "ratio_pack_wheels_none_to_scan": t["pack_wheels_none"] / t["scan"] if t.get("scan") else None,
    "ratio_unpack_no_smoke_to_tar_xf": (t.get("unpack_no_smoke", 0) + t.get("unpack_no_smoke_2", t.get("unpack_no_smoke", 0))) / 2 / t["tar_xf"] if t.get("tar_xf") else None,
    "ratio_pack_page_cache_to_pack": t["pack_page_cache"] / t["pack"] if t.get("pack_page_cache") else None,
    "ratio_unpack_to_tar_xf": t.get("unpack_with_ladder", 0) / (t.get("tar_xf", 1) or 1),
}
for name in ("unpack", "unpack2"):
    try:
        doc[name] = json.load(open(f"/tmp/{name}.json"))
    except Exception as exc:
        doc[name] = {"error": repr(exc)}
try:
    doc["copy_smoke"] = json.load(open("/tmp/copy-smoke.json"))
except Exception as exc:
    doc["copy_smoke"] = {"error": repr(exc)}
json.dump(doc, open(sys.argv[1], "w"), indent=2)
print(json.dumps({k: v for k, v in doc.items() if not isinstance(v, dict)}, indent=2))
PYEOF
