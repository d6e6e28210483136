"""Signed bundles: real ed25519 keys made by ssh-keygen, real signatures, the real CLI."""

from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest

from repro.bundle.manifest import MANIFEST_NAME
from repro.bundle.signing import (
    NAMESPACE,
    SIGNATURE_NAME,
    SignaturePolicy,
    sign_manifest,
    verify_signature,
)
from repro.errors import SignatureError
from repro.snapshot.write.reproduce import render_setup_env
from tests.support.bundles import TOP, archive_tree, make_bundle_tree
from tests.support.run import run_repro

KEYGEN = shutil.which("ssh-keygen")
if KEYGEN is None:  # pragma: no cover - the test machine has OpenSSH 9.2
    raise RuntimeError("these tests need ssh-keygen (OpenSSH >= 8.1) on PATH")


def keygen(*args: str, input: bytes | None = None) -> subprocess.CompletedProcess[bytes]:
    assert KEYGEN is not None
    return subprocess.run([KEYGEN, *args], input=input, capture_output=True, timeout=60, check=True)


@dataclass(frozen=True)
class Keys:
    alice: Path  # private key; alice.pub beside it
    bob: Path
    allowed: Path  # alice@example.com may sign repro-bundle
    expired: Path  # alice's line with valid-before in the past
    git_only: Path  # alice may sign only the "git" namespace


@pytest.fixture(scope="module")
def keys(tmp_path_factory: pytest.TempPathFactory) -> Keys:
    root = tmp_path_factory.mktemp("keys")
    for who in ("alice", "bob"):
        keygen("-q", "-t", "ed25519", "-N", "", "-C", who, "-f", str(root / who))
    pub = (root / "alice.pub").read_text().strip()
    allowed = root / "allowed_signers"
    allowed.write_text(f'alice@example.com namespaces="{NAMESPACE}" {pub}\n')
    expired = root / "allowed_expired"
    expired.write_text(
        f'alice@example.com namespaces="{NAMESPACE}",valid-before="20200101" {pub}\n'
    )
    git_only = root / "allowed_git"
    git_only.write_text(f'alice@example.com namespaces="git" {pub}\n')
    return Keys(root / "alice", root / "bob", allowed, expired, git_only)


def trust(keys: Keys, allowed: Path | None = None) -> tuple[str, ...]:
    return (
        "--allowed-signers",
        str(allowed or keys.allowed),
        "--identity",
        "alice@example.com",
    )


def signed_archive(tmp_path: Path, key: Path | None) -> Path:
    tree = make_bundle_tree(tmp_path / "src", sign_with=key)
    return archive_tree(tree, tmp_path / "demo.tar")


def replace_signature(tmp_path: Path, signature: bytes) -> Path:
    tree = make_bundle_tree(tmp_path / "src")
    (tree / SIGNATURE_NAME).write_bytes(signature)
    return archive_tree(tree, tmp_path / "demo.tar")


def assert_unpack_refused(tmp_path: Path, archive: Path, *args: str, words: str) -> None:
    target = tmp_path / "out" / "target"
    target.parent.mkdir()
    proc = run_repro("unpack", str(archive), "--target", str(target), "--cpu", *args)
    err = proc.stderr.decode()
    assert proc.returncode == 1, err
    assert words in err, err
    assert list(target.parent.iterdir()) == []  # no target, no staging directory left


def setup_env_signature_step(
    tmp_path: Path, archive: Path, *args: str, path: str | None = None
) -> subprocess.CompletedProcess[str]:
    """The bundle's setup_env.sh, as pack renders it, run on `archive` extracted by GNU tar,
    stopped right after its signature step: REPRO_BOOTSTRAP_PYTHON names no interpreter,
    so a run that gets past the signature exits 2 naming it, before any Python runs."""
    where = tmp_path / "setup-env"
    where.mkdir(parents=True)
    subprocess.run(["tar", "-xf", str(archive), "-C", str(where)], timeout=60, check=True)
    script = where / TOP / "setup_env.sh"
    script.write_text(
        render_setup_env(
            tool_version="0.1.0", tool_python="3.11", source_python="3.11", wheel_pythons=["3.11"]
        )
    )
    home = tmp_path / "home"
    home.mkdir()
    env = {
        "PATH": path or os.environ["PATH"],
        "HOME": str(home),
        "REPRO_BOOTSTRAP_PYTHON": str(tmp_path / "no-python"),
    }
    proc = subprocess.run(
        ["/bin/bash", str(script), "--bootstrap-only", *args],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        check=False,
    )
    assert list(home.iterdir()) == []  # no tool venv, nothing under HOME
    return proc


