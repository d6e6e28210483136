"""Where each part of a bundle lies: every member path, by name.

A bundle is one top directory (`<name>-<version>/`) holding the members below; the
normative description is docs/bundle-format.md. Every writer and reader names a member
through this module, so a section is moved or added here and nowhere else. Paths are
`/`-separated and relative to the top directory, as in the archive and the manifest.

A workspace (the source directory pack reads, the target unpack restores) has the same
shape for the parts it shares with a bundle (services/, models/, patches/), so those
paths are built here too, with `at(workspace, SERVICES)`.
"""

from __future__ import annotations

from pathlib import Path

# -- the top directory ---------------------------------------------------------------
BUNDLE_TOML = "bundle.toml"  # format version, name, source facts, launch, ladder
MANIFEST = "MANIFEST.sha256"  # `sha256sum -c` format, every member but itself
SIGNATURE = "MANIFEST.sha256.sig"  # ssh-keygen -Y signature of the manifest, optional
REPRODUCE = "REPRODUCE.md"
SETUP_ENV = "setup_env.sh"  # bootstrap on a box without repro

# -- env/: the pinned stack ------------------------------------------------------------
ENV = "env"
PIP_FREEZE = "env/pip-freeze.txt"
REQUIREMENTS_LOCK = "env/requirements.lock"
PYLOCK = "env/pylock.toml"
ENVIRONMENT = "env/environment.json"
VAULT_TOML = "env/vault.toml"
PACK_REPORT = "env/pack-report.json"
SBOM = "env/sbom.cdx.json"
WHEELS = "env/wheels"
KERNELS_TOML = "env/kernels.toml"  # every shared object's GPU code, the kernel sources
CACHES_TOML = "env/caches.toml"  # the compile caches carried, each with the key it is valid for

# -- patches/: the hand patches to site-packages ---------------------------------------
PATCHES = "patches"
# A patch set directory (patches/ of a bundle or of a workspace) holds this file beside
# full/ and diffs/; patches.toml names its files relative to the directory.
PATCHSET_FILE = "patches.toml"
PATCHES_TOML = f"{PATCHES}/{PATCHSET_FILE}"
PATCHES_FULL = "patches/full"
PATCHES_DIFFS = "patches/diffs"

# -- the workspace: units, models, carried files, repro's own wheels ---------------------
SERVICES = "services"
MODELS = "models"
FILES = "files"
TOOL_WHEELS = "tool/wheels"
KERNELS = "kernels"  # kernels/<dist>/: the source tree of a distribution built here
CACHES = "caches"  # caches/<kind>/: a compile cache (Triton, TorchInductor, ...) as it was

# The manifest and its signature close an archive. Before them come the members made
# from the digests of others, in this order: the two that list the vault wheels' sha256
# (from format 5 on: taken as the wheels are written, so they follow env/wheels/), then
# the SBOM, which describes every other member by digest.
MANIFEST_NAMES = (MANIFEST, SIGNATURE)
TRAILING_MEMBERS = (PYLOCK, VAULT_TOML, SBOM)
# Formats 1 to 4 sort the lock files among the others (before env/wheels/).
LEGACY_TRAILING_MEMBERS = (SBOM,)
TRAILING_LOCKS_FROM_FORMAT = 5


def trailing_members(format_version: int) -> tuple[str, ...]:
    """The members after every ordinary one (and before the manifest) in a bundle of
    `format_version`, in their order."""
    if format_version >= TRAILING_LOCKS_FROM_FORMAT:
        return TRAILING_MEMBERS
    return LEGACY_TRAILING_MEMBERS


def wheel(filename: str) -> str:
    """A vault wheel."""
    return f"{WHEELS}/{filename}"


def wheel_from_env(filename: str) -> str:
    """A vault wheel as env/pylock.toml names it: relative to env/, where the lock lies."""
    return wheel(filename).removeprefix(under(ENV))


def tool_wheel(filename: str) -> str:
    """A wheel of repro or one of its dependencies, for setup_env.sh."""
    return f"{TOOL_WHEELS}/{filename}"


def full_patch(dist: str, path: str) -> str:
    """The complete patched file of `path` (relative to site-packages) in `dist`."""
    return f"{PATCHES_FULL}/{dist}/{path}"


def patch_diff(dist: str, path: str) -> str:
    """The unified diff of `path` against the pristine file, for review."""
    return f"{PATCHES_DIFFS}/{dist}/{path}.diff"


def in_patches(rel: str) -> str:
    """A path relative to patches/ (as patches.toml names them) as a member path."""
    return f"{PATCHES}/{rel}"


def unit(name: str) -> str:
    """A systemd unit, or a file of a unit's drop-in (`name.service.d/x.conf`)."""
    return f"{SERVICES}/{name}"


def model_file(model: str, filename: str) -> str:
    """A model's small file (config.json, the card, the tokenizer's files)."""
    return f"{MODELS}/{model}/{filename}"


def carried_file(rel: str) -> str:
    """A workspace file carried under files/, by its path relative to the workspace."""
    return f"{FILES}/{rel}"


def kernel_source(dist: str, rel: str = "") -> str:
    """A file of `dist`'s carried source tree (`rel` relative to its root); the tree's
    prefix when `rel` is empty."""
    return f"{KERNELS}/{dist}/{rel}"


def cache_file(kind: str, rel: str = "") -> str:
    """A file of the compile cache of `kind` (`rel` relative to the cache's directory);
    the cache's prefix when `rel` is empty."""
    return f"{CACHES}/{kind}/{rel}"


def under(section: str) -> str:
    """The prefix every member of a section starts with (`services/`)."""
    return f"{section}/"


def at(root: Path, member: str) -> Path:
    """Where `member` lies in a bundle extracted (or kept) at `root`."""
    return root.joinpath(*member.split("/"))
