#!/usr/bin/env bash
# The fresh-box round trip of the image's real CUDA venv on one H200 (`nvidia-h200`): a
# deployment workspace shaped like /data/dflash (the image's 7 GB venv copied in, a patch
# inside transformers, a unit, a drafter's config and weights, a bench harness, results,
# reports) is packed by a repro installed from its wheel (`pip install repro`, as a user
# would), then the workspace and that repro are moved out of the way and the bundle is
# rebuilt as on a new box: `tar xf` and `bash <top>/setup_env.sh --target /srv/dflash
# --offline`, the ladder on the GPU; then `repro verify`, a local edit seen as drift, and
# a rerun. The host has no network.
#
#   bash bench/gpu/freshbox.sh OUTDIR     (from a checkout; .whl/ holds repro's wheel and,
#                                          in .whl/deps/, its dependencies for Python 3.12)
set -u
out="${1:?usage: freshbox.sh OUTDIR}"
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
# shellcheck source=_roundtrip.sh source-path=SCRIPTDIR
source "$root/bench/gpu/_roundtrip.sh"

echo "== the old box: repro from its wheel, the workspace"
rm -rf /tmp/tool /data/dflash /data/dflash.gone /tmp/bundles /tmp/newbox /tmp/newhome /srv/dflash
python3 -m venv /tmp/tool
/tmp/tool/bin/pip install -q --no-index --find-links "$root/.whl" --find-links "$root/.whl/deps" repro || exit 2
ws=/data/dflash
mkdir -p "$ws"/{services,drafter,bench,results,reports}
t=$(now); cp -a "$VENV" "$ws/venv"; T[copy_venv]=$(ms_since $t)
site="$("$ws/venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
printf '\n# local hotfix carried by repro\nREPRO_HOTFIX = True\n' >> "$site/transformers/__init__.py"
printf 'def hotfix():\n    return "applied"\n' > "$site/transformers/repro_hotfix.py"
echo '{"model_type": "llama", "num_hidden_layers": 1}' > "$ws/drafter/config.json"
echo '# EAGLE drafter' > "$ws/drafter/README.md"
head -c 3000000 /dev/urandom > "$ws/drafter/model.safetensors"
printf '#!/bin/sh\necho bench\n' > "$ws/bench/run.sh"; chmod +x "$ws/bench/run.sh"
for i in 0 1 2 3 4 5 6; do echo "{\"tok_s\": $((100 + i))}" > "$ws/results/run-$i.json"; done
echo '# H200 report' > "$ws/reports/h200.md"
cat > "$ws/services/bench.service" <<EOF
[Unit]
Description=benchmark harness

[Service]
Type=oneshot
WorkingDirectory=$ws/bench
ExecStart=$ws/venv/bin/python -c "import torch; print(torch.cuda.get_device_name())" $ws/drafter
EOF
du -sh "$ws/venv"
t=$(now); /tmp/tool/bin/repro pack "$ws" --wheels all --offline -o /tmp/bundles/ --json > "$out/pack.json"
echo "pack exit $?"; T[pack]=$(ms_since $t)
ls -la /tmp/bundles

echo "== the new box: no workspace, no repro, no network"
mv "$ws" /data/dflash.gone
mv /tmp/tool /tmp/tool.gone
mkdir -p /tmp/newbox /tmp/newhome
cd /tmp/newbox || exit 2
t=$(now); tar xf /tmp/bundles/dflash-1.tar; T[tar_xf_bundle]=$(ms_since $t)
t=$(now)
env -u PYTHONPATH -u VIRTUAL_ENV HOME=/tmp/newhome \
    bash dflash-1/setup_env.sh --target /srv/dflash --offline --json > "$out/unpack.json"
echo "setup_env.sh exit $?"; T[setup_env_unpack_ladder]=$(ms_since $t)
repro=$(ls /tmp/newhome/.local/share/repro/tool-*/bin/repro)
echo "tool venv: $repro"
ls /srv/dflash /srv/dflash/drafter /srv/dflash/results
cp /srv/dflash/services/bench.service "$out/bench.service"
t=$(now); "$repro" verify /srv/dflash > "$out/verify.txt" 2>&1; echo "verify exit $?"; T[verify]=$(ms_since $t)
rsite="$(/srv/dflash/venv/bin/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
cp "$rsite/transformers/repro_hotfix.py" /tmp/hotfix.bak
echo "# edited on the box" >> "$rsite/transformers/repro_hotfix.py"
"$repro" verify /srv/dflash >> "$out/verify.txt" 2>&1; echo "verify after a local edit exit $?"
env -u PYTHONPATH HOME=/tmp/newhome "$repro" unpack /tmp/bundles/dflash-1.tar --target /srv/dflash \
    --offline >> "$out/verify.txt" 2>&1; echo "rerun with the edit exit $?"
cp /tmp/hotfix.bak "$rsite/transformers/repro_hotfix.py"
t=$(now); env -u PYTHONPATH HOME=/tmp/newhome "$repro" unpack /tmp/bundles/dflash-1.tar \
    --target /srv/dflash --offline >> "$out/verify.txt" 2>&1; echo "rerun exit $?"; T[rerun]=$(ms_since $t)
write_times