def assert_setup_env_refused(tmp_path: Path, archive: Path, *args: str, words: str) -> None:
    proc = setup_env_signature_step(tmp_path, archive, *args)
    assert proc.returncode == 1, proc.stderr
    assert words in proc.stderr and "nothing was installed" in proc.stderr, proc.stderr
    assert "no such interpreter" not in proc.stderr  # refused before the Python is looked at


# --- library -------------------------------------------------------------------------


def test_sign_then_verify_round_trip(keys: Keys) -> None:
    manifest = b"0" * 64 + b"  a file\n"
    signature = sign_manifest(manifest, keys.alice)
    assert signature.startswith(b"-----BEGIN SSH SIGNATURE-----")
    policy = SignaturePolicy(keys.allowed, "alice@example.com")
    verified = verify_signature(manifest, signature, policy, source="m")
    assert verified is not None and "alice@example.com" in verified.detail
    with pytest.raises(SignatureError, match="does not match the manifest"):
        verify_signature(manifest + b"\n", signature, policy, source="m")


def test_no_policy_verifies_nothing() -> None:
    assert verify_signature(b"x", None, SignaturePolicy(), source="m") is None


# --- repro check -----------------------------------------------------------------------


def test_check_accepts_a_good_signature(tmp_path: Path, keys: Keys) -> None:
    archive = signed_archive(tmp_path, keys.alice)
    proc = run_repro("check", str(archive), *trust(keys))
    assert proc.returncode == 0, proc.stderr.decode()
    tree = tmp_path / "src" / TOP
    for target in (tree, tree / MANIFEST_NAME):
        proc = run_repro("check", str(target), *trust(keys))
        assert proc.returncode == 0, proc.stderr.decode()


def test_signature_is_the_archive_last_member(tmp_path: Path, keys: Keys) -> None:
    archive = signed_archive(tmp_path, keys.alice)
    names = subprocess.run(
        ["tar", "-tf", str(archive)], capture_output=True, text=True, timeout=60, check=True
    ).stdout.split()
    assert names[-2:] == [f"{TOP}/{MANIFEST_NAME}", f"{TOP}/{SIGNATURE_NAME}"]


def _wrong_namespace(keys: Keys, tmp_path: Path) -> bytes:
    manifest = (make_bundle_tree(tmp_path / "ns") / MANIFEST_NAME).read_bytes()
    return keygen("-Y", "sign", "-f", str(keys.alice), "-n", "git", input=manifest).stdout


@pytest.mark.parametrize(
    ("case", "words"),
    [
        ("unsigned", "the bundle is not signed"),
        ("bit-flipped", "does not match the manifest"),
        ("truncated", "corrupted"),
        ("garbage", "corrupted"),
        ("wrong-namespace", "another namespace"),
        ("unknown-signer", "unknown signer"),
        ("expired", "expired"),
        ("namespace-not-allowed", "not allowed the namespace"),
        ("tampered-manifest", "does not match the manifest"),
    ],
)
def test_check_and_unpack_refuse_bad_signatures(
    tmp_path: Path, keys: Keys, case: str, words: str
) -> None:
    allowed = keys.allowed
    if case == "unsigned":
        archive = signed_archive(tmp_path, None)
    elif case in ("bit-flipped", "truncated"):
        good = sign_manifest(
            (make_bundle_tree(tmp_path / "g") / MANIFEST_NAME).read_bytes(), keys.alice
        )
        lines = good.splitlines(keepends=True)
        if case == "truncated":
            bad = b"".join(lines[:3])
        else:
            flipped = b"A" if lines[-2][10:11] != b"A" else b"B"
            lines[-2] = lines[-2][:10] + flipped + lines[-2][11:]
            bad = b"".join(lines)
        archive = replace_signature(tmp_path, bad)
    elif case == "garbage":
        archive = replace_signature(tmp_path, b"not a signature\n")
    elif case == "wrong-namespace":
        archive = replace_signature(tmp_path, _wrong_namespace(keys, tmp_path))
    elif case == "unknown-signer":
        archive = signed_archive(tmp_path, keys.bob)
    elif case == "expired":
        archive, allowed = signed_archive(tmp_path, keys.alice), keys.expired
    elif case == "namespace-not-allowed":
        archive, allowed = signed_archive(tmp_path, keys.alice), keys.git_only
    else:
        tree = make_bundle_tree(tmp_path / "src", sign_with=keys.alice)
        manifest = tree / MANIFEST_NAME
        manifest.write_bytes(manifest.read_bytes() + b"0" * 64 + b"  extra\n")
        (tree / "extra").write_bytes(b"")
        archive = archive_tree(tree, tmp_path / "demo.tar")
    proc = run_repro("check", str(archive), *trust(keys, allowed))
    err = proc.stderr.decode()
    assert proc.returncode == 1, err
    assert words in err and "Traceback" not in err, err
    assert_unpack_refused(tmp_path, archive, *trust(keys, allowed), words=words)
    # setup_env.sh checks the signature itself, by the same rules, in the same words
    assert_setup_env_refused(tmp_path, archive, *trust(keys, allowed), words=words)


