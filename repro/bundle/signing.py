"""Signed bundles: `ssh-keygen -Y sign/verify` over MANIFEST.sha256's exact bytes.

The signature covers the manifest, and the manifest covers every other file, so one
signature vouches for the whole bundle. The namespace is fixed (`repro-bundle`), so a
signature made for git commits or another tool can never pass as a bundle signature.
OpenSSH 8.1 or newer is the only requirement; nothing here parses keys itself.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from repro.bundle import layout
from repro.errors import SignatureError, UsageError

NAMESPACE = "repro-bundle"
SIGNATURE_NAME = layout.SIGNATURE
MIN_OPENSSH = (8, 1)
TIMEOUT_S = 60
_OPENSSH_VERSION = re.compile(rb"OpenSSH_(\d+)\.(\d+)")
_INSTALL_HINT = "install OpenSSH 8.1 or newer (Debian/Ubuntu: apt-get install openssh-client)"

# ssh-keygen's own words (stderr) -> what went wrong, most specific first. Also rendered
# into setup_env.sh, which checks a signature before repro is installed, in the same words.
FAILURES: tuple[tuple[str, str], ...] = (
    ("key has expired", "the signer's key has expired (valid-before in the allowed-signers file)"),
    (
        "not yet valid",
        "the signer's key is not valid yet (valid-after in the allowed-signers file)",
    ),
    (
        "namespace does not match",
        f"the signature was made for another namespace, not {NAMESPACE!r}",
    ),
    (
        "not permitted for use in signature namespace",
        f"the signer is not allowed the namespace {NAMESPACE!r}",
    ),
    (
        "incorrect signature",
        "the signature does not match the manifest (one of them was changed after signing)",
    ),
    ("couldn't parse signature", "the signature file is corrupted"),
    ("invalid format", "the signature file is corrupted"),
    ("incomplete message", "the signature file is corrupted"),
)


@dataclass(frozen=True)
class SignaturePolicy:
    """What a reader demands of a bundle's signature."""

    allowed_signers: Path | None = None
    identity: str | None = None
    require: bool = False

    @property
    def active(self) -> bool:
        """Whether a signature must be present and verified."""
        return self.require or self.allowed_signers is not None

    def checked(self) -> SignaturePolicy:
        """Self, after the option combinations are checked (UsageError if incomplete)."""
        if self.allowed_signers is None and (self.require or self.identity is not None):
            raise UsageError(
                "--require-signature and --identity need --allowed-signers FILE",
                hint="pass the allowed-signers file that says whose signatures you trust",
            )
        if self.allowed_signers is not None:
            if self.identity is None:
                raise UsageError(
                    "--allowed-signers needs --identity ID (the signer you expect)",
                    hint="ID is the first field of the signer's line in the allowed-signers file",
                )
            if not self.allowed_signers.is_file():
                raise UsageError(f"{self.allowed_signers}: no such allowed-signers file")
        return self


@dataclass(frozen=True)
class VerifiedSignature:
    identity: str
    detail: str  # ssh-keygen's "Good ... signature for ID with KEY" line


def find_ssh_keygen(env: dict[str, str] | None = None) -> Path:
    """ssh-keygen on PATH, if it is OpenSSH 8.1 or newer (SignatureError otherwise)."""
    path = (env or os.environ).get("PATH", os.defpath)
    found = shutil.which("ssh-keygen", path=path)
    if found is None:
        raise SignatureError(
            "signed bundles need ssh-keygen (OpenSSH 8.1 or newer), and it is not on PATH",
            hint=_INSTALL_HINT,
        )
    keygen = Path(found)
    version = _openssh_version(keygen)
    if version is not None and version < MIN_OPENSSH:
        raise SignatureError(
            f"{keygen} is OpenSSH {version[0]}.{version[1]}; signing bundles needs 8.1 or newer "
            "(ssh-keygen -Y)",
            hint=_INSTALL_HINT,
        )
    return keygen


def _openssh_version(keygen: Path) -> tuple[int, int] | None:
    """The OpenSSH version of the `ssh` beside ssh-keygen; None where it cannot be told
    (then an ssh-keygen without -Y is caught by its own 'illegal option' answer)."""
    ssh = keygen.with_name("ssh")
    if not ssh.is_file():
        return None
    try:
        proc = subprocess.run(
            [str(ssh), "-V"], capture_output=True, timeout=TIMEOUT_S, check=False, env=_env()
        )
    except OSError:
        return None
    match = _OPENSSH_VERSION.search(proc.stderr + proc.stdout)
    return (int(match.group(1)), int(match.group(2))) if match else None


