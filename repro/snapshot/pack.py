"""`repro pack`: snapshot a workspace and its environment into one bundle archive.

The stages each return plain data (facts, scan report, vault, units, models,
files); `pack` gathers them into a list of members and streams the archive in
one pass, hashing every member as it is written, with the manifest last.
Nothing in SOURCE is written; a failed pack leaves nothing at the output path.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shlex
import sys
import tempfile
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import tomli_w
from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

from repro import __version__
from repro.archive.common import Compression
from repro.archive.memberfill import not_as_recorded
from repro.archive.tarformat import uncarried_name
from repro.archive.writer import source_date_epoch
from repro.bundle.info import (
    BundleInfo,
    Engine,
    Gpu,
    LadderInfo,
    LaunchCommand,
    LaunchInfo,
    ModelRef,
    SourceInfo,
    WorkspaceInfo,
    dump_bundle_info,
)
from repro.bundle.manifest import ProgressSink, printable_path
from repro.bundle.patchset import dump_patchset
from repro.bundle.signing import find_ssh_keygen
from repro.config import Config
from repro.diffapply import count_diff_lines
from repro.errors import NotAsRecorded, UsageError
from repro.hashing import hash_files
from repro.redaction import is_secret_name, scrub_text
from repro.servecmd import DEFAULT_PORTS
from repro.snapshot import services as unit_capture
from repro.snapshot.bundlewriter import (
    Generated,
    Members,
    Reserved,
    Streamed,
    can_defer_digests,
    write_bundle,
)
from repro.snapshot.environment import EnvironmentFacts, find_interpreter
from repro.snapshot.files import MAX_SCANNED_BYTES, token_in_code
from repro.snapshot.indexcheck import IndexReport, check_index, target_tags
from repro.snapshot.indexes import IndexConfig, read_index_config
from repro.snapshot.installed import InstalledDist, list_installed, scheme_paths
from repro.snapshot.leftout import (
    LeftOut,
    LeftOutKind,
    split_by_size,
    split_secrets,
    uncovered_entries,
    weights_left_out,
)
from repro.snapshot.lock import (
    DistFile,
    Pin,
    freeze_from,
    pins_from_facts,
    render_pylock,
    render_requirements_lock,
    requires_python_of,
    run_pip_freeze,
)
from repro.snapshot.models import ModelReference, describe_model
from repro.snapshot.modulefiles import probe_target
from repro.snapshot.patchcollect import CollectedPatch, collect_patches
from repro.snapshot.pristine import PristineCache, default_pip_cache
from repro.snapshot.reproduce import (
    PatchSummary,
    ReproduceFacts,
    render_reproduce,
    render_setup_env,
)
from repro.snapshot.requirements_check import UnmetRequirement, check_environment, describe_unmet
from repro.snapshot.scan import ScanReport, scan_environment
from repro.snapshot.scancache import ScanCache
from repro.snapshot.vault import (
    PlannedWheel,
    VaultReport,
    VaultSelection,
    VaultWheel,
    hash_vault,
    plan_vault,
    select_vault,
)
from repro.snapshot.wheelbuild import CarryPatched
from repro.snapshot.workspace_patches import load_workspace_patches
from repro.workspace import workspace_config

if TYPE_CHECKING:
    from packaging.tags import Tag

    from repro.snapshot.targetwheels import BootstrapWheels
    from repro.snapshot.toolwheels import ToolWheelInputs

WheelsMode = Literal["auto", "all", "none"]
Progress = Callable[[str], None]
_SUFFIX: dict[Compression, str] = {"none": ".tar", "gz": ".tar.gz", "zst": ".tar.zst"}
_NAME_CHARS = re.compile(r"[^A-Za-z0-9._-]+")
_PORT = re.compile(r"--port[ =](\d+)")


@dataclass(frozen=True)
class PackOptions:
    source: Path
    python: Path | None = None
    output: Path | None = None  # a file, a directory, or None for the current directory
    to_stdout: bool = False
    name: str | None = None
    version: str | None = None
    compression: Compression | None = None
    wheels: WheelsMode = "auto"
    check_index: bool = False
    pristine: Path | None = None
    units: tuple[str, ...] = ()
    jobs: int | None = None
    download: bool = True
    tool_wheels: bool = True
    cache_dir: Path | None = None
    rehash: bool = False  # read every file, not trusting the scan cache
    sign: Path | None = None  # private key: sign MANIFEST.sha256 with ssh-keygen -Y sign
    # import torch & co. in the target (runtime facts, devices); None: repro.toml's
    # [env] import_modules, default False: read the key modules from their files
    import_modules: bool | None = None
    sbom: bool = False  # a CycloneDX SBOM of the bundle as env/sbom.cdx.json


@dataclass(frozen=True)
class PackResult:
    path: Path | None
    name: str
    version: str
    distributions: int
    vault_wheels: tuple[str, ...]
    patched_files: tuple[str, ...]
    units: tuple[str, ...]
    models: tuple[str, ...]
    files: tuple[str, ...]
    members: int
    bundle_bytes: int
    warnings: tuple[str, ...]
    left_out: tuple[str, ...] = ()
    unmet_requirements: tuple[UnmetRequirement, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {
            "path": str(self.path) if self.path else None,
            "name": self.name,
            "version": self.version,
            "distributions": self.distributions,
            "vault_wheels": list(self.vault_wheels),
            "patched_files": list(self.patched_files),
            "units": list(self.units),
            "models": list(self.models),
            "files": list(self.files),
            "members": self.members,
            "bundle_bytes": self.bundle_bytes,
            "warnings": list(self.warnings),
            "left_out": list(self.left_out),
            "unmet_requirements": [u.to_json() for u in self.unmet_requirements],
        }


def default_cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "repro"


def _check_deferred_not_written(
    scan: ScanReport, entries: Sequence[PlannedWheel], *, jobs: int | None
) -> None:
    """The files the scan left to the writing but no rebuilt wheel writes (a wheel taken
    from elsewhere): hashed here. Raises NotAsRecorded for one that differs."""
    if not scan.deferred:
        return
    written = {
        os.path.normpath(member.source)
        for entry in entries
        if entry.plan is not None
        for member in entry.plan.zip.members
        if member.sha256_pending and member.source is not None
    }
    # a result the planning took is a member that verifies the file: written from it and
    # checked in that read, or a script read whole and checked when it was planned
    rest = sorted(
        path
        for path in scan.deferred
        if path in scan.digests and os.path.normpath(path) not in written
    )
    for path, result in zip(rest, hash_files([Path(p) for p in rest], jobs=jobs), strict=True):
        if result.digest != scan.digests[path].digest:
            raise not_as_recorded(path)


# --- names, versions and the output path ---------------------------------------------


def bundle_name(options: PackOptions, config: Config) -> str:
    raw = options.name or config.bundle.name or options.source.resolve().name
    name = _NAME_CHARS.sub("-", raw).strip("-.") or "bundle"
    return name


def _existing_versions(directory: Path, name: str) -> list[Version]:
    found: list[Version] = []
    pattern = re.compile(rf"^{re.escape(name)}-(?P<version>.+?)\.tar(\.gz|\.zst)?$")
    if not directory.is_dir():
        return found
    for path in directory.iterdir():
        match = pattern.match(path.name)
        if match:
            with contextlib.suppress(InvalidVersion):
                found.append(Version(match.group("version")))
    return found


def next_version(directory: Path, name: str) -> str:
    """One more than the newest bundle of `name` in `directory`: 1, 2, ... or x.y -> x.(y+1)."""
    versions = _existing_versions(directory, name)
    if not versions:
        return "1"
    newest = max(versions)
    release = list(newest.release)
    release[-1] += 1
    return ".".join(str(part) for part in release)


ARCHIVE_SUFFIXES = (".tar", ".tar.gz", ".tgz", ".tar.zst", ".tzst")


# Suffixes of archives and compressed files repro does not write, beyond those the
# platform's mimetypes table knows: -o with one of them is a mistake, never the name of
# a directory to create.
FOREIGN_ARCHIVE_SUFFIXES = (
    ".txz",
    ".tbz2",
    ".tbz",
    ".tlz",
    ".lz4",
    ".lzma",
    ".lz",
    ".lzo",
    ".zst",
    ".br",
    ".z",
    ".cpio",
    ".whl",
    ".squashfs",
)


def _output_is_file(options: PackOptions) -> bool:
    """-o names a bundle file when it ends like an archive repro writes (in any case);
    an existing directory, or a name with no file type, is a directory to write into.

    A name that ends like any other archive or file type (`x.tar.xz`, `x.zip`,
    `x.tar.br`, `x.cpio`, `x.tar.foo`) is refused (UsageError): creating a directory of
    that name is never what was meant."""
    output = options.output
    if output is None or output.is_dir():
        return False
    name = output.name.lower()
    if name.endswith(ARCHIVE_SUFFIXES):
        return True
    if _names_another_kind_of_file(name):
        raise UsageError(
            f"{output}: repro does not write this kind of archive (-o)",
            hint=f"name the bundle with one of {', '.join(ARCHIVE_SUFFIXES)}, "
            "or give an existing directory to write it into",
        )
    return False


def _names_another_kind_of_file(name: str) -> bool:
    import mimetypes

    if name.endswith(FOREIGN_ARCHIVE_SUFFIXES) or ".tar." in name:
        return True
    kind, encoding = mimetypes.guess_type(name, strict=False)
    return kind is not None or encoding is not None


def _output_dir(options: PackOptions) -> Path:
    if options.output is None:
        return Path.cwd()
    if _output_is_file(options):
        return options.output.parent
    return options.output


def _compression(options: PackOptions) -> Compression:
    if options.compression is not None:
        return options.compression
    if options.output is not None and _output_is_file(options):
        name = options.output.name.lower()
        if name.endswith((".tar.gz", ".tgz")):
            return "gz"
        if name.endswith((".tar.zst", ".tzst")):
            return "zst"
    return "none"


def _output_path(options: PackOptions, top: str, compression: Compression) -> Path:
    if options.output is not None and _output_is_file(options):
        return options.output
    return _output_dir(options) / f"{top}{_SUFFIX[compression]}"


def _refuse_output_inside(output: Path, facts: EnvironmentFacts) -> None:
    prefix = Path(facts.python.prefix).resolve()
    resolved = output.resolve()
    if resolved == prefix or resolved.is_relative_to(prefix):
        raise UsageError(
            f"output {output} is inside the environment being packed ({prefix})",
            hint="write the bundle somewhere outside the venv",
        )


# --- stages ----------------------------------------------------------------------------


def _indexes_list(indexes: IndexConfig) -> list[str]:
    urls = [indexes.index_url or "https://pypi.org/simple"]
    return urls + list(indexes.extra_index_urls)


def _vault_pristine(
    scan: ScanReport, found_pristine: dict[tuple[str, str], bytes]
) -> dict[str, CarryPatched]:
    """For vaulted distributions with patched files: the bytes a clean wheel must hold.

    Where no pristine copy exists (an air-gapped source with an empty pip cache),
    the wheel is built from the patched bytes instead (CarryPatched): the target
    then installs the patched file directly and the patch step finds it applied.
    """
    by_dist: dict[str, dict[str, bytes]] = {}
    for item in scan.patched:
        table = by_dist.setdefault(canonicalize_name(item.dist), {})
        content = found_pristine.get((item.dist, item.path))
        if content is not None:
            table[item.path] = content
    return {name: CarryPatched(table.get) for name, table in by_dist.items()}


def _tool_wheel_inputs() -> ToolWheelInputs:
    from repro.snapshot.toolwheels import tool_wheel_inputs  # importlib.metadata: ~20 ms

    return tool_wheel_inputs()


def _units(
    options: PackOptions, config: Config, facts: EnvironmentFacts
) -> list[unit_capture.CapturedUnit]:
    paths = list(config.services.units)
    if not paths:
        paths = unit_capture.discover_units(options.source / "services")
    paths += unit_capture.resolve_unit_names([*config.services.system, *options.units])
    configured = [config.models.drafter] if config.models.drafter else []
    mapping = unit_capture.PathMap.build(
        venv=Path(facts.python.prefix),
        home=options.source.resolve(),
        model_dirs=[*configured, *config.models.others.values()],
    )
    return [unit_capture.capture_unit(path, mapping) for path in paths]


def _models(
    options: PackOptions,
    config: Config,
    units: Sequence[unit_capture.CapturedUnit] = (),
    secret_values: Sequence[str] = (),
) -> tuple[list[ModelReference], list[str]]:
    """References of repro.toml's [models], the workspace's drafter/, and each model
    directory a unit's ExecStart= names (by its directory name); with warnings."""
    refs: list[ModelReference] = []
    drafter = config.models.drafter
    if drafter is None and (options.source / "drafter").is_dir():
        drafter = options.source / "drafter"
    if drafter is not None:
        refs.append(
            describe_model(
                drafter,
                name="drafter",
                role="drafter",
                workspace=options.source,
                secret_values=secret_values,
            )
        )
    for name, path in sorted(config.models.others.items()):
        refs.append(
            describe_model(
                path,
                name=name,
                role="target",
                workspace=options.source,
                secret_values=secret_values,
            )
        )
    known = {_resolved(path) for path in [*config.models.others.values(), drafter] if path}
    names = {ref.name for ref in refs}
    warnings: list[str] = []
    for model in unit_capture.models_named_by_units(units):
        if _resolved(model.path) in known:
            continue
        if model.name in names:
            warnings.append(
                f"{model.path}: a unit names it, but another model is already called "
                f"{model.name!r}; not referenced (name it in repro.toml [models])"
            )
            continue
        refs.append(
            describe_model(
                model.path,
                name=model.name,
                role=model.role,
                workspace=options.source,
                secret_values=secret_values,
            )
        )
        known.add(_resolved(model.path))
        names.add(model.name)
    for ref in refs:
        warnings += ref.warnings()
    return refs, warnings


