"""TOML reading: tomllib on Python >= 3.11, tomli before."""

from __future__ import annotations

import sys
from typing import Any

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on 3.10 only
    import tomli as tomllib

TOMLDecodeError = tomllib.TOMLDecodeError


def loads(text: str) -> dict[str, Any]:
    """Parse `text`; nesting too deep for the parser (`a = [[[[...`) is a decode
    error like any other, not a RecursionError."""
    try:
        data: dict[str, Any] = tomllib.loads(text)
    except RecursionError:
        raise TOMLDecodeError("arrays or tables nested too deeply") from None
    return data
