"""A ProgressSink (repro.bundle.manifest) that keeps what it was told, for the tests of
what reports progress: pack's writing, unpack's extraction, the tree scan."""

from __future__ import annotations


class Recorder:
    """Every `start` call's totals in order, and every `advance`'s bytes."""

    def __init__(self) -> None:
        self.started: list[tuple[int, int]] = []
        self.advanced: list[int] = []

    def start(self, total_bytes: int, total_files: int) -> None:
        self.started.append((total_bytes, total_files))

    def advance(self, nbytes: int) -> None:
        self.advanced.append(nbytes)