def _resolved(path: Path) -> Path:
    return Path(os.path.realpath(path))


def _launch(config: Config, units: Sequence[unit_capture.CapturedUnit] = ()) -> LaunchInfo:
    """repro.toml's [launch] commands; without them, one per unit that runs a server."""
    if not config.launch.commands:
        return LaunchInfo(tuple(unit.launch for unit in units if unit.launch is not None))
    commands = []
    for index, text in enumerate(config.launch.commands):
        engine: Engine = "sglang" if "sglang" in text else "vllm" if "vllm" in text else "openai"
        port_match = _PORT.search(text)
        port = int(port_match.group(1)) if port_match else DEFAULT_PORTS[engine]
        if config.ladder.port is not None:
            port = config.ladder.port
        shell = scrub_text(text)  # see _launch_secret_warnings
        commands.append(
            LaunchCommand(name=f"launch-{index + 1}", port=port, engine=engine, shell=shell)
        )
    return LaunchInfo(tuple(commands))


def _launch_secret_warnings(config: Config) -> list[str]:
    """repro.toml [launch] commands that hold a credential: it is <redacted> in the
    bundle; the command should read it from the environment instead."""
    return [
        f"repro.toml [launch] command {index + 1} holds a credential (a token or a URL "
        "with user:password); it is <redacted> in the bundle: write ${NAME} in the "
        "command and set NAME in the environment"
        for index, text in enumerate(config.launch.commands)
        if scrub_text(text) != text
    ]


