"""Bundle members of the right name and the wrong content, through the real CLI.

A real `repro pack --wheels all` bundle, one member replaced (its vault.toml entry and
the manifest updated, so `repro check` passes): a vault wheel that is no sound zip,
read by the GPU preflight (a GPU is seen through the test double of nvidia-smi,
tests/support/doubles/nvidia_smi.py); a pylock.toml of wrong types, read by `repro sbom`,
`inspect` and `diff`.
Each ends in a clear error naming the file, with an exit code and no traceback.
"""

from __future__ import annotations

import hashlib
import io
import json
import shutil
import struct
import zipfile
from collections.abc import Callable
from pathlib import Path

import pytest

from repro._toml import loads as toml_loads
from repro.bundle.manifesttree import write_manifest
from tests.e2e.test_hostile_sources import packed  # noqa: F401 - the shared packed bundle
from tests.support.doubles.nvidia_smi import fake_nvidia_smi
from tests.support.run import run_repro

pytestmark = pytest.mark.slow

SO_NAME = "six/_kernels.so"


def _zip_with_so(data: bytes = b"\x7fELF" + b"\0" * 60) -> bytes:
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_STORED) as archive:
        archive.writestr("six/__init__.py", "")
        archive.writestr(SO_NAME, data)
    return out.getvalue()


def _set_headers(data: bytes, *, flags: int = 0, method: int | None = None) -> bytes:
    """The .so member's local and central headers with `flags` or'ed in and `method`."""
    buffer = bytearray(data)
    name = SO_NAME.encode()
    for signature, flag_at, method_at, name_at in (
        (b"PK\x03\x04", 6, 8, 30),
        (b"PK\x01\x02", 8, 10, 46),
    ):
        start = 0
        while True:
            local = buffer.index(signature, start)
            if buffer[local + name_at : local + name_at + len(name)] == name:
                break
            start = local + 4
        (old,) = struct.unpack_from("<H", buffer, local + flag_at)
        struct.pack_into("<H", buffer, local + flag_at, old | flags)
        if method is not None:
            struct.pack_into("<H", buffer, local + method_at, method)
    return bytes(buffer)


def _bad_crc() -> bytes:
    data = bytearray(_zip_with_so())
    at = data.index(b"\x7fELF")
    data[at + 10] ^= 0xFF
    return bytes(data)


WHEEL_DAMAGE: list[tuple[str, Callable[[], bytes], str]] = [
    ("not-a-zip", lambda: b"this is not a zip\n" * 20, "BadZipFile"),
    ("truncated", lambda: _zip_with_so()[:-30], "BadZipFile"),
    ("bad-crc", _bad_crc, "Bad CRC-32"),
    ("encrypted", lambda: _set_headers(_zip_with_so(), flags=0x1), "encrypted"),
    ("unknown-method", lambda: _set_headers(_zip_with_so(), method=97), "compression"),
]

CUSTOM_WHEEL = "six-1.16.0-py2.py3-none-any.whl"


def _with_wheel(packed: Path, into: Path, data: bytes) -> Path:  # noqa: F811
    bundle = into / packed.name
    shutil.copytree(packed, bundle)
    wheel = bundle / "env" / "wheels" / CUSTOM_WHEEL
    old = hashlib.sha256(wheel.read_bytes()).hexdigest()
    wheel.write_bytes(data)
    vault = bundle / "env" / "vault.toml"
    text = vault.read_text()
    assert old in text
    # carried because no index serves it: the GPU preflight reads such a wheel's kernels
    custom = text.replace(old, hashlib.sha256(data).hexdigest())
    at = custom.index(f'filename = "{CUSTOM_WHEEL}"')
    reason = custom.index('reason = "--wheels all"', at)
    vault.write_text(
        custom[:reason]
        + 'reason = "a local build"'
        + custom[reason + len('reason = "--wheels all"') :]
    )
    write_manifest(bundle)
    assert run_repro("check", str(bundle / "MANIFEST.sha256")).returncode == 0
    return bundle


@pytest.mark.parametrize(
    ("make", "expected"), [c[1:] for c in WHEEL_DAMAGE], ids=[c[0] for c in WHEEL_DAMAGE]
)
def test_gpu_preflight_names_a_vault_wheel_it_cannot_read(
    packed: Path,  # noqa: F811
    tmp_path: Path,
    make: Callable[[], bytes],
    expected: str,
) -> None:
    bundle = _with_wheel(packed, tmp_path, make())
    env = fake_nvidia_smi(tmp_path / "double", "9.0", "13.0")
    target = tmp_path / "target"
    result = run_repro(
        "unpack", str(bundle), "--target", str(target), "--dry-run", "--offline", env=env
    )
    err = result.stderr.decode()
    assert result.returncode == 1, err
    assert "Traceback" not in err
    assert "preflight failed" in err and "nothing was installed" in err
    assert f"env/wheels/{CUSTOM_WHEEL}: not a readable wheel" in err
    assert expected in err
    assert not target.exists()


# --- env/pylock.toml of the wrong types: `repro sbom`, `inspect`, `diff` -----------------

PYLOCK_HEAD = 'lock-version = "1.0"\ncreated-by = "repro"\n'
SIX = '[[packages]]\nname = "six"\nversion = "1.16.0"\n'
SIX_WHEEL = SIX + '[[packages.wheels]]\nname = "six-1.16.0-py2.py3-none-any.whl"\n'

