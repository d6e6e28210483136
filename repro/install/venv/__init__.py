"""The venv step: where packages come from, the installers (pip, uv, the vault's own
wheels, streamed), the guard on the venv's interpreter, and what a rebuilt venv
holds."""
