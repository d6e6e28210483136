"""bundle.toml: what a bundle is, where it came from, how to launch and test it.

The schema is normative in docs/bundle-format.md. Loading reports every problem of a
file at once (through `repro.bundle.tomltable`); unknown keys are errors so that a typo
never passes silently.

A little over 400 lines for a reason: the section's dataclasses, its loader and its
writer stay in one module, so that a key added to one is seen in the other two.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any, Literal

import tomli_w

from repro import _toml
from repro.bundle.delta import BASE_TABLE, DELTA_FORMAT_VERSION, BaseRef, dump_base, load_base
from repro.bundle.environment import EnvironmentFacts
from repro.bundle.layout import TRAILING_LOCKS_FROM_FORMAT
from repro.bundle.tomltable import TomlTable, choice, is_int
from repro.bundle.vault import is_wheel_filename
from repro.bundle.weights import WeightPin, dump_pins, load_pins
from repro.errors import BundleFormatError

# The longest a ladder may wait for a server (a day): `inf` or 1e300 would wait for ever.
MAX_TIMEOUT_S = 86_400.0

# 2: [workspace] (where the venv goes under the target), models' large_files.
# 3: models' `present` (a model a unit names, absent when packed) and `weights` (each
# weight file pinned: repro.bundle.weights), which a format 2 reader refuses as unknown.
# Formats 1 and 2 still load: a format 1 bundle's venv is the target itself.
# 4: a delta bundle ([base], repro.bundle.delta) of format 3; only deltas were 4.
# 5: env/pylock.toml and env/vault.toml (the vault wheels' sha256) trail every other
# member (repro.bundle.layout.trailing_members), so a packer hashes each wheel as it
# writes it; [vault] names the wheels ahead of them for a reader of a stream. A full
# bundle and a delta alike: from 5 on, [base] alone makes a delta.
FORMAT_VERSION = 5
READ_FORMAT_VERSION = FORMAT_VERSION

Engine = Literal["sglang", "vllm", "openai"]
Role = Literal["drafter", "target"]
ENGINES: tuple[Engine, ...] = ("sglang", "vllm", "openai")
ROLES: tuple[Role, ...] = ("drafter", "target")

VAULT_TABLE = "vault"

_SAFE_NAME = re.compile(r"[A-Za-z0-9._-]+")
_SAFE_VERSION = re.compile(r"[A-Za-z0-9._+!-]+")
_RFC3339_UTC = re.compile(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?Z")
_SHA256 = re.compile(r"[0-9a-f]{64}")
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_UNIT_FILE = re.compile(r"[A-Za-z0-9:_@\\-][A-Za-z0-9:_.@\\-]*")  # systemd's unit names


@dataclass(frozen=True)
class Gpu:
    name: str
    compute_capability: str  # "9.0"
    memory_mib: int


@dataclass(frozen=True)
class SourceInfo:
    """Facts about the machine and environment the bundle was packed from."""

    python: str
    implementation: str
    platform: str
    glibc: str
    hostname: str | None = None
    torch: str | None = None
    torch_cuda: str | None = None
    torch_arch_list: tuple[str, ...] = ()
    gpus: tuple[Gpu, ...] = ()
    driver: str | None = None
    cuda_driver_version: str | None = None


@dataclass(frozen=True)
class LaunchCommand:
    """One server to start. Exactly one of `argv` and `shell` is set."""

    name: str
    port: int
    engine: Engine
    argv: tuple[str, ...] | None = None
    shell: str | None = None
    readiness: str | None = None  # HTTP path; None: the engine's default
    env: Mapping[str, str] = field(default_factory=dict)  # over the ladder's environment
    cwd: str | None = None  # working directory; None: the ladder's
    unit: str | None = None  # the unit file under services/ it was read from


@dataclass(frozen=True)
class LaunchInfo:
    commands: tuple[LaunchCommand, ...] = ()


@dataclass(frozen=True)
class LadderInfo:
    rungs: tuple[str, ...] = ()
    expected_text: str | None = None
    timeout_s: float = 600.0


@dataclass(frozen=True)
class ModelRef:
    """A model the environment serves; weights are referenced, small files carried."""

    name: str
    role: Role
    total_bytes: int
    file_count: int
    repo_id: str | None = None
    revision: str | None = None
    local_path: str | None = None
    small_files: Mapping[str, str] = field(default_factory=dict)  # path -> sha256
    large_files: Mapping[str, int] = field(default_factory=dict)  # path -> size (weights)
    # False: the place the unit named held nothing when packed (no files recorded)
    present: bool = True
    # each large file pinned (repro.bundle.weights); an older bundle has large_files only
    weights: tuple[WeightPin, ...] = ()
    weights_hashed: bool = False  # False: packed with --no-hash-weights (or no weights)

    @property
    def in_workspace(self) -> bool:
        """The model lies inside the packed workspace: local_path is relative to it."""
        return self.local_path is not None and not self.local_path.startswith("/")


@dataclass(frozen=True)
class WorkspaceInfo:
    """How the packed workspace is laid out again under the target.

    `venv` is the venv's path relative to the workspace ("venv", ".venv", ...); "."
    means the target is the venv itself (every format 1 bundle)."""

    venv: str = "."


@dataclass(frozen=True)
class VaultNames:
    """`[vault]` (format 5): the file names of the wheels in env/wheels/, in the first
    member, so that a reader of a stream can choose its wheels before they arrive;
    env/vault.toml, which lists their sha256, comes after them. `index_serves`: those
    carried only for an offline install (`--wheels all`; env/vault.toml's reason)."""

    wheels: tuple[str, ...] = ()
    index_serves: tuple[str, ...] = ()


@dataclass(frozen=True)
class BundleInfo:
    name: str
    version: str
    created: str  # RFC 3339, UTC ("2026-01-31T12:00:00Z")
    tool_version: str
    source: SourceInfo
    launch: LaunchInfo = LaunchInfo()
    ladder: LadderInfo = LadderInfo()
    models: tuple[ModelRef, ...] = ()
    workspace: WorkspaceInfo = WorkspaceInfo()
    format_version: int = FORMAT_VERSION
    base: BaseRef | None = None  # a delta bundle's base (format 4, or 5 and later)
    vault: VaultNames | None = None  # format 5: None when the vault is empty

    @property
    def top_dir(self) -> str:
        """The archive's single top-level directory."""
        return f"{self.name}-{self.version}"


# --- loading -------------------------------------------------------------------------


def source_info(facts: EnvironmentFacts) -> SourceInfo:
    """bundle.toml's [source]: the facts of the environment a bundle is packed from
    (pack) or a view of a live one is made from (`repro diff`)."""
    torch = next((m for m in facts.modules if m.module == "torch"), None)
    torch_facts = torch.torch if torch else None
    gpus = tuple(
        Gpu(
            name=gpu.name,
            compute_capability=gpu.compute_cap or "",
            memory_mib=_mebibytes(gpu.memory_total),
        )
        for gpu in facts.nvidia_smi.gpus
    )
    driver = next((g.driver_version for g in facts.nvidia_smi.gpus if g.driver_version), None)
    libc = facts.platform.libc_version
    return SourceInfo(
        python=facts.python.version,
        implementation=facts.python.implementation,
        platform=facts.platform.platform,
        glibc=libc or "",
        torch=(torch.distribution_version or torch.version) if torch else None,
        torch_cuda=torch_facts.cuda if torch_facts else None,
        torch_arch_list=tuple(torch_facts.arch_list) if torch_facts else (),
        gpus=gpus,
        driver=driver,
        cuda_driver_version=facts.nvidia_smi.driver_cuda_version,
    )


def _mebibytes(memory_total: str | None) -> int:
    """nvidia-smi's memory.total as MiB: "97871 MiB" (csv with units, as the probe asks
    it) or a bare "97871"; 0 when it says nothing usable ("[N/A]")."""
    number, _, unit = (memory_total or "").strip().partition(" ")
    return int(number) if number.isdigit() and unit in ("", "MiB") else 0


def _load_source(table: TomlTable) -> SourceInfo:
    gpus = []
    for gpu in table.tables("gpus"):
        gpus.append(
            Gpu(
                name=gpu.string("name"),
                compute_capability=gpu.string("compute_capability"),
                memory_mib=gpu.integer("memory_mib"),
            )
        )
        gpu.finish()
    info = SourceInfo(
        python=table.string("python"),
        implementation=table.string("implementation"),
        platform=table.string("platform"),
        glibc=table.string("glibc"),
        hostname=table.opt_string("hostname"),
        torch=table.opt_string("torch"),
        torch_cuda=table.opt_string("torch_cuda"),
        torch_arch_list=table.strings("torch_arch_list") or (),
        gpus=tuple(gpus),
        driver=table.opt_string("driver"),
        cuda_driver_version=table.opt_string("cuda_driver_version"),
    )
    table.finish()
    return info


def _load_command(table: TomlTable) -> LaunchCommand:
    argv = table.strings("argv")
    shell = table.opt_string("shell")
    if (argv is None) == (shell is None):
        table.problem("argv", "or 'shell': exactly one must be given")
    elif argv is not None and not argv:
        table.problem("argv", "must not be empty")
    env = table.mapping("env")
    for name in env:
        if not _ENV_NAME.fullmatch(name):
            table.problem(f"env.{name}", "is not an environment variable name")
    unit = table.opt_string("unit")
    if unit is not None and not _UNIT_FILE.fullmatch(unit):
        table.problem("unit", f"must be a unit file name under services/, not {unit!r}")
    port = table.integer("port")
    if not 0 < port < 65536:
        table.problem("port", f"must be a TCP port (1-65535), not {port}")
    command = LaunchCommand(
        name=table.string("name"),
        port=port,
        engine=choice(table, "engine", ENGINES),
        argv=argv,
        shell=shell,
        readiness=table.opt_string("readiness"),
        env=dict(sorted(env.items())),
        cwd=table.opt_string("cwd"),
        unit=unit,
    )
    table.finish()
    return command


def _load_model(table: TomlTable) -> ModelRef:
    small_files = table.mapping("small_files")
    for path, digest in small_files.items():
        if not _SHA256.fullmatch(digest):
            table.problem(f"small_files.{path}", "must be a lowercase hex sha256")
    model = ModelRef(
        name=table.string("name"),
        role=choice(table, "role", ROLES),
        total_bytes=table.integer("total_bytes"),
        file_count=table.integer("file_count"),
        repo_id=table.opt_string("repo_id"),
        revision=table.opt_string("revision"),
        local_path=table.opt_string("local_path"),
        small_files=dict(sorted(small_files.items())),
        large_files=dict(sorted(table.sizes("large_files").items())),
        present=table.boolean("present", True),
        weights=load_pins(table),
        weights_hashed=table.boolean("weights_hashed"),
    )
    named = [*model.small_files, *model.large_files]  # the pins' paths: load_pin checks
    if model.weights:
        pinned = {pin.path: pin.size for pin in model.weights}
        if model.large_files and dict(model.large_files) != pinned:
            table.problem("large_files", "must name the files and sizes of weights")
        model = replace(model, large_files=dict(sorted(pinned.items())))
    if model.local_path is not None and model.in_workspace:
        _check_relative(table, "local_path", model.local_path)
    for name in named:
        kind = "small_files" if name in model.small_files else "large_files"
        if name.startswith("/") or name == ".":
            table.problem(f"{kind}.{name}", "must be a relative path inside the model directory")
        else:
            _check_relative(table, f"{kind}.{name}", name)
    table.finish()
    return model


def _check_relative(table: TomlTable, key: str, path: str) -> None:
    parts = path.split("/")
    if path != "." and (not path or ".." in parts or "" in parts or "\\" in path):
        table.problem(key, f"must be a relative path inside the workspace, not {path!r}")


def _load_vault_names(table: TomlTable) -> VaultNames:
    wheels = table.strings("wheels", required=True) or ()
    index_serves = table.strings("index_serves") or ()
    for key, names in (("wheels", wheels), ("index_serves", index_serves)):
        bad = [name for name in names if not is_wheel_filename(name)]
        if bad:
            table.problem(key, f"names no wheel file inside env/wheels/: {bad[0]!r}")
        elif list(names) != sorted(set(names)):
            table.problem(key, "must be sorted, each name once")
    unknown = sorted(set(index_serves) - set(wheels))
    if unknown:
        table.problem("index_serves", f"names {unknown[0]!r}, which 'wheels' does not")
    table.finish()
    return VaultNames(wheels, index_serves)


def _load_workspace(table: TomlTable | None) -> WorkspaceInfo:
    if table is None:
        return WorkspaceInfo()
    venv = table.string("venv", ".")
    _check_relative(table, "venv", venv)
    table.finish()
    return WorkspaceInfo(venv=venv)


def load_bundle_info(data: bytes, *, source: str) -> BundleInfo:
    """Parse and validate bundle.toml; every problem is reported in one BundleFormatError."""
    try:
        document = _toml.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, _toml.TOMLDecodeError) as exc:
        raise BundleFormatError(f"{source}: not valid TOML: {exc}") from exc
    version = document.get("format_version")
    if version is None:
        raise BundleFormatError(
            f"{source}: missing key 'format_version'",
            hint="this is not a bundle.toml written by `repro pack`",
        )
    if not is_int(version) or version < 1:
        raise BundleFormatError(f"{source}: key 'format_version' must be a positive integer")
    if version > READ_FORMAT_VERSION:
        raise BundleFormatError(
            f"{source}: bundle format {version} is newer than this repro supports "
            f"({READ_FORMAT_VERSION}); upgrade repro",
            hint="pip install --upgrade repro",
        )
    problems: list[str] = []
    top = TomlTable(document, "", problems)
    top.integer("format_version")
    name = top.string("name")
    if name and not _SAFE_NAME.fullmatch(name):
        top.problem("name", "may hold only letters, digits, '.', '_' and '-'")
    version_text = top.string("version")
    if version_text and not _SAFE_VERSION.fullmatch(version_text):
        top.problem("version", "may hold only letters, digits and '.', '_', '+', '!', '-'")
    created = top.string("created")
    if created and not _valid_created(created):
        top.problem(
            "created", f"must be an RFC 3339 UTC time like 2026-01-31T12:00:00Z, not {created!r}"
        )
    source_table = top.table("source", required=True)
    origin = _load_source(source_table) if source_table else SourceInfo("", "", "", "")
    launch_table = top.table("launch", required=False)
    launch = LaunchInfo()
    if launch_table is not None:
        launch = LaunchInfo(tuple(_load_command(t) for t in launch_table.tables("commands")))
        launch_table.finish()
    ladder_table = top.table("ladder", required=False)
    ladder = LadderInfo()
    if ladder_table is not None:
        ladder = LadderInfo(
            rungs=ladder_table.strings("rungs") or (),
            expected_text=ladder_table.opt_string("expected_text"),
            timeout_s=ladder_table.number("timeout_s", LadderInfo.timeout_s),
        )
        if not math.isfinite(ladder.timeout_s) or not 0 < ladder.timeout_s <= MAX_TIMEOUT_S:
            ladder_table.problem(
                "timeout_s",
                f"must be a finite number of seconds above 0 and at most {MAX_TIMEOUT_S:g}, "
                f"not {ladder.timeout_s!r}",
            )
        ladder_table.finish()
    models = tuple(_load_model(t) for t in top.tables("models"))
    workspace = _load_workspace(top.table("workspace", required=False))
    if version >= 2 and "workspace" not in document:
        top.problem("workspace", "is required from format 2 on")
    base_table = top.table(BASE_TABLE, required=False)
    base = load_base(base_table) if base_table is not None else None
    if base is not None and version < DELTA_FORMAT_VERSION:
        top.problem(BASE_TABLE, f"(a delta's base) needs format_version {DELTA_FORMAT_VERSION}")
    if base is None and version == DELTA_FORMAT_VERSION:
        top.problem(BASE_TABLE, f"is required in format {DELTA_FORMAT_VERSION} (a delta bundle)")
    vault_table = top.table(VAULT_TABLE, required=False)
    vault = _load_vault_names(vault_table) if vault_table is not None else None
    if vault is not None and version < TRAILING_LOCKS_FROM_FORMAT:
        top.problem(VAULT_TABLE, f"needs format_version {TRAILING_LOCKS_FROM_FORMAT}")
    tool_version = top.string("tool_version")
    top.finish()
    if problems:
        raise BundleFormatError(
            f"{source}: invalid bundle.toml:\n" + "\n".join(f"  - {p}" for p in problems)
        )
    return BundleInfo(
        name=name,
        version=version_text,
        created=created,
        tool_version=tool_version,
        source=origin,
        launch=launch,
        ladder=ladder,
        models=models,
        workspace=workspace,
        format_version=version,
        base=base,
        vault=vault,
    )


