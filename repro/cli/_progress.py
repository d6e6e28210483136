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
    """A ProgressSink drawing files and bytes done / total and the rate with rich.

    Small work shows its bar only once it has run `delay` seconds (check: a bundle
    verified in a blink draws nothing); a total of 0 is a stream of unknown size."""

    def __init__(
        self, console: Console, description: str = "hashing", delay: float = DELAY_SECONDS
    ) -> None:
        self._console = console
        self._description = description
        self._delay = delay
        self._progress: Progress | None = None
        self._task: TaskID | None = None
        self._total = 0
        self._done = 0
        self._started_at = 0.0
        self._closed = False

    def start(self, total_bytes: int, total_files: int) -> None:
        self._total = total_bytes
        self._done = 0
        self._started_at = time.monotonic()
        if total_files:
            self._description = f"{self._description} {total_files} files"
        if total_bytes >= IMMEDIATE_BYTES or self._delay <= 0:
            self._show()

    def advance(self, nbytes: int) -> None:
        self._done += nbytes
        if (
            self._progress is None
            and not self._closed
            and time.monotonic() - self._started_at >= self._delay
        ):
            self._show()
        if self._progress is not None and self._task is not None:
            self._progress.update(self._task, completed=self._done)

    def close(self) -> None:
        """Take the bar away; what is advanced after this draws nothing."""
        self._closed = True
        if self._progress is not None:
            self._progress.stop()
            self._progress = None

    def _show(self) -> None:
        if self._closed:
            return
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
            self._description, total=self._total or None, completed=self._done
        )
        self._progress.start()


@contextmanager
def hash_progress(
    console: Console,
    *,
    enabled: bool = True,
    description: str = "hashing",
    delay: float = DELAY_SECONDS,
) -> Iterator[HashProgressBar | None]:
    """A progress bar (hashing, writing, extracting), or None when the console is not a
    terminal."""
    if not enabled or not console.is_terminal:
        yield None
        return
    bar = HashProgressBar(console, description, delay)
    try:
        yield bar
    finally:
        bar.close()
