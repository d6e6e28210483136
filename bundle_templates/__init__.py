"""Templates rendered into bundles (REPRODUCE.md, setup_env.sh, repro.toml).

Shipped as package data so an installed repro finds them with importlib.resources.
"""
