"""The safetensors header reader on real files and on hostile ones."""

from __future__ import annotations

import ctypes
import hashlib
import json
import os
import struct
from pathlib import Path

import pytest

from repro.errors import SafetensorsHeaderError
from repro.safetensors_header import MAX_HEADER_BYTES, read_header
from tests.support.safetensors_files import safetensors_bytes, write_safetensors

TENSORS = {"a.weight": ("F32", [2, 3]), "b.bias": ("BF16", [3]), "c": ("F32", [0])}


def test_facts_of_a_real_file(tmp_path: Path) -> None:
    path = write_safetensors(tmp_path / "m.safetensors", TENSORS, metadata={"format": "pt"})
    header = read_header(path)
    assert header.tensor_count == 3  # __metadata__ is not a tensor
    assert header.dtypes == ("BF16", "F32")
    assert header.data_length == 2 * 3 * 4 + 3 * 2
    length = struct.unpack("<Q", path.read_bytes()[:8])[0]
    assert header.header_length == length
    assert header.header_sha256 == hashlib.sha256(path.read_bytes()[8 : 8 + length]).hexdigest()


def test_the_reference_writer_agrees(tmp_path: Path) -> None:
    """The `safetensors` package's own bytes read as the helper's (the package orders
    tensors by alignment, then name: the offsets differ, the facts do not)."""
    safetensors = pytest.importorskip("safetensors")
    data = safetensors_bytes(TENSORS, metadata={"format": "pt"})
    length = struct.unpack("<Q", data[:8])[0]
    header = json.loads(data[8 : 8 + length])
    buffers = {}
    specs = {}
    for name, entry in header.items():
        if name == "__metadata__":
            continue
        begin, end = entry["data_offsets"]
        buffers[name] = ctypes.create_string_buffer(data[8 + length + begin : 8 + length + end])
        dtype = {"F32": "float32", "BF16": "bfloat16"}[entry["dtype"]]
        specs[name] = safetensors.TensorSpec(
            dtype=dtype,
            shape=entry["shape"],
            data_ptr=ctypes.addressof(buffers[name]),
            data_len=end - begin,
        )
    reference = safetensors.serialize(specs, metadata={"format": "pt"})
    path = tmp_path / "ref.safetensors"
    path.write_bytes(reference)
    mine = write_safetensors(tmp_path / "mine.safetensors", TENSORS, metadata={"format": "pt"})
    theirs, ours = read_header(path), read_header(mine)
    assert (theirs.tensor_count, theirs.dtypes, theirs.data_length) == (
        ours.tensor_count,
        ours.dtypes,
        ours.data_length,
    )
    assert len(reference) == len(data)


def _raw(path: Path, header: bytes, data: bytes = b"") -> Path:
    path.write_bytes(struct.pack("<Q", len(header)) + header + data)
    return path


def _refused(path: Path, words: str) -> None:
    with pytest.raises(SafetensorsHeaderError) as caught:
        read_header(path)
    assert str(path) in caught.value.message
    assert words in caught.value.message, caught.value.message


def test_truncated_data_and_bytes_after_it(tmp_path: Path) -> None:
    data = safetensors_bytes(TENSORS)
    path = tmp_path / "t.safetensors"
    path.write_bytes(data[:-1])
    _refused(path, "truncated")
    path.write_bytes(data + b"\0")
    _refused(path, "bytes after the tensors' data")


def test_shorter_than_the_length(tmp_path: Path) -> None:
    path = tmp_path / "s.safetensors"
    path.write_bytes(b"\x01\x02")
    _refused(path, "shorter than the 8-byte header length")


def test_a_length_past_the_file_or_over_the_bound(tmp_path: Path) -> None:
    path = tmp_path / "l.safetensors"
    path.write_bytes(struct.pack("<Q", 1000) + b"{}")
    _refused(path, "runs past the file")
    path.write_bytes(struct.pack("<Q", MAX_HEADER_BYTES + 1) + b"{}")
    _refused(path, "is over")
    path.write_bytes(struct.pack("<Q", 2**64 - 1))
    _refused(path, "is over")


@pytest.mark.parametrize(
    ("header", "words"),
    [
        (b"\xff\xfe", "not JSON"),
        (b"[1, 2]", "not a JSON object"),
        (b'{"a": 1}', "not an object of dtype"),
        (
            b'{"a": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}, '
            b'"a": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}}',
            "twice",
        ),
        (b'{"a": {"dtype": "F32", "shape": [-1], "data_offsets": [0, 4]}}', "shape"),
        (b'{"a": {"dtype": "F32", "shape": [1], "data_offsets": [4]}}', "data_offsets"),
        (b'{"a": {"dtype": "F32", "shape": [1], "data_offsets": [4, 0]}}', "end before begin"),
        (b'{"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 4]}}', "not those of shape"),
        (b'{"a": {"dtype": "F32", "shape": [1], "data_offsets": [4, 8]}}', "leaves a gap"),
        (
            b'{"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}, '
            b'"b": {"dtype": "F32", "shape": [1], "data_offsets": [4, 8]}}',
            "overlaps",
        ),
        (b'{"__metadata__": {"k": 1}}', "__metadata__"),
        (b'{"a": {"dtype": true, "shape": [1], "data_offsets": [0, 4]}}', "dtype"),
        (b"[" * 100_000 + b"]" * 100_000, "not JSON"),
    ],
)
def test_hostile_headers(tmp_path: Path, header: bytes, words: str) -> None:
    _refused(_raw(tmp_path / "h.safetensors", header, b"\0" * 8), words)


def test_a_huge_shape_is_not_multiplied_out(tmp_path: Path) -> None:
    shape = ", ".join(["1000000000000"] * 20_000)
    header = f'{{"a": {{"dtype": "F32", "shape": [{shape}], "data_offsets": [0, 4]}}}}'
    _refused(_raw(tmp_path / "h.safetensors", header.encode(), b"\0" * 4), "not those of shape")


def test_an_unknown_dtype_is_taken_by_its_offsets(tmp_path: Path) -> None:
    header = b'{"a": {"dtype": "F4", "shape": [3], "data_offsets": [0, 2]}}'
    facts = read_header(_raw(tmp_path / "f4.safetensors", header, b"\0\0"))
    assert (facts.tensor_count, facts.dtypes, facts.data_length) == (1, ("F4",), 2)


def test_a_fifo_is_not_opened_for_a_blocking_read(tmp_path: Path) -> None:
    fifo = tmp_path / "p.safetensors"
    os.mkfifo(fifo)
    _refused(fifo, "not a regular file")


def test_a_missing_file(tmp_path: Path) -> None:
    _refused(tmp_path / "none.safetensors", "cannot be read")
