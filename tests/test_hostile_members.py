"""Bundle members of the right name and the wrong content, through the real CLI.

A real `repro pack --wheels all` bundle, one member replaced (its vault.toml entry and
the manifest updated, so `repro check` passes): a vault wheel that is no sound zip,
read by the GPU preflight (a GPU is seen through tests/nvsmi.py's test double of
nvidia-smi); a pylock.toml of wrong types, read by `repro sbom`, `inspect` and `diff`.
Each ends in a clear error naming the file, with an exit code and no traceback.
"""

from __future__ import annotations

import hashlib
import io
import shutil
import struct
import zipfile
from collections.abc import Callable
from pathlib import Path

import pytest

from repro.bundle.manifesttree import write_manifest
from tests.conftest import run_repro
from tests.nvsmi import fake_nvidia_smi
from tests.test_hostile_sources import packed  # noqa: F401 - the shared packed bundle

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
