"""env/kernels.toml: dumped and loaded back the same; every malformed input refused
naming the member and the key."""

from __future__ import annotations

import pytest

from repro.bundle.kernels import (
    DEFAULT_COMMAND,
    KernelAudit,
    KernelDistribution,
    KernelObject,
    KernelSource,
    dump_kernels,
    kernel_distributions,
    load_kernels,
)
from repro.errors import BundleFormatError

SOURCE = "b.tar:env/kernels.toml"

AUDIT = KernelAudit(
    (
        KernelDistribution(
            "torch",
            "2.11.0+cu130",
            (
                KernelObject("torch/lib/libtorch_cuda.so", ("compute_120", "sm_100", "sm_90")),
                KernelObject("torch/lib/libc10_cuda.so", ("sm_90",)),
            ),
        ),
        KernelDistribution("flash-attn", "2.8.3", (KernelObject("fa.so.1", ("sm_90a",)),)),
    ),
    (
        KernelSource(
            "flash-attn",
            "2.8.3",
            "git",
            "/src/flash-attention",
            120,
            4096,
            editable=True,
            arch_env=("TORCH_CUDA_ARCH_LIST", "FA_ARCHS"),
            env=(("MAX_JOBS", "4"),),
            command=("{python}", "setup.py", "bdist_wheel", "-d", "{out}"),
            check=("{python}", "-c", "import flash_attn"),
        ),
    ),
)


def test_dump_then_load_is_the_same_audit_sorted() -> None:
    data = dump_kernels(AUDIT)
    loaded = load_kernels(data, source=SOURCE)
    assert [d.name for d in loaded.distributions] == ["flash-attn", "torch"]
    torch = loaded.distribution("torch")
    assert torch is not None
    assert [o.path for o in torch.objects] == [
        "torch/lib/libc10_cuda.so",
        "torch/lib/libtorch_cuda.so",
    ]
    assert torch.archs == ("compute_120", "sm_100", "sm_90")
    assert loaded.source("flash-attn") == AUDIT.sources[0]
    assert loaded.source("torch") is None
    assert dump_kernels(loaded) == data


def test_an_empty_audit_and_defaults() -> None:
    assert load_kernels(dump_kernels(KernelAudit()), source=SOURCE) == KernelAudit()
    minimal = (
        b'[[sources]]\nname = "k"\nversion = "1"\nkind = "tree"\norigin = "/s"\n'
        b"files = 1\nsize = 2\n"
    )
    (source,) = load_kernels(minimal, source=SOURCE).sources
    assert source.command == DEFAULT_COMMAND and not source.editable and source.check == ()


def test_kernel_distributions_groups_rows_and_drops_objects_without_code() -> None:
    rows = [
        ("b", "1", "b/x.so", ["sm_90", "sm_90"]),
        ("a", "2", "a/z.so", ["sm_80"]),
        ("a", "2", "a/y.so", []),
        ("c", "3", "c/host.so", []),
    ]
    assert kernel_distributions(rows) == (
        KernelDistribution("a", "2", (KernelObject("a/z.so", ("sm_80",)),)),
        KernelDistribution("b", "1", (KernelObject("b/x.so", ("sm_90",)),)),
    )


DIST = '[[distributions]]\nname = "k"\nversion = "1"\n'
OBJ = DIST + '[[distributions.objects]]\npath = "k/a.so"\narchs = ["sm_90"]\n'
SRC = '[[sources]]\nname = "k"\nversion = "1"\nkind = "tree"\norigin = "/s"\nfiles = 1\nsize = 2\n'
BAD = [
    # (document, what the message must name)
    ("distributions = [", "not valid TOML"),
    ("distributions = 1", "distributions and sources are arrays of tables"),
    ("sources = {}", "distributions and sources are arrays of tables"),
    ("distributions = [1]", "distributions[0]: not a table"),
    ('[[distributions]]\nname = "Not Canonical"\nversion = "1"\n', "distributions[0].name"),
    ('[[distributions]]\nname = "k"\n', "distributions[0].version"),
    ('[[distributions]]\nname = "k"\nversion = ""\n', "distributions[0].version"),
    (DIST + "objects = 3\n", "distributions[0].objects"),
    (DIST + "objects = [1]\n", "distributions[0].objects[0].path"),
    (DIST + '[[distributions.objects]]\npath = "/abs.so"\narchs = []\n', "objects[0].path"),
    (DIST + '[[distributions.objects]]\npath = "../x.so"\narchs = []\n', "objects[0].path"),
    (DIST + '[[distributions.objects]]\npath = "a//x.so"\narchs = []\n', "objects[0].path"),
    (DIST + '[[distributions.objects]]\npath = "x.so"\narchs = ["sm_9"]\n', "objects[0].archs"),
    (DIST + '[[distributions.objects]]\npath = "x.so"\narchs = "sm_90"\n', "objects[0].archs"),
    (DIST + '[[distributions.objects]]\npath = "x.so"\narchs = ["ptx_90"]\n', "objects[0].archs"),
    (OBJ + OBJ, "a distribution is listed twice in distributions"),
    ("sources = [1]", "sources[0]: not a table"),
    ('[[sources]]\nname = "K K"\n', "sources[0].name"),
    ('[[sources]]\nname = "k"\nkind = "tree"\norigin = "/s"\n', "sources[0].version"),
    ('[[sources]]\nname = "k"\nversion = "1"\norigin = "/s"\n', "sources[0].kind"),
    (SRC.replace('"tree"', '"zip"'), "sources[0].kind: 'zip' is not one of"),
    (SRC.replace("files = 1", "files = -1"), "sources[0]: files and size must be counts"),
    (SRC.replace("size = 2", 'size = "2"'), "sources[0]: files and size must be counts"),
    (SRC + "editable = 1\n", "sources[0].editable"),
    (SRC + 'arch_env = ["1BAD"]\n', "sources[0].arch_env"),
    (SRC + "env = { A = 1 }\n", "sources[0].env"),
    (SRC + 'env = { "A B" = "x" }\n', "sources[0].env"),
    (SRC + "command = []\n", "sources[0].command"),
    (SRC + "command = [1]\n", "sources[0].command"),
    (SRC + 'check = "python"\n', "sources[0].check"),
    (SRC + SRC, "a distribution is listed twice in sources"),
]


@pytest.mark.parametrize(("document", "named"), BAD)
def test_every_bad_input_is_refused_naming_the_member_and_key(document: str, named: str) -> None:
    with pytest.raises(BundleFormatError) as caught:
        load_kernels(document.encode(), source=SOURCE)
    assert caught.value.message.startswith(SOURCE + ": ")
    assert named in caught.value.message


def test_bytes_that_are_not_utf8_are_refused() -> None:
    with pytest.raises(BundleFormatError, match="not valid TOML"):
        load_kernels(b"\xff\xfe", source=SOURCE)