def _mebibytes(memory_total: str | None) -> int:
    """nvidia-smi's memory.total as MiB: "97871 MiB" (csv with units, as the probe asks
    it) or a bare "97871"; 0 when it says nothing usable ("[N/A]")."""
    number, _, unit = (memory_total or "").strip().partition(" ")
    return int(number) if number.isdigit() and unit in ("", "MiB") else 0


def source_info(facts: EnvironmentFacts) -> SourceInfo:
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


def _model_ref(ref: ModelReference) -> ModelRef:
    return ModelRef(
        name=ref.name,
        role=ref.role,  # type: ignore[arg-type]
        total_bytes=ref.total_bytes,
        file_count=ref.file_count,
        repo_id=ref.repo_id,
        revision=ref.revision,
        local_path=ref.local_path,
        small_files=dict(ref.small_files),
        large_files=dict(ref.large_files),
    )


@dataclass(frozen=True)
class _VaultLocks:
    """The members that list the vault wheels' sha256: pylock.toml and vault.toml."""

    vault: VaultReport
    index: IndexReport | None  # the files the indexes serve for pins not in the vault
    pins: Sequence[Pin]
    indexes: IndexConfig
    requires_python: str

    def render(self, digests: Sequence[str]) -> dict[str, bytes]:
        """Both files with `digests` (one per vault wheel, in order) as the wheels' sha256;
        placeholders of 64 characters give files of the final length. A vaulted pin is
        listed with its vault wheels only, so that an offline install takes those."""
        wheels = [replace(w, sha256=d) for w, d in zip(self.vault.wheels, digests, strict=True)]
        files, index_of = self._files(wheels)
        pylock = render_pylock(
            self.pins,
            self.indexes,
            requires_python=self.requires_python,
            files=files,
            index_of=index_of,
        )
        return {
            "env/pylock.toml": pylock.encode(),
            "env/vault.toml": _vault_toml(replace(self.vault, wheels=wheels)),
        }

    def unlisted(self) -> list[str]:
        """Pins pylock.toml leaves out: neither the vault nor an index file is known."""
        files, _ = self._files(self.vault.wheels)
        return [pin.name for pin in self.pins if pin.name not in files]

    def _files(
        self, wheels: Sequence[VaultWheel]
    ) -> tuple[dict[str, list[DistFile]], dict[str, str]]:
        """Each listed pin's files (its vault wheels, else the index's files that have a
        sha256, which PEP 751 requires) and the index those came from."""
        files: dict[str, list[DistFile]] = {}
        for wheel in wheels:
            files.setdefault(canonicalize_name(wheel.name), []).append(
                DistFile(wheel.filename, wheel.sha256, path=f"wheels/{wheel.filename}")
            )
        index_of: dict[str, str] = {}
        report = self.index or IndexReport()
        for name, found in report.found.items():
            hashed = [DistFile(f.filename, f.sha256, url=f.url) for f in found if f.sha256]
            if name not in files and hashed:
                files[name] = hashed
                index_of[name] = report.index_of[name]
        return files, index_of


