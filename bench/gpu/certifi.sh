#!/usr/bin/env bash
# repro installed into the GPU image's own Python, whose certifi and pip's vendored copy
# carry an injected CA (as on company networks), packs a workspace offline (issue 29:
# it could not: "certifi: 1 installed file(s) do not match RECORD"), the bundle
# verifies, and setup_env.sh (--offline, --no-exec) on it builds a tool venv that holds the same CA bundle.
#
#   bash bench/gpu/certifi.sh OUTDIR    (.whl/ holds repro's wheel, .whl/deps/ its
#                                        dependencies for the image's Python)
set -u
out="${1:?usage: certifi.sh OUTDIR}"
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
mkdir -p "$out"
py="$(command -v python3)"
echo "== the image's Python: $py ($("$py" -c 'import sys; print(sys.prefix)'))"
"$py" - <<'PY' | tee "$out/certifi-record.txt"
import base64, csv, hashlib, importlib.metadata as md, pathlib
for dist, rel in (("certifi", "certifi/cacert.pem"), ("pip", "pip/_vendor/certifi/cacert.pem")):
    d = md.distribution(dist)
    rows = {r[0]: r[1] for r in csv.reader((d.read_text("RECORD") or "").splitlines())}
    path = pathlib.Path(d.locate_file(rel))
    got = "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(path.read_bytes()).digest()).rstrip(b"=").decode()
    print(f"{dist} {rel}: {'as RECORD' if rows.get(rel) == got else 'differs from RECORD'}")
PY
"$py" -m pip install -q --no-index --find-links "$root/.whl" --find-links "$root/.whl/deps" repro || exit 2
repro="$(dirname "$py")/repro"
rm -rf /data/caws /tmp/cabundles /srv/caws /tmp/cahome
mkdir -p /data/caws/services /tmp/cabundles
"$py" -m venv /data/caws/venv
cat > /data/caws/services/demo.service <<'UNIT'
[Service]
ExecStart=/data/caws/venv/bin/python -c "print('ok')"
UNIT
echo "== repro pack --offline, from the image's Python"
env -u PYTHONPATH "$repro" pack /data/caws --offline --wheels all -o /tmp/cabundles/ --json > "$out/pack.json" 2> "$out/pack.err"
echo "pack exit $?"
tail -5 "$out/pack.err"
bundle=$(ls /tmp/cabundles/*.tar | head -1)
echo "== repro check $bundle"
env -u PYTHONPATH "$repro" check "$bundle" > "$out/check.out" 2>&1; echo "check exit $?"; cat "$out/check.out"
mkdir -p /tmp/caex && tar xf "$bundle" -C /tmp/caex
top=$(ls /tmp/caex | head -1)
"$py" - "/tmp/caex/$top/env/pack-report.json" <<'PY' | tee "$out/warnings.txt"
import json, sys
report = json.load(open(sys.argv[1]))
for w in report.get("warnings", []):
    text = w if isinstance(w, str) else json.dumps(w)
    if "cacert" in text or "certifi" in text:
        print("warning:", text)
PY
ls "/tmp/caex/$top/tool/wheels" | tee "$out/tool-wheels.txt"
echo "== setup_env.sh --offline on it, another HOME"
HOME=/tmp/cahome env -u PYTHONPATH bash "/tmp/caex/$top/setup_env.sh" --target /srv/caws --offline --no-exec > "$out/setup.out" 2>&1
echo "setup_env exit $?"; tail -5 "$out/setup.out"
tool=$(ls -d /tmp/cahome/.local/share/repro/tool-* 2>/dev/null | head -1)
echo "tool venv: $tool"
"$py" -c 'import certifi; print(certifi.where())' > /tmp/ca.where
cmp "$(cat /tmp/ca.where)" "$tool"/lib/python3*/site-packages/certifi/cacert.pem \
    && echo "tool venv's cacert.pem: the image's, CA included" | tee -a "$out/warnings.txt"
