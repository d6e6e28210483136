"""The archive stack: deterministic tar writing, safe reading and extraction, and
their I/O helpers."""
