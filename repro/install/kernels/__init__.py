"""The kernels step of unpack: carried kernel sources rebuilt for this box's GPUs
(`rebuild.py`)."""
