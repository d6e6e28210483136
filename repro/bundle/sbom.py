"""A bundle's CycloneDX SBOM (env/sbom.cdx.json), made with cyclonedx-python-lib.

The document is made from the bundle's own members only (bundle.toml, the locks, the
vault list, the patch set and its diffs) and from the sha256 of every member, so `pack
--sbom` (which writes it as env/sbom.cdx.json, after every other member) and `repro
sbom` on the finished bundle (repro.verbs.sbom) give the same bytes. It never depends
on itself: the serial number is a UUID5 of the manifest the bundle would have without
the SBOM. Imported only where an SBOM is made: the CycloneDX library is slow to load.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime

from cyclonedx.model import (
    AttachedText,
    ExternalReference,
    ExternalReferenceType,
    HashAlgorithm,
    HashType,
    Property,
    XsUri,
)
from cyclonedx.model.bom import Bom, BomMetaData
from cyclonedx.model.component import (
    Component,
    ComponentType,
    Diff,
    Patch,
    PatchClassification,
    Pedigree,
)
from cyclonedx.model.tool import ToolRepository
from cyclonedx.output.json import JsonV1Dot6
from packageurl import PackageURL
from packaging.pylock import PackageSdist, PackageWheel, Pylock, PylockValidationError
from packaging.utils import canonicalize_name

from repro import __version__, _toml
from repro.bundle import layout
from repro.bundle.info import BundleInfo, ModelRef, load_bundle_info
from repro.bundle.layout import BUNDLE_TOML, MANIFEST_NAMES, PATCHES_TOML, VAULT_TOML
from repro.bundle.limits import KEEP_LIMIT
from repro.bundle.lock import LockFile, parse_requirements_lock
from repro.bundle.manifest import format_manifest
from repro.bundle.patchset import PatchEntry, PatchSet, load_patchset
from repro.bundle.vault import VaultEntry, load_vault
from repro.errors import BundleFormatError
from repro.hashing import sha256_bytes

SBOM_MEMBER = layout.SBOM
SPEC_VERSION = "1.6"
LOCK = layout.REQUIREMENTS_LOCK
PYLOCK = layout.PYLOCK
PYPI = ("https://pypi.org/simple", "https://pypi.org/simple/")
# The namespace of serial numbers: a UUID5 of this name and the manifest's sha256.
_SERIAL_NAMESPACE = uuid.uuid5(uuid.NAMESPACE_URL, "https://cyclonedx.org/repro/bundle-manifest")


def manifest_sha256(digests: Mapping[str, str]) -> str:
    """sha256 of the MANIFEST.sha256 the bundle has without its SBOM: every member but
    the SBOM, the manifest and its signature (`grep -v env/sbom.cdx.json MANIFEST.sha256
    | sha256sum` on a bundle packed with --sbom)."""
    kept = ((rel, d) for rel, d in digests.items() if rel not in (SBOM_MEMBER, *MANIFEST_NAMES))
    return sha256_bytes(format_manifest(kept))


def serial_number(digests: Mapping[str, str]) -> uuid.UUID:
    return uuid.uuid5(_SERIAL_NAMESPACE, manifest_sha256(digests))


@dataclass(frozen=True)
class _PinFiles:
    """What the bundle knows of one pin's files: index URL, wheels with sha256."""

    index: str | None
    files: tuple[tuple[str, str | None, str], ...]  # (file name, URL or None, sha256)


def _pylock_files(data: bytes | None) -> dict[str, _PinFiles]:
    """Each pin's index and files as env/pylock.toml says, read by its real reader
    (`packaging.pylock`): a lock of the wrong shape is refused naming the key."""
    if data is None:
        return {}
    try:
        document = _toml.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, _toml.TOMLDecodeError) as exc:
        raise BundleFormatError(f"{PYLOCK}: not valid TOML: {exc}") from exc
    try:
        lock = Pylock.from_dict(document)
    except PylockValidationError as exc:
        # its message names the key: "Unexpected type str (expected Sequence) in 'packages'"
        raise BundleFormatError(
            f"{PYLOCK}: not a PEP 751 lock: {exc}",
            hint="the bundle's pylock.toml was changed after pack wrote it; pack again",
        ) from exc
    result: dict[str, _PinFiles] = {}
    for package in lock.packages:
        refs: list[PackageWheel | PackageSdist] = list(package.wheels or ())
        if package.sdist is not None:
            refs.append(package.sdist)
        files = []
        for ref in refs:
            digest = ref.hashes.get("sha256")
            if digest is not None and ref.name is not None:
                files.append((ref.name, ref.url, digest))
        result[str(package.name)] = _PinFiles(package.index, tuple(files))
    return result


