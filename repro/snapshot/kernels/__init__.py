"""The GPU code of the packed environment and what rebuilds it on the target: the source
trees of distributions built here (`sources.py`), carried under kernels/<dist>/."""
