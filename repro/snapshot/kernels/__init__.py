"""The GPU code of the packed environment: every installed shared object's fatbin
architectures (`audit.py`), recorded as env/kernels.toml."""
