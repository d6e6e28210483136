"""Unpack's first stage: the bundle read into a staging directory and verified there.

An archive (a file, '-' for stdin, an http(s) URL) is extracted by the safe reader; a
directory is copied. Either way the copy is hashed while it is written and verified
(signature, manifest, then every member later stages parse), so what later stages
read is what was verified, whatever happens to the source meanwhile.
"""

from __future__ import annotations

import contextlib
import sys
import tempfile
from collections.abc import Collection, Iterator, Mapping
from pathlib import Path
from typing import BinaryIO

from repro.archive.extract import extract_archive
from repro.bundle import layout
from repro.bundle.fetch import ResumableHTTPStream
from repro.bundle.info import BundleInfo, load_bundle_info
from repro.bundle.manifest import ProgressSink
from repro.bundle.manifestcheck import CheckReport, excuse_from_base
from repro.bundle.manifesttree import verify_directory
from repro.bundle.signing import SignaturePolicy, verify_signature
from repro.errors import InputError, VerificationError
from repro.install.read.contents import check_bundle_contents
from repro.install.read.delta import complete_from_base, staged_base
from repro.install.read.staging import LOCK_SUFFIX, STAGED_VENV, staging_dir
from repro.install.venv.streamed import StreamedInstall
from repro.treecopy import copy_bundle_dir


def is_url(text: str) -> bool:
    return text.startswith(("http://", "https://"))


def is_directory(bundle: str) -> bool:
    """A bundle given as a directory (not '-', not a URL)."""
    return not is_url(bundle) and bundle != "-" and Path(bundle).is_dir()


@contextlib.contextmanager
def _open_source(bundle: str) -> Iterator[tuple[BinaryIO | Path, str]]:
    if bundle == "-":
        yield sys.stdin.buffer, "<stdin>"
    elif is_url(bundle):
        stream = ResumableHTTPStream(bundle)
        try:
            yield stream, bundle  # type: ignore[misc]
        finally:
            stream.close()
    else:
        path = Path(bundle)
        if not path.exists():
            raise InputError(f"{bundle}: no such file or directory")
        yield path, bundle


def _verified(report: CheckReport, where: str) -> None:
    if not report.passed(ignore_missing=False, strict=True):
        problems = [f"mismatched: {m.path}" for m in report.mismatched]
        problems += [f"missing: {p}" for p in report.missing]
        problems += [f"unlisted: {u.path}" for u in report.unlisted]
        problems += [f"line {m.lineno}: {m.reason}" for m in report.malformed]
        problems += [f"rejected: {r.path}: {r.reason}" for r in report.rejected]
        problems += [f"unreadable: {u.path}" for u in report.unreadable]
        raise VerificationError(
            f"{where}: the bundle does not verify against its {layout.MANIFEST}:\n"
            + "\n".join(f"  - {p}" for p in problems[:50]),
            hint="the bundle is damaged or was changed after packing; get a good copy",
        )


def verify_bundle_dir(
    bundle_dir: Path,
    where: str,
    signature: SignaturePolicy | None = None,
    known: Mapping[str, str] | None = None,
    jobs: int | None = None,
    consumed: Collection[str] = (),
    *,
    partial: bool = False,
) -> BundleInfo:
    """Signature first (when asked for), then every file against the manifest, then
    bundle.toml. `known`: digests taken while this process extracted the files, and
    `consumed` those of them it removed since (see `verify_directory`). `partial`: a
    delta bundle may lack the members it takes from its base (only what it carries is
    verified, and its info has `base`); else every listed member must be there."""
    manifest = layout.at(bundle_dir, layout.MANIFEST)
    if signature is not None and signature.active:
        if not manifest.is_file():
            raise VerificationError(f"{where}: the bundle has no {layout.MANIFEST}")
        sig = layout.at(bundle_dir, layout.SIGNATURE)
        verify_signature(
            manifest.read_bytes(),
            sig.read_bytes() if sig.is_file() else None,
            signature,
            source=where,
        )
    report = verify_directory(bundle_dir, manifest, jobs=jobs, known=known, consumed=consumed)
    if partial and report.missing:
        base = staged_base(bundle_dir, where)
        if base is not None:
            report = excuse_from_base(report, base)
    _verified(report, where)
    toml = layout.at(bundle_dir, layout.BUNDLE_TOML)
    if not toml.is_file():
        raise VerificationError(f"{where}: the bundle has no {layout.BUNDLE_TOML}")
    info = load_bundle_info(toml.read_bytes(), source=f"{where}: {layout.BUNDLE_TOML}")
    check_bundle_contents(bundle_dir, where)
    return info