PYLOCK_CASES = [
    ("packages-string", 'packages = "x"\n', "'packages'"),
    ("package-string", 'packages = ["x"]\n', "'packages[0]'"),
    ("name-integer", "[[packages]]\nname = 3\n", "'packages[0].name'"),
    ("version-list", '[[packages]]\nname = "six"\nversion = ["1"]\n', "'packages[0].version'"),
    ("index-list", SIX + "index = [1]\n", "'packages[0].index'"),
    ("wheels-strings", SIX + 'wheels = ["six.whl"]\n', "'packages[0].wheels[0]'"),
    ("sdist-string", SIX + 'sdist = "six.tar.gz"\n', "'packages[0].sdist'"),
    ("hashes-string", SIX_WHEEL + 'hashes = "abc"\n', "'packages[0].wheels[0].hashes'"),
    ("hash-integer", SIX_WHEEL + "hashes = {sha256 = 3}\n", "'packages[0].wheels[0].hashes'"),
    (
        "wheel-name",
        SIX + '[[packages.wheels]]\nname = "x"\nhashes = {sha256 = "ab"}\n',
        "'packages[0].wheels[0]'",
    ),
    ("no-lock-version", 'created-by = "repro"\n', "'lock-version'"),
]


def _with_pylock(packed: Path, into: Path, text: str) -> Path:  # noqa: F811
    bundle = into / packed.name
    shutil.copytree(packed, bundle)
    (bundle / "env" / "pylock.toml").write_text(text)
    write_manifest(bundle)
    assert run_repro("check", str(bundle / "MANIFEST.sha256")).returncode == 0
    return bundle


@pytest.mark.parametrize(
    ("body", "key"), [c[1:] for c in PYLOCK_CASES], ids=[c[0] for c in PYLOCK_CASES]
)
def test_sbom_refuses_a_pylock_of_the_wrong_types(
    packed: Path,  # noqa: F811
    tmp_path: Path,
    body: str,
    key: str,
) -> None:
    text = body if body.startswith("created-by") else PYLOCK_HEAD + body
    bundle = _with_pylock(packed, tmp_path, text)
    result = run_repro("sbom", str(bundle), "-o", str(tmp_path / "sbom.json"))
    err = result.stderr.decode()
    assert result.returncode == 1, err
    assert "Traceback" not in err
    assert "env/pylock.toml: not a PEP 751 lock" in err and key in err
    assert not (tmp_path / "sbom.json").exists()


def test_inspect_and_diff_read_past_a_pylock_of_the_wrong_types(
    packed: Path,  # noqa: F811
    tmp_path: Path,
) -> None:
    """inspect and diff do not parse pylock.toml: the bundle is shown, and compared."""
    bundle = _with_pylock(packed, tmp_path, PYLOCK_HEAD + 'packages = "x"\n')
    inspected = run_repro("inspect", str(bundle))
    assert inspected.returncode == 0, inspected.stderr.decode()
    diffed = run_repro("diff", str(packed), str(bundle))
    output = diffed.stdout.decode() + diffed.stderr.decode()
    assert diffed.returncode in (0, 1), output
    assert "Traceback" not in output + inspected.stderr.decode()


# --- a failed install step: recorded as failed, and the rerun fails the same way -----


def test_a_failed_install_is_recorded_as_failed_and_a_rerun_fails_the_same_way(
    packed: Path,  # noqa: F811
    tmp_path: Path,
) -> None:
    """The vault lacks six's wheel (its entry and file removed, re-manifested), so
    `--installer vault` fails inside the install step: exit 3, state.toml says the step
    failed (and started: the next run redoes it from clean), the saved report names it.
    The same command again rebuilds the venv and fails the same way, no traceback."""
    bundle = tmp_path / packed.name
    shutil.copytree(packed, bundle)
    (bundle / "env" / "wheels" / CUSTOM_WHEEL).unlink()
    vault = bundle / "env" / "vault.toml"
    tables = vault.read_text().split("[[wheels]]")
    vault.write_text("[[wheels]]".join(t for t in tables if CUSTOM_WHEEL not in t))
    write_manifest(bundle)
    assert run_repro("check", str(bundle / "MANIFEST.sha256")).returncode == 0
    target = tmp_path / "target"
    argv = ["unpack", str(bundle), "--target", str(target), "--cpu", "--no-smoke"]
    argv += ["--offline", "--installer", "vault"]
    outputs = []
    for _ in range(2):
        result = run_repro(*argv)
        output = result.stdout.decode() + result.stderr.decode()
        assert result.returncode == 3, output
        assert "Traceback" not in output
        assert "has no wheel this Python takes for 1 pin(s): six" in output
        state = toml_loads((target / ".repro" / "state.toml").read_text())
        assert state["failed"] == "install" and state["started"] == "install"
        assert state["done"] == ["preflight", "venv"]
        report = json.loads((target / ".repro" / "unpack-report.json").read_text())
        steps = {s["name"]: s["status"] for s in report["steps"]}
        assert steps["install"] == "failed"
        outputs.append(output)
    assert "is removed and built again" in outputs[1]
