"""Progress bars on stderr, shown only on a terminal and only for work that takes a while."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager

from rich.console import Console
from rich.progress import (
    BarColumn,
    DownloadColumn,
    Progress,
    TaskID,
    TextColumn,
    TimeRemainingColumn,
    TransferSpeedColumn,
)

# Work this large shows its bar at once; smaller work only once it has run this long.
IMMEDIATE_BYTES = 256 << 20
DELAY_SECONDS = 0.5


class HashProgressBar:
    """A ProgressSink drawing bytes hashed / total and the rate with rich."""

    def __init__(self, console: Console, description: str = "hashing") -> None:
        self._console = console
        self._description = description
        self._progress: Progress | None = None
        self._task: TaskID | None = None
        self._total = 0
        self._done = 0
        self._started_at = 0.0

    def start(self, total_bytes: int, total_files: int) -> None:
        self._total = total_bytes
        self._done = 0
        self._started_at = time.monotonic()
        self._description = f"{self._description} {total_files} files"
        if total_bytes >= IMMEDIATE_BYTES:
            self._show()

    def advance(self, nbytes: int) -> None:
        self._done += nbytes
        if self._progress is None and time.monotonic() - self._started_at >= DELAY_SECONDS:
            self._show()
        if self._progress is not None and self._task is not None:
            self._progress.update(self._task, completed=self._done)

    def close(self) -> None:
        if self._progress is not None:
            self._progress.stop()
            self._progress = None

    def _show(self) -> None:
        self._progress = Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            DownloadColumn(),
            TransferSpeedColumn(),
            TimeRemainingColumn(),
            console=self._console,
            transient=True,
        )
        self._task = self._progress.add_task(
            self._description, total=self._total, completed=self._done
        )
        self._progress.start()


@contextmanager
def hash_progress(console: Console, *, enabled: bool = True) -> Iterator[HashProgressBar | None]:
    """A progress bar for hashing, or None when stderr is not a terminal."""
    if not enabled or not console.is_terminal:
        yield None
        return
    bar = HashProgressBar(console)
    try:
        yield bar
    finally:
        bar.close()
