"""One error hierarchy; each class carries the exit code the CLI maps it to.

Exit codes (documented in README.md):
  0  success
  1  verification failed: a bundle or tree is invalid, a preflight check failed
  2  usage error or unreadable input (missing file, corrupt archive, bad option)
  3  install failed
  4  patch conflict
  5  smoke ladder failed
"""

from __future__ import annotations

EXIT_OK = 0
EXIT_INVALID = 1
EXIT_USAGE = 2
EXIT_INSTALL = 3
EXIT_PATCH_CONFLICT = 4
EXIT_SMOKE = 5


class ReproError(Exception):
    """Base of every expected failure. The message says what, where and what next."""

    exit_code: int = EXIT_INVALID

    def __init__(self, message: str, *, hint: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint

    def __str__(self) -> str:
        if self.hint:
            return f"{self.message}\n  hint: {self.hint}"
        return self.message


class UsageError(ReproError):
    """Bad options or arguments, or input that cannot be read at all."""

    exit_code = EXIT_USAGE


class InputError(ReproError):
    """A file that should exist cannot be read, or is not what it should be."""

    exit_code = EXIT_USAGE


class NotAsRecorded(InputError):
    """A file whose sha256 the scan took from RECORD (its size matched) differs: the
    pack has to read every file itself (`repro pack` does, once)."""

    exit_code = EXIT_USAGE


class ManifestError(ReproError):
    """MANIFEST.sha256 is malformed or lists paths that escape the tree."""

    exit_code = EXIT_INVALID


class ArchiveError(ReproError):
    """An archive cannot be read (truncated, corrupt header, unknown compression)."""

    exit_code = EXIT_USAGE


class UnsafeArchiveError(ReproError):
    """An archive holds members that must never be extracted."""

    exit_code = EXIT_INVALID


class BundleFormatError(ReproError):
    """bundle.toml is missing, malformed, or of a format this version cannot read."""

    exit_code = EXIT_INVALID


class VerificationError(ReproError):
    """Files do not match the manifest."""

    exit_code = EXIT_INVALID


class DeltaBaseError(ReproError):
    """A delta bundle and the base it was given (or the target holds) are not the pair
    it was packed against: another name, version or manifest, or no base at all."""

    exit_code = EXIT_USAGE


class ConfigError(ReproError):
    """repro.toml is malformed: unknown keys, wrong types, paths that do not exist."""

    exit_code = EXIT_USAGE


class PylockError(ReproError):
    """A pylock.toml repro rendered is not one that `packaging.pylock` accepts (a bug)."""

    exit_code = EXIT_INVALID


class ProbeError(ReproError):
    """Running the probe inside a target interpreter failed."""

    exit_code = EXIT_USAGE


class SignatureError(ReproError):
    """A bundle's signature is missing, malformed, or not from an allowed signer."""

    exit_code = EXIT_INVALID


class PreflightError(ReproError):
    exit_code = EXIT_INVALID


class InstallError(ReproError):
    exit_code = EXIT_INSTALL


class PatchConflictError(ReproError):
    exit_code = EXIT_PATCH_CONFLICT


class SmokeError(ReproError):
    exit_code = EXIT_SMOKE


# -- wheels (repro.wheel): the vault's rebuilds, a wheel's entry points -------------------


class VaultError(ReproError):
    """A wheel for the vault cannot be obtained or rebuilt."""

    exit_code = EXIT_INVALID


class PatchedFilesError(VaultError):
    """Installed files of a distribution to rebuild do not match RECORD."""

    def __init__(self, dist: str, files: tuple[str, ...], record: str) -> None:
        listed = "\n".join(f"    {path}" for path in files)
        super().__init__(
            f"{dist}: {len(files)} installed file(s) do not match {record}, "
            f"so its wheel cannot be rebuilt from them:\n{listed}",
            hint="provide the pristine files (the original wheel, or --pristine PATH); the "
            "bundle's patch set re-applies the changes at unpack",
        )
        self.dist = dist
        self.files = tuple(files)

    exit_code = EXIT_INVALID


class EntryPointsError(InputError):
    """A distribution's entry_points.txt cannot be read as INI, or (for an installer)
    names a script or an object that is not plain. Each side wraps it: the installer's
    refusal of the wheel (InstallError), the rebuild's VaultError."""

    exit_code = EXIT_USAGE


# -- the target, its locks and its files ---------------------------------------------------


class LockedError(ReproError):
    """Another repro process holds the target's lock (or something not a lock stands at
    its name): the command cannot run as asked now; nothing was verified, nothing failed."""

    exit_code = EXIT_USAGE


class SmallFileRefused(InputError):
    """The file is not one repro reads for a small file's digest (the message says why)."""

    exit_code = EXIT_USAGE


class SafetensorsHeaderError(InputError):
    """A .safetensors file whose header is not the format's (the message names the file
    and what is wrong): truncated, a length past the file, offsets that do not add up."""

    exit_code = EXIT_USAGE


class UnitTextError(InputError):
    """Unit text systemd and repro would read differently."""

    exit_code = EXIT_USAGE


class UnitPathError(UsageError):
    """A target path that cannot be written into a unit as systemd would read it."""

    exit_code = EXIT_USAGE


class PortNotANumber(UsageError, ValueError):
    """``--port`` is given but its value is not a port number (a ValueError too: the
    callers that parse a command line catch it as one)."""

    exit_code = EXIT_USAGE


class DiffApplyError(ReproError):
    """A unified diff does not apply to this content: a patch conflict where it reaches
    the CLI (the patch step wraps it in PatchConflictError)."""

    exit_code = EXIT_PATCH_CONFLICT


# -- GPU code in wheels (repro.gpu) ---------------------------------------------------------


class NotAnElfError(ReproError, ValueError):
    """Bytes that are not a little-endian 64-bit ELF file; the reader of a wheel's shared
    objects skips them (a ValueError too, as struct's errors are)."""

    exit_code = EXIT_INVALID


class UnreadableWheel(ReproError):
    """A wheel whose shared objects cannot be read: not a zip, or a damaged one."""

    exit_code = EXIT_INVALID


# The plan of a move to another GPU (`repro inspect --gpu`) exits 0 all native, 1 some
# distribution runs by PTX JIT only, 4 some has no code: a deliberate exception to the
# table above (README.md's exit codes), given here once.
EXIT_GPU_PTX_ONLY = EXIT_INVALID
EXIT_GPU_NO_CODE = 4


class NoKernelAudit(InputError):
    """A bundle without env/kernels.toml (packed by a repro before the audit) asked what
    its GPU code runs on (`repro inspect --gpu`)."""

    exit_code = EXIT_USAGE


class GpuCodeMissing(VerificationError):
    """`repro pack --require-gpu ARCH`: some distribution has no code for that GPU and the
    bundle does not carry its source; nothing was written."""

    exit_code = EXIT_INVALID


# -- the smoke ladder's server rung (repro.ladder) --------------------------------------------


class GenerationError(SmokeError):
    """One streamed generation failed; `state` (a ladder Probe) says whether the server
    is still starting (keep waiting) or broken."""

    exit_code = EXIT_SMOKE

    def __init__(self, state: object, detail: str) -> None:
        super().__init__(detail)
        self.state = state
        self.detail = detail


class ServerNotReady(SmokeError):
    """The server never became ready for a real generation: the server rung fails."""

    exit_code = EXIT_SMOKE

    def __init__(self, summary: str, hint: str | None) -> None:
        super().__init__(summary, hint=hint)
        self.summary = summary


class Terminated(SystemExit):
    """repro was sent SIGTERM or SIGHUP: unwind (ending what it started), then exit
    with 128 + the signal's number, as the signal itself would have."""

    def __init__(self, signum: int) -> None:
        self.exit_code = 128 + signum
        super().__init__(self.exit_code)
        self.signum = signum


# -- signals between the parts of one operation: caught where they are raised ---------------
# They never reach the CLI; each exit code is the one of the error they are turned into.


class ManifestLineMalformed(ManifestError):
    """A MANIFEST.sha256 line is not `DIGEST  NAME` (the reader names the line)."""

    exit_code = EXIT_INVALID

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class ManifestNameRejected(ManifestError):
    """A MANIFEST.sha256 name that may not be used (absolute, escaping, too long...)."""

    exit_code = EXIT_INVALID

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class ProjectNotListed(InputError):
    """An index has no page for a project (the index check notes it and goes on)."""

    exit_code = EXIT_USAGE


class FillStopped(ReproError):
    """Another hole's writer of an extraction failed: this one stops where it is (the
    other writer's error is the one reported)."""

    exit_code = EXIT_INVALID


class KernelBuildError(InstallError):
    """The kernels step of unpack: a carried kernel source did not build, or the wheel it
    built has no native code for a GPU of this box; the venv is as the install left it."""

    exit_code = EXIT_INSTALL