@contextlib.contextmanager
def read_bundle(
    bundle: str,
    staging_parent: Path,
    signature: SignaturePolicy | None = None,
    *,
    jobs: int | None = None,
    progress: ProgressSink | None = None,
    streamed: StreamedInstall | None = None,
    base: str | None = None,
) -> Iterator[tuple[Path, BundleInfo]]:
    """The verified bundle directory (a staging copy of ours) and its info, while the
    block runs.

    An archive is extracted into a staging directory and verified there (signature,
    then manifest): the signature and the manifest are an archive's last members, so
    nothing can be judged before the whole stream has been read into staging. A
    directory is copied into staging the same way (hashed while copied) and verified
    there: what is verified is what later steps read, whatever happens to the
    directory meanwhile. The staging directory is this run's (see
    repro.install.read.staging) until the block ends; then it is removed, unless the block
    moved it away. `progress` follows the extraction or copy (files and bytes).
    `streamed` (an archive read as a stream) unpacks vault wheels as they arrive, into
    its prefix in the staging area (repro.install.venv.streamed).

    A delta bundle (repro.bundle.delta) is made whole in staging from `base` before it
    is verified (repro.install.read.delta); without `base` only what it carries is
    verified, and the caller judges whether the target holds its base."""
    with staging_dir(staging_parent) as dest:
        if is_directory(bundle):
            lock = dest.with_name(f"{dest.name}{LOCK_SUFFIX}")
            copied = copy_bundle_dir(Path(bundle), dest, jobs=jobs, progress=progress, skip=[lock])
            if base is not None:
                complete_from_base(dest, bundle, base, copied)
            yield (
                dest,
                verify_bundle_dir(
                    dest, bundle, signature, known=copied, jobs=jobs, partial=base is None
                ),
            )
            return
        infos: list[BundleInfo] = []
        written: dict[str, str] = {}  # hashed while extracted: not read back to be checked

        def verify(top: Path) -> None:
            consumed = streamed.settle() if streamed is not None else frozenset()
            if base is not None:
                complete_from_base(top, bundle, base, written)
            infos.append(
                verify_bundle_dir(
                    top,
                    bundle,
                    signature,
                    known=written,
                    jobs=jobs,
                    consumed=consumed,
                    partial=base is None,
                )
            )

        if streamed is not None:
            streamed.place(dest.with_name(f".{dest.name}{STAGED_VENV}"))
        try:
            with _open_source(bundle) as (source, name):
                extract_archive(
                    source,
                    dest,
                    source_name=name,
                    verify=verify,
                    digests=written,
                    progress=progress,
                    on_written=streamed.on_written if streamed is not None else None,
                )
        except BaseException:
            if streamed is not None:
                streamed.cancel()  # no wheel is still being unpacked once this returns
            raise
        yield dest, infos[0]


@contextlib.contextmanager
def opened_bundle(
    bundle: str, *, jobs: int | None = None, progress: ProgressSink | None = None
) -> Iterator[Path]:
    """The directory of `bundle` while the block runs: a directory is itself (read
    where it is, as `repro smoke --bundle DIR` always has); an archive file, '-' or an
    http(s) URL is extracted by the safe reader into a temporary directory, verified
    there, and removed afterwards."""
    if is_directory(bundle):
        yield Path(bundle)
        return
    with (
        tempfile.TemporaryDirectory(prefix="repro-bundle-") as parent,
        read_bundle(bundle, Path(parent), jobs=jobs, progress=progress) as (directory, _),
    ):
        yield directory
