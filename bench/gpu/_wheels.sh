# shellcheck shell=bash disable=SC2154  # sourced: the caller sets root (and out)
# Sourced by the bench/gpu scripts (root=... set first): installs repro's dependencies
# that the GPU image lacks from the wheels carried in .whl/ into /tmp/site (the host
# reaches no index). Each script puts /tmp/site on its PYTHONPATH as it needs.
export PYTHONUNBUFFERED=1
if ls "$root"/.whl/*.whl >/dev/null 2>&1; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
        --target /tmp/site "$root"/.whl/*.whl || exit 2
fi