def test_the_rendered_setup_env_is_bash_that_parses(tmp_path: Path) -> None:
    script = tmp_path / "setup_env.sh"
    script.write_text(
        render_setup_env(
            tool_version="0.1.0", tool_python="3.11", source_python="3.12", wheel_pythons=[]
        )
    )
    proc = subprocess.run(
        ["/bin/bash", "-n", str(script)], capture_output=True, text=True, timeout=60, check=False
    )
    assert proc.returncode == 0, proc.stderr
    assert f'namespace="{NAMESPACE}"' in script.read_text()


def test_setup_env_passes_a_good_signature_before_anything_else(tmp_path: Path, keys: Keys) -> None:
    archive = signed_archive(tmp_path, keys.alice)
    proc = setup_env_signature_step(tmp_path, archive, *trust(keys))
    assert proc.returncode == 2, proc.stderr
    assert 'signature: Good "repro-bundle" signature for alice@example.com' in proc.stderr
    assert "no such interpreter" in proc.stderr  # the step after the signature
    assert "trusted without a signature check" not in proc.stderr


def test_setup_env_without_allowed_signers_says_the_code_is_unchecked(
    tmp_path: Path, keys: Keys
) -> None:
    proc = setup_env_signature_step(tmp_path, signed_archive(tmp_path, keys.alice))
    assert proc.returncode == 2, proc.stderr
    warned = [line for line in proc.stderr.splitlines() if "signature" in line]
    assert warned == [
        "setup_env.sh: no --allowed-signers: the bundle's code is trusted without a signature "
        "check (pass --allowed-signers FILE --identity ID to check MANIFEST.sha256.sig first)"
    ]


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (("--identity", "alice@example.com"), "need --allowed-signers FILE"),
        (("--require-signature",), "need --allowed-signers FILE"),
        (("--allowed-signers", "ALLOWED"), "--allowed-signers needs --identity ID"),
        (("--allowed-signers=/nope", "--identity=a"), "/nope: no such allowed-signers file"),
    ],
    ids=["identity-alone", "require-alone", "no-identity", "no-file"],
)
def test_setup_env_signature_options_like_repros(
    tmp_path: Path, keys: Keys, args: tuple[str, ...], words: str
) -> None:
    archive = signed_archive(tmp_path, keys.alice)
    given = [str(keys.allowed) if arg == "ALLOWED" else arg for arg in args]
    proc = setup_env_signature_step(tmp_path, archive, *given)
    assert proc.returncode == 2, proc.stderr
    assert words in proc.stderr


def test_setup_env_names_a_missing_or_old_ssh_keygen(tmp_path: Path, keys: Keys) -> None:
    """Test double for the old one: a script answering as OpenSSH 7.9's ssh-keygen does
    to -Y (this machine has only OpenSSH 9.2)."""
    archive = signed_archive(tmp_path, keys.alice)
    bare = tmp_path / "bare"
    bare.mkdir()
    for tool in ("dirname", "grep", "tr", "head"):
        found = shutil.which(tool)
        assert found is not None
        (bare / tool).symlink_to(found)
    proc = setup_env_signature_step(tmp_path / "a", archive, *trust(keys), path=str(bare))
    assert proc.returncode == 1, proc.stderr
    assert "needs ssh-keygen (OpenSSH 8.1 or newer), and it is not on PATH" in proc.stderr
    (bare / "ssh-keygen").write_text(
        "#!/bin/sh\necho 'ssh-keygen: illegal option -- Y' >&2\nexit 1\n"
    )
    (bare / "ssh-keygen").chmod(0o755)
    proc = setup_env_signature_step(tmp_path / "b", archive, *trust(keys), path=str(bare))
    assert proc.returncode == 1, proc.stderr
    assert "older than OpenSSH 8.1" in proc.stderr and "nothing was installed" in proc.stderr