def _index_files(
    selection: VaultSelection,
    dists: Sequence[InstalledDist],
    indexes: Sequence[str],
    tags: Sequence[Tag],
    download: bool,
) -> IndexReport | None:
    """The files the indexes serve for the pins pylock.toml lists by URL: the report of
    --check-index, else (unless offline) a look-up of each pin the vault does not hold
    and no reason keeps off the indexes. A wheel the target takes or an sdist will do."""
    if selection.index is not None or not download:
        return selection.index
    vaulted = {d.canonical_name for d in selection.selected}
    pins = [
        (d.name, d.version)
        for d in dists
        if d.canonical_name not in vaulted and not selection.reasons[d.canonical_name]
    ]
    return check_index(pins, indexes, tags=tags, sdists=True) if pins else None


def _vault_toml(report: VaultReport) -> bytes:
    wheels = [
        {
            "name": w.name,
            "version": w.version,
            "filename": w.filename,
            "sha256": w.sha256,
            "reason": w.reason,
            "source": w.source,
        }
        for w in sorted(report.wheels, key=lambda w: w.filename)
    ]
    return tomli_w.dumps({"wheels": wheels}).encode()


# --- the pack ----------------------------------------------------------------------------


# Files of vaulted distributions this large are read by the scan for their CRC-32 only:
# their sha256 is checked against RECORD as they are written into the vault wheels.
DEFER_SHA_FROM = 64 << 10


def pack(
    options: PackOptions,
    *,
    progress: Progress | None = None,
    writing: ProgressSink | None = None,
) -> PackResult:
    """Pack; if a file whose check the scan left to the writing (its size is RECORD's)
    turns out patched, pack again reading every file itself.

    `progress` hears what pack does, in words; `writing` follows the archive being
    written: its files and bytes, then each member's size once written."""
    try:
        return _pack(options, progress, writing, defer=True)
    except NotAsRecorded as exc:
        if progress is not None:
            progress(f"{exc.message}: packing again, every file read by the scan")
        return _pack(options, progress, writing, defer=False)


