"""env/environment.json: the facts a probe reports about an environment, as frozen
dataclasses, and their reading from the probe's JSON document (`facts_from_dict`).

The probe itself (run with the target's own interpreter) is repro.snapshot.facts.environment;
the script it runs is repro/probe/environment.py.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

from packaging.utils import canonicalize_name

from repro.redaction import scrub_document

PROBE_SCHEMA = 1


@dataclass(frozen=True)
class PythonFacts:
    version: str
    implementation: str
    executable: str
    prefix: str
    base_prefix: str
    is_venv: bool
    purelib: str
    platlib: str
    include: str
    scripts: str
    sys_path: tuple[str, ...]
    soabi: str | None


@dataclass(frozen=True)
class PlatformFacts:
    system: str
    machine: str
    release: str
    platform: str
    libc: str | None
    libc_version: str | None


@dataclass(frozen=True)
class DistributionFacts:
    name: str
    normalized_name: str
    version: str
    installer: str | None
    direct_url: Mapping[str, Any] | None
    editable: bool
    requested: bool
    metadata_dir: str
    metadata_kind: str
    site_dir: str
    has_record: bool
    top_level: tuple[str, ...]


@dataclass(frozen=True)
class DeviceFacts:
    index: int
    name: str
    capability: str
    memory_bytes: int


@dataclass(frozen=True)
class TorchFacts:
    cuda: str | None
    hip: str | None
    git_version: str | None
    arch_list: tuple[str, ...]
    cuda_available: bool
    device_count: int
    devices: tuple[DeviceFacts, ...]
    error: str | None = None


ModuleProbe = Literal["files", "import"]
MODULE_PROBES: tuple[ModuleProbe, ...] = ("files", "import")


@dataclass(frozen=True)
class ModuleFacts:
    """A key module's `__version__` next to its distribution's metadata version.

    `probed` says how: "import" (imported in the target: runtime version, CUDA availability,
    devices, torch's own arch list) or "files" (read from installed files, nothing imported:
    torch's version.py and the architectures of libtorch_cuda.so's kernels)."""

    module: str
    distribution: str | None
    distribution_version: str | None
    version: str | None
    file: str | None
    error: str | None
    torch: TorchFacts | None = None
    probed: ModuleProbe = "import"


@dataclass(frozen=True)
class GpuFacts:
    index: int
    name: str
    compute_cap: str | None
    driver_version: str | None
    memory_total: str | None


@dataclass(frozen=True)
class NvidiaSmiFacts:
    present: bool
    gpus: tuple[GpuFacts, ...]
    driver_cuda_version: str | None
    error: str | None


@dataclass(frozen=True)
class CudaToolkitFacts:
    cuda_home: str | None
    nvcc: str | None
    nvcc_version: str | None
    nvcc_output: str | None


@dataclass(frozen=True)
class EnvironmentFacts:
    schema: int
    python: PythonFacts
    platform: PlatformFacts
    distributions: tuple[DistributionFacts, ...]
    modules: tuple[ModuleFacts, ...]
    nvidia_smi: NvidiaSmiFacts
    cuda_toolkit: CudaToolkitFacts
    env: Mapping[str, str]
    errors: Mapping[str, str] = field(default_factory=dict)

    def distribution(self, name: str) -> DistributionFacts | None:
        wanted = canonicalize_name(name)
        for dist in self.distributions:
            if dist.normalized_name == wanted:
                return dist
        return None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2, sort_keys=True, ensure_ascii=False) + "\n"


def facts_from_dict(document: Mapping[str, Any]) -> EnvironmentFacts:
    """Build EnvironmentFacts from the probe's JSON (or from a stored environment.json).

    Every string is scrubbed first (repro.redaction.scrub_text): a direct_url.json URL
    with `x-access-token:ghp_...@` or a token-shaped value never reaches the facts, so
    no member written from them (environment.json, REPRODUCE.md, vault reasons) holds it.
    """
    document = scrub_document(document)
    if document.get("schema") != PROBE_SCHEMA:
        raise ValueError(f"probe schema {document.get('schema')!r}, expected {PROBE_SCHEMA}")
    py = document["python"]
    python = PythonFacts(
        version=py["version"],
        implementation=py["implementation"],
        executable=py["executable"],
        prefix=py["prefix"],
        base_prefix=py["base_prefix"],
        is_venv=bool(py["is_venv"]),
        purelib=py["purelib"],
        platlib=py["platlib"],
        include=py["include"],
        scripts=py["scripts"],
        sys_path=tuple(py["sys_path"]),
        soabi=py.get("soabi"),
    )
    plat = document["platform"] or {}
    platform = PlatformFacts(
        system=plat.get("system", ""),
        machine=plat.get("machine", ""),
        release=plat.get("release", ""),
        platform=plat.get("platform", ""),
        libc=plat.get("libc"),
        libc_version=plat.get("libc_version"),
    )
    dists = tuple(
        DistributionFacts(
            name=d["name"],
            normalized_name=d["normalized_name"],
            version=d["version"],
            installer=d.get("installer"),
            direct_url=d.get("direct_url"),
            editable=bool(d.get("editable")),
            requested=bool(d.get("requested")),
            metadata_dir=d["metadata_dir"],
            metadata_kind=d["metadata_kind"],
            site_dir=d["site_dir"],
            has_record=bool(d.get("has_record")),
            top_level=tuple(d.get("top_level") or ()),
        )
        for d in document.get("distributions") or ()
    )
    modules = tuple(_module(m) for m in document.get("modules") or ())
    smi = document.get("nvidia_smi") or {}
    nvidia_smi = NvidiaSmiFacts(
        present=bool(smi.get("present")),
        gpus=tuple(
            GpuFacts(
                index=int(g["index"]),
                name=g["name"],
                compute_cap=g.get("compute_cap"),
                driver_version=g.get("driver_version"),
                memory_total=g.get("memory_total"),
            )
            for g in smi.get("gpus") or ()
        ),
        driver_cuda_version=smi.get("driver_cuda_version"),
        error=smi.get("error"),
    )
    cuda = document.get("cuda_toolkit") or {}
    toolkit = CudaToolkitFacts(
        cuda_home=cuda.get("cuda_home"),
        nvcc=cuda.get("nvcc"),
        nvcc_version=cuda.get("nvcc_version"),
        nvcc_output=cuda.get("nvcc_output"),
    )
    return EnvironmentFacts(
        schema=int(document["schema"]),
        python=python,
        platform=platform,
        distributions=dists,
        modules=modules,
        nvidia_smi=nvidia_smi,
        cuda_toolkit=toolkit,
        env=dict(document.get("env") or {}),
        errors=dict(document.get("errors") or {}),
    )


def _module(m: Mapping[str, Any]) -> ModuleFacts:
    torch = None
    t = m.get("torch")
    if t:
        torch = TorchFacts(
            cuda=t.get("cuda"),
            hip=t.get("hip"),
            git_version=t.get("git_version"),
            arch_list=tuple(t.get("arch_list") or ()),
            cuda_available=bool(t.get("cuda_available")),
            device_count=int(t.get("device_count") or 0),
            devices=tuple(
                DeviceFacts(
                    index=int(d["index"]),
                    name=d["name"],
                    capability=d["capability"],
                    memory_bytes=int(d["memory_bytes"]),
                )
                for d in t.get("devices") or ()
            ),
            error=t.get("cuda_error") or t.get("arch_list_error") or t.get("error"),
        )
    probed = m.get("probed", "import")  # documents before files-only probing: imported
    if probed not in MODULE_PROBES:
        raise ValueError(f"module {m.get('module')!r}: probed {probed!r}, expected files or import")
    return ModuleFacts(
        module=m["module"],
        distribution=m.get("distribution"),
        distribution_version=m.get("distribution_version"),
        version=m.get("version"),
        file=m.get("file"),
        error=m.get("error"),
        torch=torch,
        probed=probed,
    )