def _valid_created(text: str) -> bool:
    if not _RFC3339_UTC.fullmatch(text):
        return False
    try:
        datetime.fromisoformat(text[:19])
    except ValueError:
        return False
    return True


# --- writing -------------------------------------------------------------------------


def _without_none(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    return {key: value for key, value in pairs if value is not None}


def dump_bundle_info(info: BundleInfo) -> bytes:
    """bundle.toml bytes; the same info always gives the same bytes."""
    source = info.source
    document: dict[str, Any] = {
        "format_version": info.format_version,
        "name": info.name,
        "version": info.version,
        "created": info.created,
        "tool_version": info.tool_version,
        "source": _without_none(
            [
                ("python", source.python),
                ("implementation", source.implementation),
                ("platform", source.platform),
                ("glibc", source.glibc),
                ("hostname", source.hostname),
                ("torch", source.torch),
                ("torch_cuda", source.torch_cuda),
                ("torch_arch_list", list(source.torch_arch_list)),
                ("driver", source.driver),
                ("cuda_driver_version", source.cuda_driver_version),
                (
                    "gpus",
                    [
                        {
                            "name": gpu.name,
                            "compute_capability": gpu.compute_capability,
                            "memory_mib": gpu.memory_mib,
                        }
                        for gpu in source.gpus
                    ],
                ),
            ]
        ),
        "launch": {
            "commands": [
                _without_none(
                    [
                        ("name", command.name),
                        ("engine", command.engine),
                        ("port", command.port),
                        ("argv", None if command.argv is None else list(command.argv)),
                        ("shell", command.shell),
                        ("readiness", command.readiness),
                        ("env", dict(sorted(command.env.items())) or None),
                        ("cwd", command.cwd),
                        ("unit", command.unit),
                    ]
                )
                for command in info.launch.commands
            ]
        },
        "ladder": _without_none(
            [
                ("rungs", list(info.ladder.rungs)),
                ("expected_text", info.ladder.expected_text),
                ("timeout_s", info.ladder.timeout_s),
            ]
        ),
        "models": [
            _without_none(
                [
                    ("name", model.name),
                    ("role", model.role),
                    ("repo_id", model.repo_id),
                    ("revision", model.revision),
                    ("local_path", model.local_path),
                    ("total_bytes", model.total_bytes),
                    ("file_count", model.file_count),
                    ("small_files", dict(sorted(model.small_files.items()))),
                    (
                        "large_files",
                        dict(sorted(model.large_files.items()))
                        if model.large_files and not model.weights
                        else None,
                    ),
                    ("present", None if model.present else False),
                    ("weights_hashed", model.weights_hashed if model.weights else None),
                    ("weights", dump_pins(model.weights) if model.weights else None),
                ]
            )
            for model in info.models
        ],
    }
    if info.format_version >= 2:
        document["workspace"] = {"venv": info.workspace.venv}
    if info.vault is not None:
        document[VAULT_TABLE] = _without_none(
            [
                ("wheels", list(info.vault.wheels)),
                ("index_serves", list(info.vault.index_serves) or None),
            ]
        )
    if info.base is not None:
        document[BASE_TABLE] = dump_base(info.base)
    data = tomli_w.dumps(document).encode("utf-8")
    load_bundle_info(data, source=f"bundle.toml of {info.top_dir}")  # never write what won't load
    return data
