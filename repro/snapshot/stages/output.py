"""Stage `output`: the bundle's name, version, compression and the path it is written to."""

from __future__ import annotations

import contextlib
import re
from dataclasses import dataclass
from pathlib import Path

from packaging.version import InvalidVersion, Version

from repro.archive.common import Compression
from repro.bundle.environment import EnvironmentFacts
from repro.config import Config
from repro.errors import UsageError
from repro.snapshot.stages.options import PackOptions
from repro.snapshot.write.bundle import can_leave_holes

SUFFIX: dict[Compression, str] = {"none": ".tar", "gz": ".tar.gz", "zst": ".tar.zst"}
_NAME_CHARS = re.compile(r"[^A-Za-z0-9._-]+")

ARCHIVE_SUFFIXES = (".tar", ".tar.gz", ".tgz", ".tar.zst", ".tzst")


# Suffixes of archives and compressed files repro does not write, beyond those the
# platform's mimetypes table knows: -o with one of them is a mistake, never the name of
# a directory to create.
FOREIGN_ARCHIVE_SUFFIXES = (
    ".txz",
    ".tbz2",
    ".tbz",
    ".tlz",
    ".lz4",
    ".lzma",
    ".lz",
    ".lzo",
    ".zst",
    ".br",
    ".z",
    ".cpio",
    ".whl",
    ".squashfs",
)


@dataclass(frozen=True)
class Target:
    """Where and how the bundle is written."""

    name: str
    version: str
    compression: Compression
    output: Path | None  # None: stdout
    delta: bool = False  # packed against a base (--base): every digest taken ahead

    @property
    def top(self) -> str:
        return f"{self.name}-{self.version}"

    @property
    def can_leave_holes(self) -> bool:
        """Whether the vault wheels are written into holes (`write.bundle.can_leave_holes`),
        where the sha256 the scan left to the writing are checked; never for a delta,
        which takes every digest ahead."""
        return not self.delta and can_leave_holes(self.output, self.compression)


def target(options: PackOptions, config: Config, facts: EnvironmentFacts) -> Target:
    """Name, version and output path; refuses an output inside the packed venv."""
    compression = _compression(options)
    name = bundle_name(options, config)
    version = options.version or config.bundle.version or next_version(_output_dir(options), name)
    output = None if options.to_stdout else _output_path(options, f"{name}-{version}", compression)
    if output is not None:
        _refuse_output_inside(output, facts)
    return Target(name, version, compression, output, delta=options.base is not None)


def bundle_name(options: PackOptions, config: Config) -> str:
    raw = options.name or config.bundle.name or options.source.resolve().name
    name = _NAME_CHARS.sub("-", raw).strip("-.") or "bundle"
    return name


def _existing_versions(directory: Path, name: str) -> list[Version]:
    found: list[Version] = []
    pattern = re.compile(rf"^{re.escape(name)}-(?P<version>.+?)\.tar(\.gz|\.zst)?$")
    if not directory.is_dir():
        return found
    for path in directory.iterdir():
        match = pattern.match(path.name)
        if match:
            with contextlib.suppress(InvalidVersion):
                found.append(Version(match.group("version")))
    return found


def next_version(directory: Path, name: str) -> str:
    """One more than the newest bundle of `name` in `directory`: 1, 2, ... or x.y -> x.(y+1)."""
    versions = _existing_versions(directory, name)
    if not versions:
        return "1"
    newest = max(versions)
    release = list(newest.release)
    release[-1] += 1
    return ".".join(str(part) for part in release)


def output_is_file(options: PackOptions) -> bool:
    """-o names a bundle file when it ends like an archive repro writes (in any case);
    an existing directory, or a name with no file type, is a directory to write into.

    A name that ends like any other archive or file type (`x.tar.xz`, `x.zip`,
    `x.tar.br`, `x.cpio`, `x.tar.foo`) is refused (UsageError): creating a directory of
    that name is never what was meant."""
    output = options.output
    if output is None or output.is_dir():
        return False
    name = output.name.lower()
    if name.endswith(ARCHIVE_SUFFIXES):
        return True
    if _names_another_kind_of_file(name):
        raise UsageError(
            f"{output}: repro does not write this kind of archive (-o)",
            hint=f"name the bundle with one of {', '.join(ARCHIVE_SUFFIXES)}, "
            "or give an existing directory to write it into",
        )
    return False


def _names_another_kind_of_file(name: str) -> bool:
    import mimetypes

    if name.endswith(FOREIGN_ARCHIVE_SUFFIXES) or ".tar." in name:
        return True
    kind, encoding = mimetypes.guess_type(name, strict=False)
    return kind is not None or encoding is not None


def _output_dir(options: PackOptions) -> Path:
    if options.output is None:
        return Path.cwd()
    if output_is_file(options):
        return options.output.parent
    return options.output


def _compression(options: PackOptions) -> Compression:
    if options.compression is not None:
        return options.compression
    if options.output is not None and output_is_file(options):
        name = options.output.name.lower()
        if name.endswith((".tar.gz", ".tgz")):
            return "gz"
        if name.endswith((".tar.zst", ".tzst")):
            return "zst"
    return "none"


def _output_path(options: PackOptions, top: str, compression: Compression) -> Path:
    if options.output is not None and output_is_file(options):
        return options.output
    return _output_dir(options) / f"{top}{SUFFIX[compression]}"


def _refuse_output_inside(output: Path, facts: EnvironmentFacts) -> None:
    prefix = Path(facts.python.prefix).resolve()
    resolved = output.resolve()
    if resolved == prefix or resolved.is_relative_to(prefix):
        raise UsageError(
            f"output {output} is inside the environment being packed ({prefix})",
            hint="write the bundle somewhere outside the venv",
        )
