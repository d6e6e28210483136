#!/usr/bin/env bash
# The project's one test command: builds its own venv from nothing, then runs
# ruff, mypy --strict and the whole pytest suite. Any failure fails the command.
#   ./scripts/test.sh            everything (what CI runs)
#   ./scripts/test.sh -m 'not slow and not engine'   pass extra pytest arguments
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
python="${REPRO_TEST_PYTHON:-python3}"
venv="$root/.venv"
if [ ! -x "$venv/bin/python" ]; then
    "$python" -m venv "$venv"
fi
"$venv/bin/python" -m pip install -q --upgrade pip
"$venv/bin/python" -m pip install -q -e ".[dev]"
echo "== ruff"
"$venv/bin/ruff" check repro tests bench
"$venv/bin/ruff" format --check repro tests bench
echo "== mypy --strict"
"$venv/bin/mypy" --strict
echo "== pytest"
exec "$venv/bin/python" -m pytest "$@"
