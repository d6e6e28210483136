"""A cached set of files (the tool wheels) filled in a staging directory of its own and
put in place by one rename, so two packs at once on one box never share a half-built
set: each stages its own, the first rename wins, the other keeps the winner's."""

from __future__ import annotations

import os
import secrets
import shutil
from pathlib import Path

COMPLETE = ".complete"


def staging_for(cache: Path) -> Path:
    """A new, empty staging directory beside `cache`, this process's own."""
    staging = cache.with_name(f"{cache.name}.partial-{os.getpid()}-{secrets.token_hex(4)}")
    staging.mkdir(parents=True)
    return staging


def publish(staging: Path, cache: Path) -> Path:
    """Mark `staging` complete and make it `cache`; when another process published the
    same set first, keep that one and remove ours. Returns `cache`."""
    (staging / COMPLETE).write_text("")
    if (cache / COMPLETE).exists():
        shutil.rmtree(staging, ignore_errors=True)
        return cache
    shutil.rmtree(cache, ignore_errors=True)  # a set left incomplete by a killed run
    try:
        staging.rename(cache)
    except OSError:
        if not (cache / COMPLETE).exists():
            raise
        shutil.rmtree(staging, ignore_errors=True)  # lost the race to an equal set
    return cache