def _lock(contents: Mapping[str, bytes]) -> LockFile:
    data = contents.get(LOCK)
    if data is None:
        raise BundleFormatError(f"{LOCK}: missing (or too large to read); no pins to list")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise BundleFormatError(f"{LOCK}: not UTF-8: {exc}") from exc
    return parse_requirements_lock(text, source=LOCK)


def _repository_url(name: str, lock: LockFile, pylock: Mapping[str, _PinFiles]) -> str | None:
    """The index a pin comes from when it is not PyPI: pylock.toml's `index` of the pin,
    else the lock's one index (an --index-url and no extra index)."""
    index = pylock[name].index if name in pylock else None
    if index is None and not lock.indexes.extra_index_urls:
        index = lock.indexes.index_url
    if index is None or index in PYPI:
        return None
    return index


def _patch_properties(entries: Sequence[PatchEntry]) -> list[Property]:
    return [
        Property(
            name="repro:patched-file",
            value=f"{e.kind} {e.path} sha256:{e.patched_sha256 or '-'}",
        )
        for e in entries
    ]


def _pedigree(entries: Sequence[PatchEntry], contents: Mapping[str, bytes]) -> Pedigree:
    """The hand patches of one distribution as CycloneDX pedigree: one `unofficial` patch
    (made by neither its authors nor its maintainers) per diff the bundle carries, with
    the diff's text when it is small enough to be read (as `repro inspect` reads it) and
    its member path, and notes naming every patched file."""
    patches = []
    for entry in entries:
        member = entry.diff_member
        if member is None:
            continue
        data = contents.get(layout.in_patches(member))
        text = None
        if data is not None:
            text = AttachedText(content=data.decode("utf-8", "replace"), content_type="text/x-diff")
        patches.append(
            Patch(
                type=PatchClassification.UNOFFICIAL,
                diff=Diff(text=text, url=XsUri(layout.in_patches(member))),
            )
        )
    files = ", ".join(f"{e.path} ({e.kind})" for e in entries)
    notes = f"Patched in site-packages by hand, carried by the bundle's patches/: {files}"
    return Pedigree(patches=patches, notes=notes)


def _component(
    name: str,
    version: str,
    *,
    lock: LockFile,
    pylock: Mapping[str, _PinFiles],
    vault: Sequence[VaultEntry],
    patches: Sequence[PatchEntry],
    contents: Mapping[str, bytes],
) -> Component:
    repository = _repository_url(name, lock, pylock)
    qualifiers = {"repository_url": repository} if repository else None
    purl = PackageURL(type="pypi", name=name, version=version, qualifiers=qualifiers)
    properties: list[Property] = []
    references: list[ExternalReference] = []
    if vault:
        digests = sorted({w.sha256 for w in vault})
        properties += [Property(name="repro:vault-wheel", value=w.filename) for w in vault]
    else:
        known = pylock.get(name)
        files = known.files if known is not None else ()
        digests = sorted({d for _, _, d in files} | set(lock.hashes.get(name, ())))
        for filename, url, digest in files:
            if url is not None:
                references.append(
                    ExternalReference(
                        type=ExternalReferenceType.DISTRIBUTION,
                        url=XsUri(url),
                        comment=filename,
                        hashes=[HashType(alg=HashAlgorithm.SHA_256, content=digest)],
                    )
                )
        if len(digests) != 1:
            digests = []  # several files (one per platform): each on its reference only
    properties += _patch_properties(patches)
    return Component(
        type=ComponentType.LIBRARY,
        name=name,
        version=version,
        bom_ref=purl.to_string(),
        purl=purl,
        hashes=[HashType(alg=HashAlgorithm.SHA_256, content=d) for d in digests],
        external_references=references,
        properties=properties,
        pedigree=_pedigree(patches, contents) if patches else None,
    )


