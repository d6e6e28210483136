"""Hostname normalisation for a serving router, carried as a hand patch by repro."""

from .core import encode


def normalize_host(name: str) -> str:
    """UTS #46-normalised ASCII form of a hostname, without a trailing dot."""
    return encode(name.strip().rstrip("."), uts46=True).decode("ascii")
