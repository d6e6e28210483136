"""Glob patterns over a workspace that never follow a symbolic link.

`glob.glob(recursive=True)` enters linked directories, so two `-> .` links in an
included directory make `**` walk without end. Here a linked directory is never
entered; links met on the way are returned as data for the caller to judge. The
patterns mean what they mean to `glob` (`*` does not cross `/` nor match a leading
dot, `**` is any number of directories), matched one directory level at a time.
"""

from __future__ import annotations

import fnmatch
import os
import stat
from dataclasses import dataclass, field
from pathlib import Path

from repro.errors import ConfigError

MAX_ENTRIES = 1_000_000  # directory entries one pattern may look at
_MAGIC = frozenset("*?[")


@dataclass(frozen=True)
class GlobResult:
    files: tuple[Path, ...]  # regular files, reached through real directories only
    links: tuple[Path, ...]  # symbolic links the pattern reached (not entered, not read)
    others: tuple[Path, ...] = field(default=())  # FIFOs, sockets, devices it matched


class _Walk:
    def __init__(self, pattern: str, source: str) -> None:
        self.pattern = pattern
        self.source = source
        self.seen = 0
        self.files: set[Path] = set()
        self.dirs: set[Path] = set()
        self.links: set[Path] = set()
        self.others: set[Path] = set()

    def entries(self, directory: Path) -> list[os.DirEntry[str]]:
        try:
            with os.scandir(directory) as it:
                found = sorted(it, key=lambda e: e.name)
        except OSError:
            return []  # not a directory, unreadable: matches nothing, as for glob
        self.seen += len(found)
        if self.seen > MAX_ENTRIES:
            raise ConfigError(
                f"{self.source}: pattern {self.pattern!r} looks at over {MAX_ENTRIES:,} "
                "directory entries",
                hint="narrow the pattern (name the directories to carry)",
            )
        return found

    def take(self, entry: os.DirEntry[str], path: Path) -> None:
        mode = entry.stat(follow_symlinks=False).st_mode
        if stat.S_ISLNK(mode):
            self.links.add(path)
        elif stat.S_ISREG(mode):
            self.files.add(path)
        elif stat.S_ISDIR(mode):
            self.dirs.add(path)
        else:
            self.others.add(path)

    def match(self, directory: Path, parts: tuple[str, ...]) -> None:
        head, rest = parts[0], parts[1:]
        if head == "**":
            if rest:
                self.match(directory, rest)
            for entry in self.entries(directory):
                if entry.name.startswith("."):
                    continue
                path = directory / entry.name
                if not rest:
                    self.take(entry, path)
                if entry.is_symlink():
                    if rest:
                        self.links.add(path)  # the pattern goes on below it: not entered
                    continue
                if entry.is_dir(follow_symlinks=False):
                    self.match(path, parts)
            return
        magic = bool(_MAGIC.intersection(head))
        if not magic:
            candidates = [e for e in self.entries(directory) if e.name == head]
        else:
            candidates = [
                e
                for e in self.entries(directory)
                if fnmatch.fnmatchcase(e.name, head)
                and (head.startswith(".") or not e.name.startswith("."))
            ]
        for entry in candidates:
            path = directory / entry.name
            if not rest:
                self.take(entry, path)
            elif entry.is_symlink():
                self.links.add(path)
            elif entry.is_dir(follow_symlinks=False):
                self.match(path, rest)


def glob_tree(root: Path, pattern: str, *, source: str = "repro.toml") -> GlobResult:
    """What `pattern` (relative to ROOT, '/'-separated) matches under ROOT, without
    entering any linked directory. `source` names the file the pattern comes from."""
    parts = tuple(p for p in pattern.split("/") if p not in ("", "."))
    walk = _Walk(pattern, source)
    if parts:
        walk.match(root, parts)
    return GlobResult(
        files=tuple(sorted(walk.files)),
        links=tuple(sorted(walk.links)),
        others=tuple(sorted(walk.others)),
    )


def matched_entries(root: Path, pattern: str, *, source: str = "repro.toml") -> set[Path]:
    """Every file, directory and link `pattern` names (for exclude patterns)."""
    parts = tuple(p for p in pattern.split("/") if p not in ("", "."))
    walk = _Walk(pattern, source)
    if parts:
        walk.match(root, parts)
    return walk.files | walk.dirs | walk.links | walk.others
