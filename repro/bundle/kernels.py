"""env/kernels.toml: the GPU code of every installed distribution, and the kernel sources.

`[[distributions]]` lists, per distribution that carries GPU code, each shared object
(its path relative to site-packages, as RECORD names it) with the architectures its
`.nv_fatbin` holds (`sm_90`, `sm_90a`, `compute_120`): what `repro inspect --gpu` and
the preflight judge, with no wheel extracted. `[[sources]]` lists the distributions whose
source tree the bundle carries under `kernels/<dist>/`, with the recipe that rebuilds
them on a box whose GPU they have no code for.

The one owner of that member: pack dumps it; unpack, inspect and the SBOM load it here.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import tomli_w

from repro import _toml
from repro.errors import BundleFormatError

# What the rebuild runs, in the target venv, offline; `{python}` is the target venv's
# interpreter, `{source}` the carried tree copied out, `{out}` the directory the wheel goes.
DEFAULT_COMMAND = (
    "{python}",
    "-m",
    "pip",
    "wheel",
    "--no-deps",
    "--no-build-isolation",
    "--no-index",
    "--wheel-dir",
    "{out}",
    "{source}",
)
PLACEHOLDERS = ("{python}", "{source}", "{out}")


def fill_placeholders(argv: Iterable[str], values: Mapping[str, str]) -> list[str]:
    """A recipe's command or check with each placeholder (`{python}`, ...) of `values`
    replaced in every word."""
    filled = []
    for word in argv:
        for placeholder, value in values.items():
            word = word.replace(placeholder, value)
        filled.append(word)
    return filled


# The variables the common build systems read their CUDA architectures from; a recipe
# may name more (`[kernels.<dist>] arch_env`).
ARCH_ENV = (
    "TORCH_CUDA_ARCH_LIST",
    "CUDAARCHS",
    "CMAKE_CUDA_ARCHITECTURES",
    "FLASHINFER_CUDA_ARCH_LIST",
)

SOURCE_KINDS = ("git", "tree")

_NAME = re.compile(r"[a-z0-9]([a-z0-9._-]*[a-z0-9])?")
_ARCH = re.compile(r"(sm|compute)_\d{2,3}[af]?")
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


@dataclass(frozen=True)
class KernelObject:
    """One shared object with GPU code."""

    path: str  # relative to site-packages, `/`-separated
    archs: tuple[str, ...]  # sorted


@dataclass(frozen=True)
class KernelDistribution:
    """An installed distribution and every shared object of it that carries GPU code."""

    name: str  # canonical
    version: str
    objects: tuple[KernelObject, ...]

    @property
    def archs(self) -> tuple[str, ...]:
        return tuple(sorted({a for o in self.objects for a in o.archs}))


@dataclass(frozen=True)
class KernelSource:
    """A distribution's source tree carried under kernels/<name>/, and how to build it."""

    name: str  # canonical; the tree lies at layout.kernel_source(name)
    version: str
    kind: str  # "git" (the checkout's tracked files) or "tree" (the tree less build outputs)
    origin: str  # where the tree was on the packing box, for the report only
    files: int
    size: int
    editable: bool = False
    arch_env: tuple[str, ...] = ARCH_ENV
    env: tuple[tuple[str, str], ...] = ()  # extra environment of the build, sorted
    command: tuple[str, ...] = DEFAULT_COMMAND
    check: tuple[str, ...] = ()  # the kernels rung's command (argv; `{python}` allowed)


@dataclass(frozen=True)
class KernelAudit:
    distributions: tuple[KernelDistribution, ...] = ()
    sources: tuple[KernelSource, ...] = field(default=())

    def distribution(self, name: str) -> KernelDistribution | None:
        return next((d for d in self.distributions if d.name == name), None)

    def source(self, name: str) -> KernelSource | None:
        return next((s for s in self.sources if s.name == name), None)


def _strings(value: Any) -> tuple[str, ...] | None:
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return tuple(value)
    return None


def _load_distribution(table: Any, where: str) -> KernelDistribution:
    if not isinstance(table, Mapping):
        raise BundleFormatError(f"{where}: not a table")
    name, version, objects = table.get("name"), table.get("version"), table.get("objects", [])
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise BundleFormatError(f"{where}.name: {name!r} is not a canonical distribution name")
    if not isinstance(version, str) or not version:
        raise BundleFormatError(f"{where}.version: a string is needed")
    if not isinstance(objects, list):
        raise BundleFormatError(f"{where}.objects: an array of tables is needed")
    loaded = []
    for index, entry in enumerate(objects):
        at = f"{where}.objects[{index}]"
        path = entry.get("path") if isinstance(entry, Mapping) else None
        archs = _strings(entry.get("archs")) if isinstance(entry, Mapping) else None
        if not isinstance(path, str) or not _relative(path):
            raise BundleFormatError(f"{at}.path: {path!r} is not a relative path")
        if archs is None or not all(_ARCH.fullmatch(a) for a in archs):
            raise BundleFormatError(f"{at}.archs: a list of sm_XY / compute_XY is needed")
        loaded.append(KernelObject(path, tuple(sorted(set(archs)))))
    return KernelDistribution(name, version, tuple(loaded))


