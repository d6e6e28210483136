"""An archive's bytes as one stream, whichever way a verb was given the bundle.

`-` is stdin, an http(s) URL is its body (repro.bundle.fetch.ResumableHTTPStream:
streamed, resumed with Range after a dropped connection, as `repro unpack` reads
it), anything else a file. check, inspect and diff read bundles through here.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator
from typing import BinaryIO, cast

from repro.errors import InputError


def is_url(target: str) -> bool:
    return target.startswith(("http://", "https://"))


@contextlib.contextmanager
def open_archive(target: str) -> Iterator[tuple[BinaryIO, str]]:
    """(stream, name for messages) of TARGET: `-`, an http(s) URL or a file path."""
    if target == "-":
        yield sys.stdin.buffer, "<stdin>"
        return
    if is_url(target):
        # imported here: requests costs every other verb's start-up
        from repro.bundle.fetch import ResumableHTTPStream

        with ResumableHTTPStream(target) as remote:
            yield cast(BinaryIO, remote), target
        return
    try:
        stream = open(target, "rb")  # noqa: SIM115 - closed below
    except FileNotFoundError as exc:
        raise InputError(f"{target}: no such file or directory") from exc
    except OSError as exc:
        raise InputError(f"{target}: cannot read: {exc.strerror or exc}") from exc
    with stream:
        yield stream, target
