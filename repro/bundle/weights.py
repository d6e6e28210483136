"""A model's weight files as pack pinned them: `[[models.weights]]` of bundle.toml.

Each large file of a model directory is pinned by its size and, unless pack ran with
`--no-hash-weights`, its sha256: taken from the Hugging Face cache's blob name when the
file is a hub blob (`blobs/<sha256>`, never read), else hashed. A .safetensors file also
carries its header's facts, which unpack checks on every run at the cost of one small
read. The schema is normative in docs/bundle-format.md.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Literal

from repro.bundle.tomltable import TomlTable, choice

PinSource = Literal["hf-blob", "hashed", "not-hashed"]
PIN_SOURCES: tuple[PinSource, ...] = ("hf-blob", "hashed", "not-hashed")
_SHA256 = re.compile(r"[0-9a-f]{64}")


@dataclass(frozen=True)
class SafetensorsFacts:
    """What a .safetensors file's header says: its tensors, their dtypes, the data's
    length (the file is 8 + header + data bytes), the header's own sha256."""

    tensor_count: int
    dtypes: tuple[str, ...]  # sorted, each once
    data_length: int
    header_sha256: str | None = None

    def differences(self, found: SafetensorsFacts) -> list[str]:
        """What `found` (read at unpack) has otherwise, in words; empty when the same."""
        out = []
        if found.tensor_count != self.tensor_count:
            out.append(f"{found.tensor_count} tensors, {self.tensor_count} pinned")
        if found.dtypes != self.dtypes:
            out.append(f"dtypes {', '.join(found.dtypes)}, {', '.join(self.dtypes)} pinned")
        if found.data_length != self.data_length:
            out.append(f"{found.data_length} data bytes, {self.data_length} pinned")
        if not out and self.header_sha256 and found.header_sha256 != self.header_sha256:
            out.append("the header differs (tensor names, shapes or offsets)")
        return out

    def to_toml(self) -> dict[str, Any]:
        table: dict[str, Any] = {
            "tensor_count": self.tensor_count,
            "dtypes": list(self.dtypes),
            "data_length": self.data_length,
        }
        if self.header_sha256 is not None:
            table["header_sha256"] = self.header_sha256
        return table


@dataclass(frozen=True)
class WeightPin:
    """One weight file: its path relative to the model directory, size, sha256."""

    path: str
    size: int
    sha256: str | None  # None: not hashed (source "not-hashed")
    source: PinSource
    safetensors: SafetensorsFacts | None = None

    def to_toml(self) -> dict[str, Any]:
        table: dict[str, Any] = {"path": self.path, "size": self.size, "source": self.source}
        if self.sha256 is not None:
            table["sha256"] = self.sha256
        if self.safetensors is not None:
            table["safetensors"] = self.safetensors.to_toml()
        return table


def load_pin(table: TomlTable) -> WeightPin:
    """One `[[models.weights]]` table; each problem is added to the table's list, naming
    its key (a pin with problems comes back with placeholder values)."""
    path = table.string("path")
    if not path:
        table.problem("path", "must name a file of the model directory")
    else:
        parts = path.split("/")
        if path.startswith("/") or ".." in parts or "" in parts or "." in parts or "\\" in path:
            table.problem(
                "path", f"must be a relative path inside the model directory, not {path!r}"
            )
    size = table.integer("size")
    if size < 0:
        table.problem("size", f"must not be negative, not {size}")
    source = choice(table, "source", PIN_SOURCES)
    sha256 = table.opt_string("sha256")
    if sha256 is not None and not _SHA256.fullmatch(sha256):
        table.problem("sha256", "must be a lowercase hex sha256")
    if source == "not-hashed" and sha256 is not None:
        table.problem("sha256", 'must be absent when source is "not-hashed"')
    if source != "not-hashed" and sha256 is None:
        table.problem("sha256", f'is required when source is "{source}"')
    facts_table = table.table("safetensors", required=False)
    facts = _load_facts(facts_table) if facts_table is not None else None
    table.finish()
    return WeightPin(path=path, size=size, sha256=sha256, source=source, safetensors=facts)


def _load_facts(table: TomlTable) -> SafetensorsFacts:
    count = table.integer("tensor_count")
    length = table.integer("data_length")
    for key, value in (("tensor_count", count), ("data_length", length)):
        if value < 0:
            table.problem(key, f"must not be negative, not {value}")
    dtypes = table.strings("dtypes", required=True) or ()
    if list(dtypes) != sorted(set(dtypes)):
        table.problem("dtypes", "must be sorted, each dtype once")
    header = table.opt_string("header_sha256")
    if header is not None and not _SHA256.fullmatch(header):
        table.problem("header_sha256", "must be a lowercase hex sha256")
    table.finish()
    return SafetensorsFacts(count, tuple(dtypes), length, header)


def load_pins(table: TomlTable, key: str = "weights") -> tuple[WeightPin, ...]:
    """The pins of a `[[models]]` table; a path pinned twice is a problem."""
    pins = tuple(load_pin(item) for item in table.tables(key))
    seen: set[str] = set()
    for index, pin in enumerate(pins):
        if pin.path in seen:
            table.problem(f"{key}[{index}].path", f"pins {pin.path!r} a second time")
        seen.add(pin.path)
    return pins


def dump_pins(pins: tuple[WeightPin, ...]) -> list[dict[str, Any]]:
    return [pin.to_toml() for pin in sorted(pins, key=lambda p: p.path)]


__all__ = [
    "PIN_SOURCES",
    "PinSource",
    "SafetensorsFacts",
    "WeightPin",
    "dump_pins",
    "load_pin",
    "load_pins",
]
