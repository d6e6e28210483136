#!/usr/bin/env bash
# Peak RSS of pack on the GPU host's real venv (~49k files), this checkout against an
# older one (OLD_TREE, a directory holding an older `repro/` package; optional), run
# alternately; and scan / check at --jobs 4, 8, 16 (does hashing scale past 8 threads?;
# PACK_ONLY=1 leaves these out).
#
#   bash bench/gpu/h200-memory.sh OUTDIR [OLD_TREE]
# Writes OUTDIR/memory.txt (the log) and OUTDIR/memory.json.
set -u
out="${1:?usage: h200-memory.sh OUTDIR [OLD_TREE]}"
old="${2:-}"
mkdir -p "$out"
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
export PYTHONUNBUFFERED=1
exec > >(tee -a "$out/memory.txt") 2>&1

if ls "$root"/.whl/*.whl >/dev/null 2>&1; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
        --target /tmp/site "$root"/.whl/*.whl || exit 2
fi
python3 -m compileall -q "$root/repro" > /dev/null
[ -n "$old" ] && python3 -m compileall -q "$old/repro" > /dev/null
echo "cores: $(nproc)"
VENV="$(python3 -c 'import sys; print(sys.prefix)')"
rm -rf /tmp/oldbox && mkdir -p /tmp/oldbox && cp -a "$VENV" /tmp/oldbox/venv
echo "venv: $(du -sh /tmp/oldbox/venv | cut -f1), $(find /tmp/oldbox/venv -type f | wc -l) files"

# run TREE LABEL ARGS...: wall s, the peak RSS of repro's own process (VmHWM, read by
# the process as it exits) and of its whole tree (ru_maxrss of the children: the largest
# process, which can be the target's interpreter probed or its pip freeze), one JSON line
run() {
    local tree="$1" label="$2"; shift 2
    # from a neutral directory: `python3 -c` puts the current one first on sys.path, and
    # in the checkout that would import its repro whichever TREE is asked for
    (cd /tmp && PYTHONPATH="/tmp/site:$tree" python3 - "$label" "$@" <<'PYEOF' | tee -a /tmp/memory.jsonl
import json, resource, subprocess, sys, time
label, args = sys.argv[1], sys.argv[2:]
own = ("import atexit, runpy, sys\n"
       "def hwm():\n"
       "    kib = [l.split()[1] for l in open('/proc/self/status') if l.startswith('VmHWM')][0]\n"
       "    open('/tmp/hwm', 'w').write(kib)\n"
       "atexit.register(hwm)\n"
       "sys.argv[0] = 'repro'\n"
       "runpy.run_module('repro', run_name='__main__', alter_sys=True)\n")
start = time.perf_counter()
proc = subprocess.run([sys.executable, "-c", own, *args], stdout=subprocess.DEVNULL,
                      stderr=subprocess.PIPE)
wall = time.perf_counter() - start
tree = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
own_kib = int(open("/tmp/hwm").read())
tail = proc.stderr.decode(errors="replace").strip().splitlines()[-1:] if proc.returncode else []
print(json.dumps({"label": label, "rc": proc.returncode, "wall_s": round(wall, 2),
                  "repro_peak_rss_mib": round(own_kib / 1024, 1),
                  "tree_peak_rss_mib": round(tree / 1024, 1), "error": tail,
                  "repro": __import__("importlib.util").util.find_spec("repro").origin}))
PYEOF
    )
}
rm -f /tmp/memory.jsonl
export XDG_CACHE_HOME=/tmp/xdg
trees=("$root")
[ -n "$old" ] && trees=("$root" "$old")
for round in 1 2; do
    for tree in "${trees[@]}"; do
        name=new; [ "$tree" = "$root" ] || name=old
        rm -rf /tmp/b /tmp/xdg
        # a first pack (no scan cache yet: older trees' --rehash saved none), then again
        run "$tree" "$name first pack ($round)" pack /tmp/oldbox --wheels all --offline --version 1 -o /tmp/b/
        rm -rf /tmp/b
        run "$tree" "$name pack again ($round)" pack /tmp/oldbox --wheels all --offline --version 1 -o /tmp/b/
        [ "$round" = 2 ] || rm -rf /tmp/b
    done
done
if [ "${PACK_ONLY:-0}" != 1 ]; then
    for jobs in 16 8 4; do
        run "$root" "scan --jobs $jobs" scan --venv /tmp/oldbox/venv --jobs "$jobs"
        run "$root" "check --jobs $jobs" check /tmp/b/oldbox-1.tar --jobs "$jobs"
    done
    for jobs in 16 8 4; do
        run "$root" "scan --jobs $jobs (2)" scan --venv /tmp/oldbox/venv --jobs "$jobs"
        run "$root" "check --jobs $jobs (2)" check /tmp/b/oldbox-1.tar --jobs "$jobs"
    done
fi
python3 -c 'import json, sys; json.dump([json.loads(l) for l in open("/tmp/memory.jsonl")], open(sys.argv[1], "w"), indent=1)' "$out/memory.json"
