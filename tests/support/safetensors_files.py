"""Real .safetensors files and a real Hugging Face cache layout, made on disk.

`write_safetensors` writes the format's own layout (8-byte little-endian header length,
the JSON header padded with spaces to 8 bytes as the reference writer does, the data);
tests/test_safetensors_header.py checks it byte for byte against the `safetensors`
package. `hf_cache_model` lays out `models--org--name/{blobs,snapshots/<rev>,refs/main}`
as huggingface_hub does: each LFS file a blob named by its sha256, each snapshot file a
relative link `../../blobs/<name>`.
"""

from __future__ import annotations

import hashlib
import json
import random
import struct
from collections.abc import Mapping
from pathlib import Path

WIDTH = {"F32": 4, "BF16": 2, "F16": 2, "I64": 8, "U8": 1}


def safetensors_bytes(
    tensors: Mapping[str, tuple[str, list[int]]],
    *,
    seed: int = 0,
    metadata: Mapping[str, str] | None = None,
) -> bytes:
    """A .safetensors file of `tensors` (name -> (dtype, shape)), data random from `seed`,
    tensors laid out in name order as the reference writer does."""
    header: dict[str, object] = {}
    if metadata is not None:
        header["__metadata__"] = dict(metadata)
    offset = 0
    for name in sorted(tensors):
        dtype, shape = tensors[name]
        size = WIDTH[dtype]
        for dimension in shape:
            size *= dimension
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + size]}
        offset += size
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    data = random.Random(seed).randbytes(offset)
    return struct.pack("<Q", len(text)) + text + data


def write_safetensors(
    path: Path,
    tensors: Mapping[str, tuple[str, list[int]]],
    *,
    seed: int = 0,
    metadata: Mapping[str, str] | None = None,
) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(safetensors_bytes(tensors, seed=seed, metadata=metadata))
    return path


def shard(elements: int, *, seed: int, dtype: str = "F32") -> bytes:
    """One shard of two tensors, `elements` values in all."""
    half = elements // 2
    return safetensors_bytes(
        {"model.embed.weight": (dtype, [half]), "model.head.weight": (dtype, [elements - half])},
        seed=seed,
        metadata={"format": "pt"},
    )


def hf_cache_model(
    cache: Path, repo: str, revision: str, files: Mapping[str, bytes], *, lfs_over: int = 1024
) -> Path:
    """A model of the Hugging Face cache under `cache` (the hub directory): files over
    `lfs_over` bytes are blobs named by their sha256, the others by a 40-hex name (git's
    object id of a small file); `refs/main` names `revision`. The snapshot directory."""
    repo_dir = cache / f"models--{repo.replace('/', '--')}"
    blobs = repo_dir / "blobs"
    snapshot = repo_dir / "snapshots" / revision
    blobs.mkdir(parents=True, exist_ok=True)
    snapshot.mkdir(parents=True, exist_ok=True)
    (repo_dir / "refs").mkdir(exist_ok=True)
    (repo_dir / "refs" / "main").write_text(revision)
    for rel, data in files.items():
        if len(data) > lfs_over:
            name = hashlib.sha256(data).hexdigest()
        else:
            name = hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()
        (blobs / name).write_bytes(data)
        link = snapshot / rel
        link.parent.mkdir(parents=True, exist_ok=True)
        depth = "../" * (rel.count("/") + 2)
        link.symlink_to(f"{depth}blobs/{name}")
    return snapshot
