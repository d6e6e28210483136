"""Unpack side: preflight, venv and installer, patch transaction."""
