#!/usr/bin/env bash
# The project's one test command: builds its own venv from nothing, then runs
# ruff, mypy --strict and the whole pytest suite. Any failure fails the command.
#   ./scripts/test.sh            everything (what CI runs)
#   ./scripts/test.sh -m 'not slow and not engine'   pass extra pytest arguments
#   ./scripts/test.sh --check-only   only check what the tests need from this machine
#   REPRO_TEST_WORKERS=N ./scripts/test.sh   N pytest workers (default 2; 0: no workers)
# Before anything runs, scripts/check_test_setup.py checks the prerequisites (Python 3.10,
# 3.11, 3.12, Debian's python3, bubblewrap, the local torch wheel, network to PyPI) and
# fails naming each one missing and how to get it.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
python="${REPRO_TEST_PYTHON:-python3}"
# The fresh-box tests (tests/support/freshbox.py) need bubblewrap, and Debian's python3 with venv
# and ensurepip; as root, what is missing comes from apt (quietly, once).
missing=()
[ -x /usr/bin/bwrap ] || missing+=(bubblewrap)
if command -v dpkg-query >/dev/null 2>&1 \
    && ! dpkg-query -W -f='${Status}' python3-venv 2>/dev/null | grep -q 'ok installed'; then
    missing+=(python3-venv)
fi
if [ "${#missing[@]}" -gt 0 ]; then
    if [ "$(id -u)" -eq 0 ] && command -v apt-get >/dev/null 2>&1; then
        echo "== apt-get install ${missing[*]}"
        DEBIAN_FRONTEND=noninteractive apt-get update -qq >/dev/null
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
    else
        echo "scripts/test.sh: missing ${missing[*]} (install them: the fresh-box tests need them)" >&2
    fi
fi
venv="$root/.venv"
if [ ! -x "$venv/bin/python" ]; then
    "$python" -m venv "$venv"
fi
"$venv/bin/python" -m pip install -q --upgrade pip
"$venv/bin/python" -m pip install -q -e ".[dev]"
echo "== what the tests need"
if [ "${1:-}" = "--check-only" ]; then
    exec "$venv/bin/python" scripts/check_test_setup.py
fi
"$venv/bin/python" scripts/check_test_setup.py --quiet
echo "== ruff"
"$venv/bin/ruff" check repro tests bench scripts contrib
"$venv/bin/ruff" format --check repro tests bench scripts contrib
echo "== mypy --strict"
"$venv/bin/mypy" --strict
echo "== pytest"
# The suite waits on subprocesses (pip, uv, servers, bubblewrap boxes) more than it
# computes, so two workers take about half the time on a 2-core machine. Each test file
# runs whole on one worker (its module and session fixtures are built once); the caches
# shared between files (tests/support/venvs.py) are built under a file lock.
# REPRO_TEST_WORKERS=0 runs in this process (for -x, pdb or -s).
workers="${REPRO_TEST_WORKERS:-2}"
if [ "$workers" = "0" ]; then
    exec "$venv/bin/python" -m pytest "$@"
fi
exec "$venv/bin/python" -m pytest -n "$workers" --dist loadfile "$@"