def _relative(path: str) -> bool:
    parts = path.split("/")
    return bool(path) and not path.startswith("/") and all(p not in ("", ".", "..") for p in parts)


def _load_source(table: Any, where: str) -> KernelSource:
    if not isinstance(table, Mapping):
        raise BundleFormatError(f"{where}: not a table")
    name = table.get("name")
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise BundleFormatError(f"{where}.name: {name!r} is not a canonical distribution name")
    for key in ("version", "kind", "origin"):
        if not isinstance(table.get(key), str):
            raise BundleFormatError(f"{where}.{key}: a string is needed")
    if table["kind"] not in SOURCE_KINDS:
        raise BundleFormatError(f"{where}.kind: {table['kind']!r} is not one of {SOURCE_KINDS}")
    files, size = table.get("files"), table.get("size")
    if not isinstance(files, int) or not isinstance(size, int) or files < 0 or size < 0:
        raise BundleFormatError(f"{where}: files and size must be counts")
    editable = table.get("editable", False)
    if not isinstance(editable, bool):
        raise BundleFormatError(f"{where}.editable: true or false")
    arch_env = _strings(table.get("arch_env", list(ARCH_ENV)))
    if arch_env is None or not all(_ENV_NAME.fullmatch(v) for v in arch_env):
        raise BundleFormatError(f"{where}.arch_env: a list of environment variable names")
    env = table.get("env", {})
    if not isinstance(env, Mapping) or not all(
        isinstance(k, str) and _ENV_NAME.fullmatch(k) and isinstance(v, str) for k, v in env.items()
    ):
        raise BundleFormatError(f"{where}.env: a table of variable names to strings")
    command = _strings(table.get("command", list(DEFAULT_COMMAND)))
    if not command:
        raise BundleFormatError(f"{where}.command: a non-empty list of strings")
    check = _strings(table.get("check", []))
    if check is None:
        raise BundleFormatError(f"{where}.check: a list of strings")
    return KernelSource(
        name,
        str(table["version"]),
        str(table["kind"]),
        str(table["origin"]),
        files,
        size,
        editable,
        arch_env,
        tuple(sorted((str(k), str(v)) for k, v in env.items())),
        command,
        check,
    )


def load_kernels(data: bytes, *, source: str) -> KernelAudit:
    """Parse env/kernels.toml; `BundleFormatError` naming `source` and the key otherwise."""
    try:
        document = _toml.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, _toml.TOMLDecodeError) as exc:
        raise BundleFormatError(f"{source}: not valid TOML: {exc}") from exc
    distributions, sources = document.get("distributions", []), document.get("sources", [])
    if not isinstance(distributions, list) or not isinstance(sources, list):
        raise BundleFormatError(f"{source}: distributions and sources are arrays of tables")
    audit = KernelAudit(
        tuple(
            _load_distribution(t, f"{source}: distributions[{i}]")
            for i, t in enumerate(distributions)
        ),
        tuple(_load_source(t, f"{source}: sources[{i}]") for i, t in enumerate(sources)),
    )
    for kind, names in (
        ("distributions", [d.name for d in audit.distributions]),
        ("sources", [s.name for s in audit.sources]),
    ):
        if len(set(names)) != len(names):
            raise BundleFormatError(f"{source}: a distribution is listed twice in {kind}")
    return audit


def dump_kernels(audit: KernelAudit) -> bytes:
    """env/kernels.toml for `audit`, sorted; loads back as the same audit."""
    distributions = [
        {
            "name": d.name,
            "version": d.version,
            "objects": [
                {"path": o.path, "archs": list(o.archs)}
                for o in sorted(d.objects, key=lambda o: o.path)
            ],
        }
        for d in sorted(audit.distributions, key=lambda d: d.name)
    ]
    sources = [
        {
            "name": s.name,
            "version": s.version,
            "kind": s.kind,
            "origin": s.origin,
            "files": s.files,
            "size": s.size,
            "editable": s.editable,
            "arch_env": list(s.arch_env),
            "env": dict(s.env),
            "command": list(s.command),
            "check": list(s.check),
        }
        for s in sorted(audit.sources, key=lambda s: s.name)
    ]
    return tomli_w.dumps({"distributions": distributions, "sources": sources}).encode()


def kernel_distributions(
    found: Iterable[tuple[str, str, str, Iterable[str]]],
) -> tuple[KernelDistribution, ...]:
    """(name, version, path, archs) rows into distributions, objects without code left out."""
    by_name: dict[tuple[str, str], list[KernelObject]] = {}
    for name, version, path, archs in found:
        listed = tuple(sorted(set(archs)))
        if listed:
            by_name.setdefault((name, version), []).append(KernelObject(path, listed))
    return tuple(
        KernelDistribution(name, version, tuple(sorted(objects, key=lambda o: o.path)))
        for (name, version), objects in sorted(by_name.items())
    )
