#!/usr/bin/env bash
# Main job on an embedded default: sets up its own venv, then runs `repro demo`.
# The run's work directory is removed when it ends; pass --keep to keep it.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
python="${REPRO_PYTHON:-python3}"
if [ ! -x .venv/bin/python ]; then
    "$python" -m venv .venv
fi
.venv/bin/python -m pip install -q -e .
exec .venv/bin/repro demo "$@"
