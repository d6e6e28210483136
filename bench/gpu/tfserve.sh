#!/usr/bin/env bash
# A real engine on the GPU behind the server rung, from a bundle rebuilt elsewhere, on one
# H200 (`nvidia-h200`). The image has transformers 5.17.0 but not its serving extra; the
# extra's pure-Python wheels (and the transformers wheel, so that `bin/transformers` is
# the workspace venv's own) travel in .whl/serve/. A workspace /data/tfws holds a copy of
# the image's venv with that extra installed and a unit that runs
# `transformers serve /data/models/tiny --device cuda:0`; the model is made here (random
# weights, a BPE tokenizer trained here, save_pretrained). repro, installed from its
# wheel, packs the workspace; the workspace is moved away and the bundle is unpacked
# offline at /srv/tfws with `--models /data/models`: the ladder's server rung launches
# the unit's command in the rebuilt venv and asks for a real generation on the GPU. Then
# the rung is broken on purpose (a models directory without the model).
#
#   bash bench/gpu/tfserve.sh OUTDIR    (.whl/ holds repro's wheel, .whl/deps/ its
#                                        dependencies, .whl/serve/ the serving wheels)
set -u
out="${1:?usage: tfserve.sh OUTDIR}"
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
# shellcheck source=_roundtrip.sh source-path=SCRIPTDIR
source "$root/bench/gpu/_roundtrip.sh"

echo "== the source box: repro from its wheel, the workspace, the model"
rm -rf /tmp/tool /data/tfws /data/tfws.gone /data/models /data/nomodels /tmp/bundles /srv/tfws
python3 -m venv /tmp/tool
/tmp/tool/bin/pip install -q --no-index --find-links "$root/.whl" --find-links "$root/.whl/deps" repro || exit 2
ws=/data/tfws
mkdir -p "$ws/services" /data/models /data/nomodels
t=$(now); cp -a "$VENV" "$ws/venv"; T[copy_venv]=$(ms_since $t)
"$ws/venv/bin/python" -m pip install -q --no-index --no-deps --no-compile --force-reinstall \
    "$root"/.whl/serve/*.whl || exit 2
env -u PYTHONPATH "$ws/venv/bin/python" "$root/tests/support/make_tiny_llama.py" /data/models/tiny --head-dim 64 || exit 2
cat > "$ws/services/tfserve.service" <<EOF
[Unit]
Description=transformers serve on the GPU

[Service]
Environment=HF_HUB_OFFLINE=1
ExecStart=$ws/venv/bin/transformers serve /data/models/tiny --host 127.0.0.1 --port 8011 --device cuda:0
Restart=on-failure
EOF
du -sh "$ws/venv"
t=$(now); env -u PYTHONPATH /tmp/tool/bin/repro pack "$ws" --wheels all --offline -o /tmp/bundles/ --json > "$out/pack.json"
echo "pack exit $?"; T[pack]=$(ms_since $t)
ls -la /tmp/bundles

echo "== elsewhere: no workspace; the bundle unpacked offline, the ladder from the unit"
mv "$ws" /data/tfws.gone
t=$(now)
env -u PYTHONPATH -u VIRTUAL_ENV /tmp/tool/bin/repro unpack /tmp/bundles/tfws-1.tar --target /srv/tfws \
    --offline --models /data/models --json > "$out/unpack.json"
echo "unpack exit $?"; T[unpack_ladder]=$(ms_since $t)
cp /srv/tfws/services/tfserve.service "$out/tfserve.service"
cat "$out/tfserve.service"
python3 - "$out/unpack.json" <<'PY'
import json, sys
report = json.load(open(sys.argv[1]))
for rung in report["smoke"]["ladder"]["rungs"]:
    print(f"{rung['status']:5} {rung['name']:7} {rung['summary']}")
    if rung["name"] == "server":
        keep = ("argv", "model", "model_from", "ready_s", "ttft_s", "tokens", "tokens_per_s", "generation_s")
        print(json.dumps({k: rung["facts"].get(k) for k in keep}, indent=1))
PY

echo "== broken on purpose: a models directory without the model"
env -u PYTHONPATH /tmp/tool/bin/repro smoke --bundle /srv/tfws/.repro/bundle --python /srv/tfws/venv \
    --models /data/nomodels --rungs server --json > "$out/broken.json"
echo "smoke with a bad model path exit $?"
python3 - "$out/broken.json" <<'PY'
import json, sys
report = json.load(open(sys.argv[1]))
for rung in report["rungs"]:
    print(f"{rung['status']:5} {rung['name']:7} {rung['summary']}")
    print("\n".join(rung["output_tail"][-12:]))
PY
write_times
