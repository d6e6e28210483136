"""The source trees of distributions built on this box, carried so the target can rebuild them.

A distribution is carried when it was installed from a local directory (its
`direct_url.json` names a `file://` URL with `dir_info`: `pip install ./sgl-kernel`,
editable or not) or when repro.toml names its tree (`[kernels.<dist>] source`). Its files:

- in a git checkout, the files `git ls-files` lists (tracked, submodules' too), as they
  are in the working tree: what was built, never what is ignored or untracked;
- else the tree less its build outputs (`build/`, `dist/`, `*.egg-info`, `__pycache__`,
  `.git`, CMake's build directories, `*.o`, `*.so`, ...).

Either way the workspace files' rules apply (repro.snapshot.workspace.leftout): a file
whose name or content looks like a credential is left out, with a warning that says
why and never what it holds; so is a file over the carried-file size limit, or a name a
bundle cannot hold. A symbolic link is carried as the file it names only when it
resolves to a regular file inside the tree (repro.config.link_refusal); no link is
followed out of it, no linked directory entered.
"""

from __future__ import annotations

import fnmatch
import os
import subprocess
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from repro.archive.tarformat import uncarried_name
from repro.bundle import layout
from repro.bundle.kernels import ARCH_ENV, KernelSource
from repro.config import CONFIG_NAME, Config, KernelRecipe, link_refusal
from repro.errors import ConfigError
from repro.snapshot.facts.installed import InstalledDist
from repro.snapshot.vault.original import file_url_path
from repro.snapshot.workspace.leftout import split_by_size, split_secrets

GIT_TIMEOUT = 120.0
# What a plain tree's build leaves beside its sources: never carried from one.
# (and any directory holding a pyvenv.cfg: a venv)
BUILD_DIRS = frozenset(
    {
        "build",
        "dist",
        ".eggs",
        "CMakeFiles",
        "_skbuild",
        ".git",
        "__pycache__",
        ".tox",
        ".mypy_cache",
        ".pytest_cache",
        ".ruff_cache",
    }
)
BUILD_DIR_PATTERNS = ("*.egg-info", "cmake-build-*")
BUILD_FILE_PATTERNS = ("*.o", "*.obj", "*.so", "*.so.*", "*.a", "*.pyc", "*.pyo", "CMakeCache.txt")


@dataclass(frozen=True)
class CarriedSource:
    """One distribution's tree: its record for env/kernels.toml, and the files to carry."""

    source: KernelSource
    root: Path
    files: tuple[tuple[str, Path], ...]  # (path relative to root, '/'-separated; the file)
    warnings: tuple[str, ...]

    def members(self) -> dict[str, Path]:
        """kernels/<dist>/<rel> -> the file."""
        return {layout.kernel_source(self.source.name, rel): path for rel, path in self.files}


def source_root(dist: InstalledDist) -> Path | None:
    """The local directory `dist` was installed from, or None (an index, a wheel file,
    a VCS URL: nothing built here from a tree repro can read)."""
    direct = dist.direct_url or {}
    if not isinstance(direct.get("dir_info"), dict):
        return None
    path = file_url_path(dist.direct_url_str or "")
    return path if path is not None and path.is_dir() else None


def find_sources(
    dists: Iterable[InstalledDist],
    config: Config,
    *,
    secret_values: Sequence[str] = (),
) -> tuple[CarriedSource, ...]:
    """Every distribution to carry the source of, by name: those installed from a local
    directory and those `[kernels.<dist>] source` names (a recipe of repro.toml applies
    to either). A `[kernels.<dist>]` for no installed distribution, or one installed
    from nothing local and given no `source`: ConfigError naming repro.toml and the key."""
    by_name = {d.canonical_name: d for d in dists}
    where = config.path or (config.source / CONFIG_NAME)
    problems: list[str] = []
    roots: dict[str, tuple[InstalledDist, Path, KernelRecipe]] = {}
    for name, recipe in sorted(config.kernels.items()):
        dist = by_name.get(name)
        if dist is None:
            problems.append(f"{where}: kernels.{name}: no distribution of that name is installed")
            continue
        root = recipe.source or source_root(dist)
        if root is None:
            problems.append(
                f"{where}: kernels.{name}: {dist.name} was not installed from a local "
                'directory; give its tree as source = "PATH"'
            )
            continue
        roots[name] = (dist, root, recipe)
    if problems:
        raise ConfigError("\n".join(problems), hint="see docs/config.md, [kernels.<dist>]")
    for name, dist in sorted(by_name.items()):
        root = source_root(dist)
        if name not in roots and root is not None:
            roots[name] = (dist, root, KernelRecipe())
    return tuple(
        carry_source(dist, root, recipe, secret_values=secret_values)
        for dist, root, recipe in (roots[name] for name in sorted(roots))
    )


