"""Writing the bundle: its members into the archive in canonical order with the manifest
last, REPRODUCE.md and setup_env.sh."""