def _model_component(model: ModelRef) -> Component:
    """A model the bundle references, as a CycloneDX machine-learning-model: its
    identity (repository and revision) as properties and a reference to the hub, and
    each file whose sha256 the bundle records as a file component of its own (the small
    files now; weight pins where the reference has them)."""
    facts: list[tuple[str, str | None]] = [
        ("repro:model-role", model.role),
        ("repro:repo-id", model.repo_id),
        ("repro:revision", model.revision),
        ("repro:local-path", model.local_path),
        ("repro:present-when-packed", "true" if model.present else "false"),
        ("repro:total-bytes", str(model.total_bytes) if model.present else None),
        ("repro:file-count", str(model.file_count) if model.present else None),
    ]
    files = dict(model.small_files)
    pins = getattr(model, "weights", ())
    for pin in pins:  # WeightPin (repro.bundle.weights): path and sha256
        path, digest = getattr(pin, "path", None), getattr(pin, "sha256", None)
        if isinstance(path, str) and isinstance(digest, str) and digest:
            files[path] = digest
    facts.append(("repro:weights", "pinned" if pins else "not pinned"))
    references = []
    if model.repo_id:
        tree = f"/tree/{model.revision}" if model.revision else ""
        references.append(
            ExternalReference(
                type=ExternalReferenceType.DISTRIBUTION,
                url=XsUri(f"https://huggingface.co/{model.repo_id}{tree}"),
                comment=f"{model.repo_id}" + (f" @ {model.revision}" if model.revision else ""),
            )
        )
    ref = f"repro-model:{model.name}"
    return Component(
        type=ComponentType.MACHINE_LEARNING_MODEL,
        name=model.name,
        version=model.revision,
        bom_ref=ref,
        group=model.repo_id.split("/")[0] if model.repo_id else None,
        external_references=references,
        properties=[Property(name=name, value=value) for name, value in facts if value],
        components=[
            Component(
                type=ComponentType.FILE,
                name=path,
                bom_ref=f"{ref}/{path}",
                hashes=[HashType(alg=HashAlgorithm.SHA_256, content=digest)],
            )
            for path, digest in sorted(files.items())
        ],
    )


def _source_properties(info: BundleInfo, digests: Mapping[str, str]) -> list[Property]:
    source = info.source
    facts: list[tuple[str, str | None]] = [
        ("repro:bundle-format", str(info.format_version)),
        ("repro:packed-by", f"repro {info.tool_version}"),
        ("repro:manifest-sha256", manifest_sha256(digests)),
        ("repro:python", f"{source.python} ({source.implementation})"),
        ("repro:platform", source.platform),
        ("repro:glibc", source.glibc),
        ("repro:driver", source.driver),
        ("repro:cuda-driver", source.cuda_driver_version),
        ("repro:torch", source.torch),
        ("repro:torch-cuda", source.torch_cuda),
        ("repro:torch-arch-list", " ".join(source.torch_arch_list) or None),
    ]
    facts += [
        ("repro:gpu", f"{gpu.name} (sm {gpu.compute_capability}, {gpu.memory_mib} MiB)")
        for gpu in source.gpus
    ]
    return [Property(name=name, value=value) for name, value in facts if value]


def render_sbom(contents: Mapping[str, bytes], digests: Mapping[str, str]) -> bytes:
    """The CycloneDX 1.6 JSON document of a bundle from its members' bytes (`contents`:
    at least bundle.toml and env/requirements.lock) and the sha256 of every member.

    Members larger than `repro inspect` reads into memory are left out (a diff is then
    named by its path only), so that pack, which has them all, makes the same bytes."""
    contents = {rel: data for rel, data in contents.items() if len(data) <= KEEP_LIMIT}
    if BUNDLE_TOML not in contents:
        raise BundleFormatError(f"{BUNDLE_TOML}: missing; not a bundle made by `repro pack`")
    info = load_bundle_info(contents[BUNDLE_TOML], source=BUNDLE_TOML)
    lock = _lock(contents)
    pylock = _pylock_files(contents.get(PYLOCK))
    vault = load_vault(contents[VAULT_TOML], source=VAULT_TOML) if VAULT_TOML in contents else ()
    patchset = PatchSet(())
    if PATCHES_TOML in contents:
        patchset = load_patchset(contents[PATCHES_TOML], source=PATCHES_TOML)
    by_dist = {_canonical(d): e for d, e in patchset.by_dist().items()}
    components = [
        _component(
            pin.name,
            pin.version,
            lock=lock,
            pylock=pylock,
            vault=[w for w in vault if _canonical(w.name) == pin.name],
            patches=by_dist.get(pin.name, []),
            contents=contents,
        )
        for pin in lock.pins
    ]
    models = [_model_component(model) for model in info.models]
    root = Component(
        type=ComponentType.APPLICATION,
        name=info.name,
        version=info.version,
        bom_ref=f"repro-bundle:{info.top_dir}",
        description="a deployment bundle made by `repro pack`",
    )
    tool = Component(
        type=ComponentType.APPLICATION, name="repro", version=__version__, bom_ref="repro-tool"
    )
    bom = Bom(
        serial_number=serial_number(digests),
        components=[*components, *models],
        metadata=BomMetaData(
            timestamp=datetime.fromisoformat(info.created.replace("Z", "+00:00")),
            component=root,
            tools=ToolRepository(components=[tool]),
            properties=_source_properties(info, digests),
        ),
    )
    bom.register_dependency(root, [*components, *models])
    for component in [*components, *models]:
        bom.register_dependency(component, [])
    return (JsonV1Dot6(bom).output_as_string(indent=2) + "\n").encode("utf-8")


def _canonical(name: str) -> str:
    return str(canonicalize_name(name))