def carry_source(
    dist: InstalledDist,
    root: Path,
    recipe: KernelRecipe,
    *,
    secret_values: Sequence[str] = (),
) -> CarriedSource:
    """The files of `root` to carry for `dist`, and its KernelSource record."""
    root = Path(os.path.abspath(root))
    listed = git_files(root)
    kind = "git" if listed is not None else "tree"
    candidates = listed if listed is not None else tree_files(root)
    warnings: list[str] = []
    regular: list[Path] = []
    resolved_root = root.resolve()
    for rel in candidates:
        path = root / rel
        why = uncarried_name(rel)
        if why is None and path.is_symlink():
            why = link_refusal(path, resolved_root, where=f"the source tree of {dist.name}")
        elif why is None and not path.exists():
            continue  # tracked but deleted from the working tree: not part of the build
        elif why is None and not path.is_file():
            why = "not a regular file: not read"
        if why is not None:
            warnings.append(f"{dist.name} source {root}: {rel}: {why}; not carried")
            continue
        regular.append(path)
    sized, too_big = split_by_size(regular, root)
    kept, secrets = split_secrets(sized, root, secret_values)
    for item in (*too_big, *secrets):
        warnings.append(f"{dist.name} source {root}: {item.describe()}")
    files = tuple(sorted((p.relative_to(root).as_posix(), p) for p in kept))
    size = sum(path.stat().st_size for _, path in files)
    source = KernelSource(
        name=dist.canonical_name,
        version=dist.version,
        kind=kind,
        origin=str(root),
        files=len(files),
        size=size,
        editable=dist.editable,
        arch_env=tuple(dict.fromkeys((*ARCH_ENV, *recipe.arch_env))),
        env=recipe.env,
        command=recipe.command,
        check=recipe.check,
    )
    return CarriedSource(source, root, files, tuple(warnings))


def git_files(root: Path) -> list[str] | None:
    """The files git tracks under `root` (submodules' too), relative to it; None when
    `root` is in no git checkout (or git is not installed, or lists nothing there: a
    tree the checkout around it does not track is carried as a plain tree)."""
    env = _git_env()
    try:
        inside = subprocess.run(
            ["git", "rev-parse", "--is-inside-work-tree"],
            cwd=root,
            capture_output=True,
            text=True,
            timeout=GIT_TIMEOUT,
            env=env,
            check=False,
        )
        if inside.returncode != 0 or inside.stdout.strip() != "true":
            return None
        listing = subprocess.run(
            ["git", "ls-files", "-z", "--cached", "--recurse-submodules"],
            cwd=root,
            capture_output=True,
            timeout=GIT_TIMEOUT,
            env=env,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    if listing.returncode != 0:
        return None
    names = sorted({os.fsdecode(n) for n in listing.stdout.split(b"\0") if n})
    return names or None


def _git_env() -> Mapping[str, str]:
    """This environment, less what would point git elsewhere (GIT_DIR and friends)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    env["LC_ALL"] = "C"
    return env


def _build_dir(path: Path) -> bool:
    name = path.name
    if name in BUILD_DIRS or any(fnmatch.fnmatchcase(name, p) for p in BUILD_DIR_PATTERNS):
        return True
    return (path / "pyvenv.cfg").is_file()


def tree_files(root: Path) -> list[str]:
    """Every entry of `root` that is no build output, relative to it; links are listed
    (and judged by the caller), never entered."""
    found: list[str] = []
    for directory, dirs, names in os.walk(root, followlinks=False):
        here = Path(directory)
        kept_dirs = []
        for name in sorted(dirs):
            if (here / name).is_symlink():
                found.append((here / name).relative_to(root).as_posix())
                continue
            if not _build_dir(here / name):
                kept_dirs.append(name)
        dirs[:] = kept_dirs
        for name in sorted(names):
            if any(fnmatch.fnmatchcase(name, p) for p in BUILD_FILE_PATTERNS):
                continue
            found.append((here / name).relative_to(root).as_posix())
    return sorted(found)