def test_require_signature_needs_allowed_signers(tmp_path: Path) -> None:
    archive = signed_archive(tmp_path, None)
    for command in ("check", "unpack"):
        proc = run_repro(command, str(archive), "--require-signature")
        assert proc.returncode == 2
        assert "--allowed-signers" in proc.stderr.decode()


def test_allowed_signers_needs_identity(tmp_path: Path, keys: Keys) -> None:
    archive = signed_archive(tmp_path, keys.alice)
    proc = run_repro("check", str(archive), "--allowed-signers", str(keys.allowed))
    assert proc.returncode == 2
    assert "--identity" in proc.stderr.decode()


def test_unpack_with_a_good_signature_goes_on(tmp_path: Path, keys: Keys) -> None:
    archive = signed_archive(tmp_path, keys.alice)
    target = tmp_path / "target"
    proc = run_repro(
        "unpack", str(archive), "--target", str(target), "--cpu", "--dry-run", *trust(keys)
    )
    assert proc.returncode == 0, proc.stderr.decode()
    assert not target.exists()


def _path_without_ssh_keygen(tmp_path: Path) -> str:
    """A PATH holding only what the CLI needs besides ssh-keygen."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    return str(bin_dir)


def test_missing_ssh_keygen_is_named(tmp_path: Path, keys: Keys) -> None:
    archive = signed_archive(tmp_path, keys.alice)
    env = dict(os.environ, PATH=_path_without_ssh_keygen(tmp_path))
    proc = run_repro("check", str(archive), *trust(keys), env=env)
    err = proc.stderr.decode()
    assert proc.returncode == 1, err
    assert "ssh-keygen" in err and "not on PATH" in err and "8.1" in err


def test_old_ssh_keygen_is_named(tmp_path: Path, keys: Keys) -> None:
    """Test double: a script that answers as OpenSSH 7.9's ssh-keygen does to -Y (this
    machine has only OpenSSH 9.2)."""
    bin_dir = tmp_path / "oldssh"
    bin_dir.mkdir()
    fake = bin_dir / "ssh-keygen"
    fake.write_text("#!/bin/sh\necho 'ssh-keygen: illegal option -- Y' >&2\nexit 1\n")
    fake.chmod(0o755)
    archive = signed_archive(tmp_path, keys.alice)
    env = dict(os.environ, PATH=f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    proc = run_repro("check", str(archive), *trust(keys), env=env)
    err = proc.stderr.decode()
    assert proc.returncode == 1, err
    assert "older than OpenSSH 8.1" in err


# --- repro pack --sign -------------------------------------------------------------------


@pytest.fixture(scope="module")
def workspace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A workspace with a real (empty) Python 3.11 venv."""
    from tests.snapshot.conftest import PYTHON_311, make_venv

    root = tmp_path_factory.mktemp("sign-ws") / "signed"
    root.mkdir()
    make_venv(PYTHON_311, root / "venv")
    (root / "notes.txt").write_text("notes\n")
    (root / "repro.toml").write_text('[files]\ninclude = ["notes.txt"]\n')
    return root


@pytest.mark.slow
def test_pack_sign_writes_a_signature_that_check_verifies(
    tmp_path: Path, keys: Keys, workspace: Path
) -> None:
    out = tmp_path / "signed-1.0.tar"
    proc = run_repro(
        "pack", str(workspace), "-o", str(out), "--version", "1.0", "--offline",
        "--sign", str(keys.alice),
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr.decode()
    names = subprocess.run(
        ["tar", "-tf", str(out)], capture_output=True, text=True, timeout=60, check=True
    ).stdout.split()
    assert names[-1] == f"signed-1.0/{SIGNATURE_NAME}"
    good = run_repro("check", str(out), *trust(keys))
    assert good.returncode == 0, good.stderr.decode()
    wrong = run_repro("check", str(out), *trust(keys, keys.git_only))
    assert wrong.returncode == 1


@pytest.mark.slow
def test_pack_sign_with_a_missing_key_writes_nothing(tmp_path: Path, workspace: Path) -> None:
    out = tmp_path / "x.tar"
    proc = run_repro("pack", str(workspace), "-o", str(out), "--sign", str(tmp_path / "nokey"))
    assert proc.returncode == 2
    assert "no such private key" in proc.stderr.decode()
    assert list(tmp_path.iterdir()) == []
