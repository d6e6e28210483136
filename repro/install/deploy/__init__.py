"""The target laid out like the source workspace: venv, files, model configs and models'
presence, the systemd units rendered and installed."""