def _env() -> dict[str, str]:
    env = {"PATH": os.environ.get("PATH", os.defpath), "LC_ALL": "C"}
    env["SSH_ASKPASS_REQUIRE"] = "never"  # a passphrase prompt must fail, not hang
    return env


def _run(keygen: Path, argv: list[str], data: bytes) -> subprocess.CompletedProcess[bytes]:
    try:
        proc = subprocess.run(
            [str(keygen), *argv],
            input=data,
            capture_output=True,
            timeout=TIMEOUT_S,
            check=False,
            env=_env(),
        )
    except subprocess.TimeoutExpired as exc:
        raise SignatureError(
            f"{keygen} {argv[0]} {argv[1]} did not finish in {TIMEOUT_S} s"
        ) from exc
    except OSError as exc:
        raise SignatureError(
            f"cannot run {keygen}: {exc.strerror or exc}", hint=_INSTALL_HINT
        ) from exc
    text = proc.stderr.decode("utf-8", "replace").lower()
    if proc.returncode != 0 and ("illegal option" in text or "unknown option" in text):
        raise SignatureError(
            f"{keygen} does not know `-Y` (it is older than OpenSSH 8.1)", hint=_INSTALL_HINT
        )
    return proc


def sign_manifest(manifest: bytes, key: Path) -> bytes:
    """An armored SSH signature of `manifest` by the private key `key`."""
    if not key.is_file():
        raise UsageError(
            f"{key}: no such private key file", hint="make one with ssh-keygen -t ed25519"
        )
    keygen = find_ssh_keygen()
    proc = _run(keygen, ["-Y", "sign", "-f", str(key), "-n", NAMESPACE], manifest)
    if proc.returncode != 0 or b"BEGIN SSH SIGNATURE" not in proc.stdout:
        reason = proc.stderr.decode("utf-8", "replace").strip() or f"exit {proc.returncode}"
        raise SignatureError(
            f"cannot sign with {key}: {reason}",
            hint="the key must be an unencrypted private key (or loaded in ssh-agent)",
        )
    return proc.stdout


def verify_signature(
    manifest: bytes, signature: bytes | None, policy: SignaturePolicy, *, source: str
) -> VerifiedSignature | None:
    """Verify `signature` over `manifest` as `policy` demands; None where it demands nothing.

    Raises SignatureError naming `source` for a missing, corrupted, wrong-namespace,
    expired or unknown-signer signature.
    """
    if not policy.active:
        return None
    policy.checked()
    assert policy.allowed_signers is not None and policy.identity is not None
    if signature is None:
        raise SignatureError(
            f"{source}: the bundle is not signed (no {SIGNATURE_NAME}), and a signature is "
            "required",
            hint="ask the bundle's author for a bundle made with `repro pack --sign KEY`",
        )
    keygen = find_ssh_keygen()
    with tempfile.TemporaryDirectory(prefix="repro-sig-") as temp:
        sig_path = Path(temp) / SIGNATURE_NAME
        sig_path.write_bytes(signature)
        argv = ["-Y", "verify", "-f", str(policy.allowed_signers), "-I", policy.identity]
        proc = _run(keygen, [*argv, "-n", NAMESPACE, "-s", str(sig_path)], manifest)
    out = proc.stdout.decode("utf-8", "replace").strip()
    if proc.returncode == 0 and out.startswith("Good"):
        return VerifiedSignature(policy.identity, out)
    said = proc.stderr.decode("utf-8", "replace").strip()
    raise SignatureError(
        f"{source}: {SIGNATURE_NAME} does not verify: {_why(said, policy)}"
        + (f"\n  ssh-keygen said: {said}" if said else ""),
        hint="nothing was extracted or installed; get the bundle from its author again, "
        f"or check {policy.allowed_signers}",
    )


def _why(stderr: str, policy: SignaturePolicy) -> str:
    lowered = stderr.lower()
    for needle, why in FAILURES:
        if needle in lowered:
            return why
    return (
        f"it was not made by a key that {policy.allowed_signers} allows for "
        f"{policy.identity!r} (unknown signer)"
    )
