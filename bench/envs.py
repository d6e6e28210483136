"""The benchmark's environments: real venvs inside real workspaces, built once and cached.

A workspace is what `repro pack` takes: a venv with real packages installed by pip
(one file patched inside site-packages), a systemd unit, a drafter config and a
repro.toml. Each recipe is built once under the cache directory (a marker file
says it is complete) and reused by later runs.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from repro.errors import ReproError

SMALL = ("numpy==2.2.6", "pandas==2.2.3", "scipy==1.13.1", "idna==3.10", "six==1.16.0")
FULL = ("torch==2.14.1", "idna==3.10", "six==1.16.0", "packaging==24.2")
RECIPES: dict[str, tuple[str, ...]] = {"small": SMALL, "full": FULL}
PATCHED_DIST = "idna"
PATCH_LINE = (
    "\n# serving policy: patched by the repro benchmark workspace\nSERVING_POLICY = 'strict'\n"
)

UNIT = """[Unit]
Description=Model server packed by the repro benchmark
After=network-online.target

[Service]
WorkingDirectory={home}
ExecStart={venv}/bin/python -m http.server 8000 --bind 127.0.0.1
Restart=on-failure

[Install]
WantedBy=multi-user.target
"""


@dataclass(frozen=True)
class Workspace:
    """A built workspace: the directory repro packs and the venv inside it."""

    size: str
    root: Path
    packages: tuple[str, ...]

    @property
    def venv(self) -> Path:
        return self.root / "venv"

    @property
    def python(self) -> Path:
        return self.venv / "bin" / "python"


def default_cache() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "repro-bench"


def _run(argv: list[str], *, timeout: float, cwd: Path | None = None) -> str:
    try:
        result = subprocess.run(
            argv, capture_output=True, text=True, timeout=timeout, check=False, cwd=cwd
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise ReproError(f"{argv[0]}: {exc}") from exc
    if result.returncode != 0:
        raise ReproError(
            f"{' '.join(argv[:6])} ... failed ({result.returncode}):\n{result.stderr[-2000:]}"
        )
    return result.stdout


def site_packages(python: Path) -> Path:
    code = "import sysconfig; print(sysconfig.get_paths()['purelib'])"
    return Path(_run([str(python), "-c", code], timeout=60).strip())


def _patch(site: Path, package: str = PATCHED_DIST, module: str = "core.py") -> Path:
    """Modify one installed file (and add one), as a hand patch inside site-packages does."""
    target = site / package / module
    target.write_text(target.read_text() + PATCH_LINE)
    (site / package / "serving_policy.py").write_text("STRICT = True\n")
    return target


def _decorate(root: Path, venv: Path) -> None:
    (root / "services").mkdir()
    (root / "services" / "bench-serve.service").write_text(UNIT.format(home=root, venv=venv))
    drafter = root / "drafter"
    drafter.mkdir()
    (drafter / "config.json").write_text(
        json.dumps({"model_type": "llama", "hidden_size": 256, "num_hidden_layers": 2}, indent=2)
    )
    (drafter / "README.md").write_text("# Bench drafter\n\nA model card for the benchmark.\n")
    (root / "bench").mkdir()
    (root / "bench" / "run_bench.sh").write_text("#!/bin/sh\necho 'tokens/s: 1234'\n")
    (root / "repro.toml").write_text('[bundle]\nname = "bench"\n\n[files]\ninclude = ["bench/*"]\n')


def recipe_key(size: str) -> str:
    text = json.dumps([RECIPES[size], PATCH_LINE, sys.version_info[:2], 1])
    return hashlib.sha256(text.encode()).hexdigest()[:12]


def build_workspace(
    size: str, cache: Path, *, say: Callable[[str], None] = lambda _: None
) -> Workspace:
    """The workspace of `size` ('small' or 'full'), built on first use."""
    packages = RECIPES[size]
    root = cache / f"{size}-{recipe_key(size)}"
    marker = root / ".bench-ready"
    workspace = Workspace(size, root, packages)
    if marker.exists():
        return workspace
    say(f"building the {size} environment under {root} (once; cached)")
    shutil.rmtree(root, ignore_errors=True)
    root.mkdir(parents=True)
    _run([sys.executable, "-m", "venv", str(workspace.venv)], timeout=300)
    _run(
        [
            str(workspace.python),
            "-m",
            "pip",
            "install",
            "-q",
            "--disable-pip-version-check",
            *packages,
        ],
        timeout=3600,
    )
    _patch(site_packages(workspace.python))
    _decorate(root, workspace.venv)
    marker.write_text(json.dumps({"packages": packages}))
    return workspace


# Packages whose `__init__.py` the harness patches in a venv it is given (the first found):
# pure Python, and in almost every serving venv
ADOPT_PATCH_CANDIDATES = ("idna", "packaging", "certifi", "urllib3", "requests")


def adopt_workspace(
    venv: Path, cache: Path, *, say: Callable[[str], None] = lambda _: None
) -> Workspace:
    """A workspace around a copy of an existing venv (`python -m bench --venv PATH`): the
    copy is patched and decorated as the built recipes are; the venv given is only read.
    Cached by the venv's path and the time its pyvenv.cfg was written."""
    source = venv.resolve()
    config = source / "pyvenv.cfg"
    if not config.is_file():
        raise ReproError(f"{venv}: not a virtual environment (no pyvenv.cfg)")
    text = json.dumps([str(source), config.stat().st_mtime_ns, PATCH_LINE, 1])
    key = hashlib.sha256(text.encode()).hexdigest()[:12]
    root = cache / f"venv-{key}"
    marker = root / ".bench-ready"
    workspace = Workspace("venv", root, (f"the venv at {source}",))
    if marker.exists():
        return workspace
    say(f"copying {source} into {root} (once; cached)")
    shutil.rmtree(root, ignore_errors=True)
    root.mkdir(parents=True)
    # cp -a: real copies of every file (hard links would share the page cache), links kept
    _run(["cp", "-a", str(source), str(workspace.venv)], timeout=3600)
    site = site_packages(workspace.python)
    for package in ADOPT_PATCH_CANDIDATES:
        if (site / package / "__init__.py").is_file():
            _patch(site, package, "__init__.py")
            break
    else:
        raise ReproError(
            f"{venv}: none of {', '.join(ADOPT_PATCH_CANDIDATES)} is installed: the harness "
            "patches one of them"
        )
    _decorate(root, workspace.venv)
    marker.write_text(json.dumps({"venv": str(source)}))
    return workspace


