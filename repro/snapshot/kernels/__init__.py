"""The GPU code of the packed environment and what rebuilds it on the target: every
installed shared object's fatbin architectures (`audit.py`), recorded as env/kernels.toml,
and the source trees of distributions built here (`sources.py`), carried under
kernels/<dist>/."""
