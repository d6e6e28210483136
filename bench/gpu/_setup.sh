# shellcheck shell=bash disable=SC2154  # sourced: the caller sets root (and out)
# Sourced by the bench/gpu scripts that time repro commands on the image's venv:
#   root=...; out=...; source "$root/bench/gpu/_setup.sh"
# Installs repro's missing dependencies from .whl/ into /tmp/site, byte-compiles the
# checkout (as an install would), copies the image's venv to /tmp/oldbox/venv (a
# workspace repro can pack) and defines `run TREE LABEL ARGS...`, which runs repro from
# TREE (a directory holding a `repro/` package) and appends one JSON line to
# /tmp/runs.jsonl: wall s, the peak RSS of repro's own process (VmHWM, read as it exits),
# of the largest process of its tree (ru_maxrss of the children: a hashing worker, the
# target's interpreter probed or its pip freeze) and the largest sums of the RSS and of
# the PSS (shared pages divided among their sharers) of every process of the tree at once
# (sampled every 50 ms). Variables set before `run` reach
# repro (REPRO_X=... run ...).
source "$root/bench/gpu/_wheels.sh"
python3 -m compileall -q "$root/repro" > /dev/null
echo "cores: $(nproc), $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2)"
VENV="$(python3 -c 'import sys; print(sys.prefix)')"
rm -rf /tmp/oldbox && mkdir -p /tmp/oldbox && cp -a "$VENV" /tmp/oldbox/venv
echo "venv: $(du -sh /tmp/oldbox/venv | cut -f1), $(find /tmp/oldbox/venv -type f | wc -l) files"
rm -f /tmp/runs.jsonl
export XDG_CACHE_HOME=/tmp/xdg

run() {
    local tree="$1" label="$2"; shift 2
    # from a neutral directory: `python3 -c` puts the current one first on sys.path, and
    # in the checkout that would import its repro whichever TREE is asked for
    (cd /tmp && PYTHONPATH="/tmp/site:$tree" python3 - "$label" "$@" <<'PYEOF' | tee -a /tmp/runs.jsonl
import json, os, resource, subprocess, sys, threading, time
label, args = sys.argv[1], sys.argv[2:]

def tree_rss_kib(top):
    parents, rss = {}, {}
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            stat = open(f"/proc/{pid}/stat").read()
            fields = stat.rsplit(")", 1)[1].split()
            parents[int(pid)] = int(fields[1])
            rss[int(pid)] = int(fields[21]) * os.sysconf("SC_PAGE_SIZE") // 1024
        except (OSError, IndexError, ValueError):
            continue
    total = pss = 0
    for pid in rss:
        p = pid
        while p > 1 and p != top:
            p = parents.get(p, 0)
        if p == top:
            total += rss[pid]
            try:
                for line in open(f"/proc/{pid}/smaps_rollup"):
                    if line.startswith("Pss:"):
                        pss += int(line.split()[1])
            except OSError:
                pass
    return total, pss

peak = [0, 0]
def sample(proc):
    while proc.poll() is None:
        rss, pss = tree_rss_kib(proc.pid)
        peak[0], peak[1] = max(peak[0], rss), max(peak[1], pss)
        time.sleep(0.05)
own = ("import atexit, runpy, sys\n"
       "def hwm():\n"
       "    kib = [l.split()[1] for l in open('/proc/self/status') if l.startswith('VmHWM')][0]\n"
       "    open('/tmp/hwm', 'w').write(kib)\n"
       "atexit.register(hwm)\n"
       "sys.argv[0] = 'repro'\n"
       "runpy.run_module('repro', run_name='__main__', alter_sys=True)\n")
start = time.perf_counter()
proc = subprocess.Popen([sys.executable, "-c", own, *args], stdout=subprocess.DEVNULL,
                        stderr=subprocess.PIPE)
sampler = threading.Thread(target=sample, args=(proc,))
sampler.start()
stderr = proc.communicate()[1]
wall = time.perf_counter() - start
sampler.join()
tree = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
own_kib = int(open("/tmp/hwm").read())
tail = stderr.decode(errors="replace").strip().splitlines()[-1:] if proc.returncode else []
print(json.dumps({"label": label, "rc": proc.returncode, "wall_s": round(wall, 2),
                  "repro_peak_rss_mib": round(own_kib / 1024, 1),
                  "tree_peak_rss_mib": round(tree / 1024, 1),
                  "tree_rss_sum_peak_mib": round(peak[0] / 1024, 1),
                  "tree_pss_sum_peak_mib": round(peak[1] / 1024, 1), "error": tail,
                  "repro": __import__("importlib.util").util.find_spec("repro").origin}))
PYEOF
    )
}

# runs_json FILE: the JSON lines of this script's runs as one JSON list
runs_json() {
    python3 -c 'import json, sys; json.dump([json.loads(l) for l in open("/tmp/runs.jsonl")], open(sys.argv[1], "w"), indent=1)' "$1"
}