def tree_bytes(root: Path) -> tuple[int, int]:
    """(regular files, bytes) under root, not following links."""
    files = size = 0
    for directory, _, names in os.walk(root):
        for name in names:
            path = Path(directory) / name
            if path.is_file() and not path.is_symlink():
                files += 1
                size += path.stat().st_size
    return files, size


def scaled_copy(source: Path, destination: Path, copies: int) -> Path:
    """`copies` hard-link-free copies of `source` side by side under `destination`, with one
    combined MANIFEST.sha256: a synthetic bundle `copies` times larger (cached)."""
    marker = destination.with_name(destination.name + ".ready")
    if marker.exists():
        return destination
    shutil.rmtree(destination, ignore_errors=True)
    destination.mkdir(parents=True)
    lines: list[str] = []
    manifest = (source / "MANIFEST.sha256").read_text().splitlines()
    for index in range(copies):
        name = f"copy{index}"
        shutil.copytree(
            source,
            destination / name,
            symlinks=True,
            ignore=lambda directory, names: (
                {"MANIFEST.sha256"} & set(names) if Path(directory) == source else set()
            ),
        )
        for line in manifest:
            digest, _, path = line.partition("  ")
            lines.append(f"{digest}  {name}/{path}")
    (destination / "MANIFEST.sha256").write_text("\n".join(lines) + "\n")
    marker.write_text("")
    return destination