def _pack(
    options: PackOptions,
    progress: Progress | None,
    writing: ProgressSink | None,
    *,
    defer: bool,
) -> PackResult:
    say = progress or (lambda message: None)
    # Every recorded path is taken against the workspace, never the current directory.
    options = replace(options, source=Path(os.path.abspath(options.source)))
    source = options.source
    if not source.exists():
        raise UsageError(f"{source}: no such directory")
    if not source.is_dir():
        raise UsageError(f"{source}: not a directory", hint="SOURCE is a workspace directory")
    if options.sign is not None:
        if not options.sign.is_file():
            raise UsageError(f"{options.sign}: no such private key file (--sign)")
        find_ssh_keygen()  # refuse before the long part, not after it
    _output_is_file(options)  # refuses -o x.zip before the long part
    config = workspace_config(source)
    python = find_interpreter(source, options.python or config.env.python or _venv_python(config))
    import_modules = (
        config.env.import_modules if options.import_modules is None else options.import_modules
    )
    warnings: list[str] = []
    members = Members()
    cache_dir = options.cache_dir or default_cache_dir()

    with (
        tempfile.TemporaryDirectory(prefix="repro-pack-") as temp_name,
        ThreadPoolExecutor(max_workers=5, thread_name_prefix="pack-") as background,
        contextlib.ExitStack() as stack,
    ):
        temp = Path(temp_name)
        # The target's pip freeze needs nothing from the probe: it starts first and runs
        # while the probe and then the scan go on.
        say("freezing the pinned stack")
        freeze_job = background.submit(run_pip_freeze, python)
        say(f"probing {python}" + (" (importing the key modules)" if import_modules else ""))
        facts = probe_target(python, import_modules=import_modules)
        compression = _compression(options)
        name = bundle_name(options, config)
        version = (
            options.version or config.bundle.version or next_version(_output_dir(options), name)
        )
        output = (
            None if options.to_stdout else _output_path(options, f"{name}-{version}", compression)
        )
        if output is not None:
            _refuse_output_inside(output, facts)
        # Runs of the target interpreter and reads of small inputs go on while the files
        # are hashed.
        units_job = background.submit(_units, options, config, facts)
        tool_job = background.submit(_tool_wheel_inputs) if options.tool_wheels else None
        # the target's tags pick the wheels to vault and those pylock.toml lists by URL
        vaulting = options.wheels != "none"
        tags_job = background.submit(target_tags, python)
        scheme_job = background.submit(scheme_paths, python) if vaulting else None
        # setup_env.sh on the bundle's own Python: its tags, where it is not pack's
        source_python = ".".join(facts.python.version.split(".")[:2])
        tool_python = f"{sys.version_info[0]}.{sys.version_info[1]}"
        bootstrap_tags_job = tags_job
        pins = pins_from_facts(facts)
        indexes = read_index_config(Path(facts.python.prefix), source=source)

        site = Path(facts.python.purelib)
        dists = list_installed(site)
        if Path(facts.python.platlib) != site:
            dists += list_installed(Path(facts.python.platlib))
        # pip check's findings, from the METADATA files while the files are hashed
        unmet_job = background.submit(check_environment, python, dists)
        vault_dir = temp / "wheels"
        tags = tags_job.result()
        selection = select_vault(
            dists,
            mode=options.wheels,
            work_dir=vault_dir,
            indexes=_indexes_list(indexes),
            check_index=options.check_index,
            python=python,
            tags=tags,
            find_links=_local_find_links(indexes),
            download=options.download,
        )

        # the index files pylock.toml lists, looked up while the files are hashed
        index_files_job = background.submit(
            _index_files, selection, dists, _indexes_list(indexes), tags, options.download
        )

        # --rehash: every file read; what is read is still kept for the next pack
        known = ScanCache(cache_dir / "scan", facts.python.prefix, load=not options.rehash)
        stack.callback(known.discard)  # a staged cache not committed: this pack failed
        say(
            "scanning installed files against RECORD"
            + (f" ({len(known)} files in the scan cache)" if len(known) else "")
        )
        scan = scan_environment(
            facts,
            packages=config.patches.packages or None,
            ignore=config.patches.ignore,
            jobs=options.jobs,
            crc_for=selection.rebuilt,
            known=known,
            defer_sha_from=(
                DEFER_SHA_FROM if defer and can_defer_digests(output, compression) else None
            ),
        )
        if not options.rehash:
            say(f"  {known.hits} of {scan.files_checked} files unchanged since the last pack")
        known.release()
        workspace = []
        if config.patches.workspace is not None:
            workspace = load_workspace_patches(
                config.patches.workspace.dir, config.patches.workspace.map, facts=facts
            )
        cache = PristineCache(
            python, temp / "pristine", pip_cache=default_pip_cache(), download=options.download
        )
        patches, patch_warnings, found_pristine = collect_patches(
            scan,
            pristine=options.pristine or config.patches.pristine,
            cache=cache,
            workspace=workspace,
        )
        warnings += patch_warnings
        warnings += scan_warnings(scan)
        secret_values = [v for k, v in os.environ.items() if is_secret_name(k)]
        warnings += _patch_secret_warnings(patches, secret_values)
        carriers = _vault_pristine(scan, found_pristine)

        # What this scan read is staged for the cache now (put in place once the bundle is
        # written and the deferred digests checked), so the planning below can take each
        # file's result as it plans the member that replaces it: a file is held once.
        known.stage(scan.digests.values())

        say(f"planning the wheel vault (--wheels {options.wheels})")
        scheme = scheme_job.result() if scheme_job is not None else None
        vault_plan = plan_vault(
            selection,
            work_dir=vault_dir,
            python=python,
            tags=tags,
            scheme=scheme,
            pristine=carriers,
            jobs=options.jobs,
            digests=scan.digests,
            consume=True,
        )
        _check_deferred_not_written(scan, vault_plan.entries, jobs=options.jobs)
        # Written to a file, the wheels' sha256 are taken on their way into the tar and
        # the lock files that list them are filled in afterwards; else a pass of its own.
        deferred = can_defer_digests(output, compression) and bool(vault_plan.entries)
        if deferred:
            vault_digests = [f"{index:064x}" for index in range(len(vault_plan.entries))]
        else:
            say(f"hashing {len(vault_plan.entries)} vault wheel(s)")
            vault_digests = hash_vault(vault_plan.entries, jobs=options.jobs)
        vault = VaultReport(
            [e.wheel(d) for e, d in zip(vault_plan.entries, vault_digests, strict=True)],
            vault_plan.warnings,
            vault_plan.index,
        )
        warnings += vault.warnings
        for dist_name, carrier in sorted(carriers.items()):
            warnings += [
                f"vault wheel of {dist_name} carries the patched {path}: no pristine copy "
                "at hand (pass --pristine, or pack where the original wheel can be downloaded)"
                for path in carrier.carried
            ]

        unmet = unmet_job.result()
        unmet_warning = describe_unmet(unmet)
        if unmet_warning is not None:
            warnings.append(unmet_warning)
        units = units_job.result()
        for unit in units:
            warnings += unit.warnings
        warnings += _launch_secret_warnings(config)
        warnings += _plain_http_warnings(indexes)
        models, model_warnings = _models(options, config, units, secret_values)
        warnings += model_warnings
        sized, left_out = split_by_size(config.files.matched, source)
        for link, refusal in config.files.refused:
            # shown with \xNN escapes: a name that is not UTF-8 is one reason to be here
            warnings.append(f"{printable_path(str(link))}: {refusal}; not carried")
            rel = link.relative_to(source).as_posix()
            kind: LeftOutKind = "bad-name" if uncarried_name(rel) else "not-a-file"
            left_out.append(LeftOut(printable_path(rel), refusal, kind))
        left_out += weights_left_out([m for m in models if not m.local_path.startswith("/")])
        carried, credentials = split_secrets(sized, source, secret_values)
        warnings += [f"{source / item.path}: {item.reason}" for item in credentials]
        left_out += credentials
        covered = [Path(facts.python.prefix), *carried, *config.files.matched]
        covered += [unit.source for unit in units] + [source / "services", source / "patches"]
        covered += [source / m.local_path for m in models if not m.local_path.startswith("/")]
        if config.patches.workspace is not None:
            covered.append(config.patches.workspace.dir)
        left_out += uncovered_entries(source, covered)

        # -- members -------------------------------------------------------------------
        hashes: dict[str, list[str]] = {}
        if vault.index is not None:
            for dist_name, files in vault.index.found.items():
                hashes[dist_name] = sorted({f.sha256 for f in files if f.sha256})
        for entry, wheel in zip(vault_plan.entries, vault.wheels, strict=True):
            members.add(
                f"env/wheels/{wheel.filename}",
                Streamed(
                    entry.plan.zip if entry.plan is not None else None,
                    entry.size if entry.plan is None else entry.plan.size,
                    wheel.sha256,
                    entry.path,
                    deferred=deferred,
                ),
            )
        freeze = freeze_from(freeze_job.result(), python, facts)
        members.add("env/pip-freeze.txt", freeze.text.encode())
        members.add(
            "env/requirements.lock",
            render_requirements_lock(pins, indexes, hashes=hashes or None).encode(),
        )
        index_files = index_files_job.result()
        if index_files is not None and index_files is not vault.index:
            warnings += index_files.errors
        locks = _VaultLocks(vault, index_files, pins, indexes, requires_python_of(facts))
        unlisted = locks.unlisted()
        if unlisted:
            warnings.append(
                f"env/pylock.toml lists {len(pins) - len(unlisted)} of {len(pins)} pins: no "
                f"index or vault file is known for {', '.join(unlisted)} (requirements.lock "
                "pins them; pack online, with --check-index or --wheels all for all of them)"
            )
        for rel, data in locks.render(vault_digests).items():
            members.add(rel, Reserved(data) if deferred else data)
        members.add("env/environment.json", facts.to_json().encode())
        _add_patches(members, patches)
        for unit in units:
            members.add(f"services/{unit.name}", unit.content)
            for env_file in unit.environment_files:
                members.add(f"services/{env_file.bundle_name}", env_file.content)
        for ref in models:
            for filename, path in ref.copied:
                members.add(f"models/{ref.name}/{filename}", path)
        for path in carried:
            members.add(f"files/{path.relative_to(source).as_posix()}", path)

        source_mtime = members.newest_mtime(generated=(temp, cache_dir))
        epoch = source_date_epoch(default=max(source_mtime, _record_mtime(facts)))
        created = datetime.fromtimestamp(epoch, tz=timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
        info = BundleInfo(
            name=name,
            version=version,
            created=created,
            tool_version=__version__,
            source=source_info(facts),
            launch=_launch(config, units),
            ladder=LadderInfo(
                rungs=config.ladder.rungs,
                expected_text=None,
                timeout_s=config.ladder.timeout,
            ),
            models=tuple(_model_ref(ref) for ref in models),
            workspace=WorkspaceInfo(venv=venv_place(source, Path(facts.python.prefix))),
        )
        members.add("bundle.toml", dump_bundle_info(info))
        top = info.top_dir
        # the canonical name, never -o's: the archive's bytes do not depend on -o
        bundle_file = f"{top}{_SUFFIX[compression]}"
        members.add(
            "REPRODUCE.md",
            render_reproduce(
                _reproduce_facts(info, facts, bundle_file, vault, patches, units, models)
            ).encode(),
        )
        wheel_pythons = [tool_python]
        if tool_job is not None:
            say("adding repro's own wheels for setup_env.sh")
            bootstrap = _bootstrap_wheels(
                cache_dir / "tool-wheels",
                tool_job.result(),
                epoch=epoch,
                facts=facts,
                tags=bootstrap_tags_job.result() if bootstrap_tags_job is not None else None,
                download=options.download,
            )
            warnings += bootstrap.warnings
            wheel_pythons = list(bootstrap.pythons)
            for wheel_path in bootstrap.wheels:
                members.add(f"tool/wheels/{wheel_path.name}", wheel_path)
        members.add(
            "setup_env.sh",
            render_setup_env(
                tool_version=__version__,
                tool_python=tool_python,
                source_python=source_python,
                wheel_pythons=wheel_pythons,
            ).encode(),
            executable=True,
        )
        # A warning may quote what it read (a URL, a unit line): never a credential.
        warnings = [scrub_text(warning, secret_values) for warning in warnings]
        members.add(
            "env/pack-report.json",
            _pack_report(scan, sorted(set(warnings)), unmet, left_out),
        )

        if options.sbom:
            _add_sbom(members)

        # The scan's results left (files no rebuilt wheel holds) go before the writing.
        scan = replace(scan, digests={})

        say(f"writing {output or 'stdout'}")
        fill = None
        if deferred:
            placeholders = vault_digests

            def fill(taken: Mapping[str, str]) -> Mapping[str, bytes]:
                return locks.render([taken[p] for p in placeholders])

        size = write_bundle(
            members,
            output,
            top=top,
            mtime=epoch,
            compression=compression,
            sign=options.sign,
            fill=fill,
            jobs=options.jobs,
            progress=writing,
        )
        known.commit()

    return PackResult(
        path=output,
        name=name,
        version=version,
        distributions=len(facts.distributions),
        vault_wheels=tuple(sorted(w.filename for w in vault.wheels)),
        patched_files=tuple(f"{p.entry.dist}: {p.entry.path} ({p.entry.kind})" for p in patches),
        units=tuple(u.name for u in units),
        models=tuple(r.name for r in models),
        files=tuple(p.relative_to(source).as_posix() for p in carried),
        members=len(members.items) + (2 if options.sign else 1),
        bundle_bytes=size,
        warnings=tuple(sorted(set(warnings))),
        left_out=tuple(item.describe() for item in left_out),
        unmet_requirements=unmet,
    )


def _add_sbom(members: Members) -> None:
    """env/sbom.cdx.json, made once every other member is written: from their bytes (the
    lock files' as filled in) and digests, as `repro sbom` makes it from the bundle."""
    from repro.verbs.sbom import SBOM_MEMBER, render_sbom  # cyclonedx: only when asked for

    written = {rel: c for rel, c in members.items.items() if isinstance(c, bytes)}

    def render(digests: Mapping[str, str], filled: Mapping[str, bytes]) -> bytes:
        return render_sbom({**written, **filled}, digests)

    members.add(SBOM_MEMBER, Generated(render))


def venv_place(source: Path, prefix: Path) -> str:
    """Where the venv goes under the target: its place in the workspace, or `venv` for
    a venv that lives elsewhere on the source box."""
    for inner, outer in (
        (Path(os.path.abspath(prefix)), source),
        (prefix.resolve(), source.resolve()),
    ):
        if inner.is_relative_to(outer):
            return inner.relative_to(outer).as_posix() or "."
    return "venv"


def _bootstrap_wheels(
    cache_root: Path,
    inputs: ToolWheelInputs,
    *,
    epoch: int,
    facts: EnvironmentFacts,
    tags: Sequence[Tag] | None,
    download: bool,
) -> BootstrapWheels:
    """tool/wheels: repro's own wheels, and those the bundle's Python needs besides."""
    from repro.snapshot.targetwheels import TargetPython, bootstrap_wheels
    from repro.snapshot.toolwheels import tool_wheels

    own = tool_wheels(cache_root, source_date_epoch=epoch, inputs=inputs)
    target = None
    if tags is not None:
        target = TargetPython(facts.python.version, facts.python.implementation, tuple(tags))
    own_python = f"{sys.version_info[0]}.{sys.version_info[1]}"
    return bootstrap_wheels(own, own_python, cache_root, inputs, target, download=download)


def _pack_report(
    scan: ScanReport,
    warnings: list[str],
    unmet: Sequence[UnmetRequirement],
    left_out: Sequence[LeftOut],
) -> bytes:
    document = {
        "installed_bytes": scan.bytes_checked,
        "installed_files": scan.files_checked,
        "unchecked_distributions": dict(sorted(scan.dists_skipped.items())),
        "skipped_files": [
            {"dist": f.dist, "path": f.path, "reason": f.reason} for f in scan.skipped_files
        ],
        "unmet_requirements": [u.to_json() for u in unmet],
        "warnings": warnings,
        "left_out": [
            {"path": item.path, "kind": item.kind, "reason": item.reason} for item in left_out
        ],
    }
    return (json.dumps(document, indent=2, sort_keys=True) + "\n").encode()


def scan_warnings(scan: ScanReport) -> list[str]:
    """What the scan could not check or did not take, one warning each: a distribution
    without RECORD (its hand patches cannot be found, so none travels), a file left
    unread (a link out of the venv, a FIFO), a file that could not be read."""
    warnings = [
        f"{name}: {why}; its files cannot be checked for patches, and none is carried"
        for name, why in sorted(scan.dists_skipped.items())
    ]
    warnings += [f.describe() for f in scan.skipped_files]
    warnings += [
        f"{u.dist}: {u.path}: cannot be read ({u.error}); not checked for patches"
        for u in scan.unreadable
    ]
    return warnings


def _plain_http_warnings(indexes: IndexConfig) -> list[str]:
    """An http:// index is recorded as found, but `repro unpack` installs online from
    https indexes only (anyone on the path could choose the packages): say so now."""
    urls = [indexes.index_url, *indexes.extra_index_urls, *indexes.find_links]
    return [
        f"index {url} ({indexes.origins.get(url, 'pip/uv config')}) is plain http: "
        "`repro unpack` refuses it online; use its https URL, or pack --wheels all and "
        "unpack --offline"
        for url in urls
        if url is not None and url.lower().startswith("http://")
    ]


def _local_find_links(indexes: IndexConfig) -> list[Path]:
    """Local wheel directories the source installs from: original wheels for the vault."""
    found = []
    for item in (*indexes.find_links, *indexes.local):
        path = Path(item.removeprefix("file://")) if item.startswith(("/", "file://")) else None
        if path is not None and path.is_dir() and not (path / "index.html").exists():
            found.append(path)
    return found


def _venv_python(config: Config) -> Path | None:
    return config.env.venv / "bin" / "python" if config.env.venv else None


def _record_mtime(facts: EnvironmentFacts) -> int:
    times = []
    for dist in facts.distributions:
        record = Path(dist.metadata_dir) / "RECORD"
        with contextlib.suppress(OSError):
            times.append(int(record.stat().st_mtime))
    return max(times, default=0)


def _patch_secret_warnings(
    patches: Sequence[CollectedPatch], known_values: Sequence[str]
) -> list[str]:
    """A warning for each patched file (full or diff) that holds what looks like a
    credential. The file is still carried: a patch is code, and repro does not edit it."""
    warnings = []
    for patch in patches:
        full = patch.full
        if isinstance(full, Path):
            try:
                with full.open("rb") as stream:
                    full = stream.read(MAX_SCANNED_BYTES)
            except OSError:
                full = None  # the writing reports an unreadable file
        why = None
        for data in (full, patch.diff.encode() if patch.diff else None):
            if why is None and data:
                why = token_in_code(data, known_values)
        if why is not None:
            entry = patch.entry
            warnings.append(
                f"patches/full/{entry.dist}/{entry.path}: the patched file holds {why}; "
                "it is carried as it is (a patch is code, repro does not edit it): take "
                "the credential out of the file and pack again"
            )
    return warnings


def _add_patches(members: Members, patches: Sequence[CollectedPatch]) -> None:
    entries = []
    for patch in patches:
        entries.append(patch.entry)
        full = patch.entry.full_member
        if full is not None and patch.full is not None:
            members.add(f"patches/{full}", patch.full, executable=patch.entry.executable)
        diff = patch.entry.diff_member
        if diff is not None and patch.diff is not None:
            members.add(f"patches/{diff}", patch.diff.encode())
    members.add("patches/patches.toml", dump_patchset(entries))


_PLAIN_WORD = re.compile(r"[\w@%+=:,./${}-]+")


def _display(argv: Sequence[str]) -> str:
    """A command for people to read: words quoted only where a shell needs it, the
    ${REPRO_*} variables left readable."""
    return " ".join(arg if _PLAIN_WORD.fullmatch(arg) else shlex.quote(arg) for arg in argv)


def _reproduce_facts(
    info: BundleInfo,
    facts: EnvironmentFacts,
    bundle_file: str,
    vault: VaultReport,
    patches: Sequence[CollectedPatch],
    units: Sequence[unit_capture.CapturedUnit],
    models: Sequence[ModelReference],
) -> ReproduceFacts:
    source = info.source
    hardware = [
        f"GPU: {gpu.name} (compute capability {gpu.compute_capability}, {gpu.memory_mib} MiB)"
        for gpu in source.gpus
    ]
    if source.driver:
        hardware.append(f"NVIDIA driver {source.driver} (CUDA {source.cuda_driver_version})")
    environment = [
        f"Python {source.python} ({source.implementation}) on {source.platform}, glibc "
        f"{source.glibc or 'unknown'}",
        f"{len(facts.distributions)} distributions; torch {source.torch or 'not installed'}"
        + (f" built for CUDA {source.torch_cuda}" if source.torch_cuda else ""),
    ]
    if source.torch_arch_list:
        torch = next((m for m in facts.modules if m.module == "torch"), None)
        how = (
            "kernels in torch/lib/libtorch_cuda.so"
            if torch is not None and torch.probed == "files"
            else "torch.cuda.get_arch_list()"
        )
        environment.append(f"torch arch list ({how}): {', '.join(source.torch_arch_list)}")
    if facts.cuda_toolkit.nvcc_version:
        environment.append(f"nvcc {facts.cuda_toolkit.nvcc_version}")
    summaries = []
    for patch in patches:
        added, removed = count_diff_lines(patch.diff or "")
        entry = patch.entry
        summaries.append(
            PatchSummary(entry.dist, entry.version, entry.path, entry.kind, added, removed)
        )
    launch = []
    for command in info.launch.commands:
        text = command.shell or _display(command.argv or ())
        origin = f"from services/{command.unit}" if command.unit else "from repro.toml [launch]"
        launch.append((f"{command.name} ({command.engine}, port {command.port}; {origin})", text))
    model_lines = [
        f"{m.name} ({m.role}): {m.repo_id or m.local_path}"
        + (f" @ {m.revision}" if m.revision else "")
        + f", {m.file_count} files, {m.total_bytes / 2**30:.2f} GiB"
        for m in models
    ]
    return ReproduceFacts(
        name=info.name,
        version=info.version,
        top=info.top_dir,
        bundle_file=bundle_file,
        created=info.created,
        tool_version=info.tool_version,
        python_version=source.python,
        hardware=hardware,
        environment=environment,
        torch_cuda=source.torch_cuda or "n/a",
        vault=[(w.filename, w.reason, w.source) for w in vault.wheels],
        patches=summaries,
        services=[u.name for u in units],
        launch=launch,
        models=model_lines,
    )
