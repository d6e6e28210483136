"""Real bundles for tests, by how they are made.

- Made by hand (no venv, no pack): `make_bundle_tree`, `archive_tree`; the base that
  hostile and signing tests change one thing in. Real files, a real manifest, a real
  archive.
- Packed from small real workspaces (`make_workspace`, `pack_workspace`): for the
  setup_env.sh and tool-wheel tests; `member_names`, `read_member` read them back.
- Two bundles of one workspace before and after a round of changes
  (`build_bundle_pair`, the session fixture `bundle_pair`), for inspect, diff and the
  exit codes; `tamper` replaces one member of a copy.
"""

from __future__ import annotations

import io
import json
import platform
import subprocess
import sys
import tarfile
import textwrap
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from repro.archive.writer import write_directory
from repro.bundle.info import BundleInfo, SourceInfo, dump_bundle_info
from repro.bundle.manifest import MANIFEST_NAME
from repro.bundle.manifesttree import write_manifest
from repro.bundle.patchset import dump_patchset
from repro.bundle.signing import SIGNATURE_NAME, sign_manifest
from repro.snapshot.pack import PackOptions, PackResult, WheelsMode, pack
from tests.snapshot.conftest import PYTHON_311, make_venv, pip
from tests.support.run import run, run_repro
from tests.support.wheels import build_wheel, pyproject_toml

# --- small bundles made by hand --------------------------------------------------------


NAME = "demo"
VERSION = "1.0"
TOP = f"{NAME}-{VERSION}"
# the smallest valid bundle.toml, as bytes
MINIMAL_BUNDLE_TOML = b"""\
format_version = 1
name = "demo"
version = "1.0"
created = "2026-01-31T12:00:00Z"
tool_version = "0.1.0"

[source]
python = "3.11.7"
implementation = "cpython"
platform = "linux-x86_64"
glibc = "2.36"
"""


def bundle_info() -> BundleInfo:
    return BundleInfo(
        name=NAME,
        version=VERSION,
        created="2026-01-01T00:00:00Z",
        tool_version="0.1.0",
        source=SourceInfo(
            python=platform.python_version(),
            implementation=sys.implementation.name,
            platform=sys.platform,
            glibc="2.36",
        ),
    )


def make_bundle_tree(
    root: Path,
    *,
    files: Mapping[str, bytes] = {},
    manifest: bool = True,
    sign_with: Path | None = None,
) -> Path:
    """A valid bundle directory under `root`; `files` adds or replaces members."""
    tree = root / TOP
    members: dict[str, bytes] = {
        "bundle.toml": dump_bundle_info(bundle_info()),
        "env/requirements.lock": b"six==1.16.0\n",
        "patches/patches.toml": dump_patchset([]),
        "files/notes.txt": b"hello\n",
    }
    members.update(files)
    for rel, data in members.items():
        path = tree / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    if manifest:
        write_manifest(tree)
    if sign_with is not None:
        signature = sign_manifest((tree / MANIFEST_NAME).read_bytes(), sign_with)
        (tree / SIGNATURE_NAME).write_bytes(signature)
    return tree


def archive_tree(tree: Path, out: Path) -> Path:
    with out.open("wb") as stream:
        write_directory(tree, stream, top=tree.name, mtime=0)
    return out


# --- bundles packed from small real workspaces (setup_env.sh, tool wheels) -------------

# A workspace is a directory holding `venv/`, made with a real interpreter (pyenv's 3.12,
# Debian's 3.11) and two real small PyPI packages; it is packed by the real pack, on the
# tool's own interpreter (3.11), into a bundle file.


PACKAGES = ("idna", "six")


def make_workspace(base: Path, python: Path) -> Path:
    """`base`/ws with a venv of `python` holding idna and six."""
    workspace = base / "ws"
    venv = make_venv(python, workspace / "venv")
    pip(venv, "install", "-q", *PACKAGES)
    return workspace


def pack_workspace(
    workspace: Path,
    out: Path,
    *,
    cache: Path,
    wheels: WheelsMode = "auto",
    download: bool = True,
    version: str = "1",
    sign: Path | None = None,
) -> PackResult:
    out.mkdir(parents=True, exist_ok=True)
    result = pack(
        PackOptions(
            source=workspace,
            output=out,
            wheels=wheels,
            download=download,
            cache_dir=cache,
            version=version,
            sign=sign,  # what `repro pack --sign KEY` passes
        )
    )
    assert result.path is not None and result.path.is_file()
    return result


def member_names(bundle: Path) -> list[str]:
    with tarfile.open(bundle) as archive:
        return sorted(m.name for m in archive.getmembers() if m.isfile())


def read_member(bundle: Path, name: str) -> bytes:
    with tarfile.open(bundle) as archive:
        handle = archive.extractfile(name)
        assert handle is not None, name
        return handle.read()


# --- two bundles of one workspace, before and after a round of changes ----------------

# Two real bundles of one workspace, packed before and after a round of changes.
#
# The workspace holds a Python 3.11 venv with real PyPI packages and a local wheel that
# only the vault can serve, hand patches inside site-packages, a systemd unit, a drafter
# config and a bench directory. Bundle A is packed; then the workspace changes in every
# way `repro diff` reports (a package upgraded, one downgraded, one added, one removed,
# the local wheel replaced, a patch changed, one added and one removed, the unit, the
# drafter config and a bench result edited) and bundle B is packed with NCCL_DEBUG set in
# the pack's environment. The venv is left in B's state, for the live-environment tests.
#
# Built once per test session.


REPO_ROOT = Path(__file__).resolve().parents[2]
ENV_VAR = "NCCL_DEBUG"
ENV_VALUE = "INFO"


@dataclass(frozen=True)
class BundlePair:
    workspace: Path
    venv_python: Path
    a: Path  # archives
    b: Path
    a_dir: Path  # A extracted with GNU tar
    b_dir: Path
    drafter_config_a: bytes
    unit_a: str


def run_cli(
    *args: str, input: bytes | None = None, env_extra: dict[str, str] | None = None
) -> subprocess.CompletedProcess[bytes]:
    """The real CLI in a subprocess, with NCCL_DEBUG only where a test sets it."""
    return run_repro(*args, input=input, env={ENV_VAR: None, **(env_extra or {})})


def _local_wheel(base: Path, version: str) -> Path:
    project = base / f"vaultpkg-{version}"
    (project / "vaultpkg").mkdir(parents=True)
    (project / "vaultpkg" / "__init__.py").write_text(f'VERSION = "{version}"\n')
    (project / "pyproject.toml").write_text(pyproject_toml("vaultpkg", version, ["vaultpkg"]))
    out = base / "dist"
    out.mkdir(parents=True, exist_ok=True)
    return build_wheel(project, out)


def _append(path: Path, text: str) -> None:
    path.write_text(path.read_text() + text)


def _unit(workspace: Path, port: int) -> str:
    return textwrap.dedent(
        f"""\
        [Unit]
        Description=model server

        [Service]
        ExecStart={workspace}/venv/bin/python -m http.server {port}
        Restart=on-failure
        """
    )


def _pack(workspace: Path, out: Path, version: str, env_extra: dict[str, str]) -> Path:
    result = run_cli(
        "pack", str(workspace), "-o", f"{out}/", "--version", version, env_extra=env_extra
    )
    if result.returncode != 0:
        raise AssertionError(f"repro pack failed:\n{result.stderr.decode()}")
    return out / f"demo-{version}.tar"


def _extract(archive: Path, into: Path) -> Path:
    into.mkdir()
    run(["tar", "-xf", str(archive), "-C", str(into)])
    (top,) = into.iterdir()
    return top


def build_bundle_pair(base: Path) -> BundlePair:
    """Bundles A and B of one workspace (see the section's comment); the session fixture
    `bundle_pair` of tests/conftest.py builds them once."""
    workspace = base / "ws"
    for sub in ("services", "drafter", "bench"):
        (workspace / sub).mkdir(parents=True)
    venv = make_venv(PYTHON_311, workspace / "venv")
    site = venv.site_packages
    wheel_a = _local_wheel(base / "wheels", "1.0+local")
    wheel_b = _local_wheel(base / "wheels", "1.1+local")
    pip(venv, "install", "-q", "six==1.16.0", "idna==3.6", "tomli==2.0.1", "attrs==23.2.0")
    pip(venv, "install", "-q", str(wheel_a))
    _append(site / "idna" / "core.py", "# local tweak A\n")
    _append(site / "tomli" / "_parser.py", "# tomli tweak\n")
    unit_a = _unit(workspace, 30000)
    (workspace / "services" / "model.service").write_text(unit_a)
    config_a = json.dumps({"architectures": ["LlamaForCausalLM"], "hidden_size": 64}).encode()
    (workspace / "drafter" / "config.json").write_bytes(config_a)
    (workspace / "drafter" / "README.md").write_text("# tiny drafter\n")
    (workspace / "bench" / "run.sh").write_text("#!/bin/sh\necho bench\n")
    (workspace / "bench" / "results.json").write_text('{"tokens_per_s": 100}\n')
    (workspace / "repro.toml").write_text(
        '[bundle]\nname = "demo"\n\n[env]\nvenv = "venv"\n\n[files]\ninclude = ["bench/*"]\n'
    )
    out = base / "bundles"
    a = _pack(workspace, out, "1", {})

    pip(venv, "install", "-q", "six==1.17.0", "attrs==23.1.0", "iniconfig==2.0.0", str(wheel_b))
    pip(venv, "uninstall", "-q", "-y", "tomli")
    core = site / "idna" / "core.py"
    core.write_text(core.read_text().replace("# local tweak A\n", "# local tweak B\n"))
    _append(site / "six.py", "# six tweak\n")
    (workspace / "services" / "model.service").write_text(_unit(workspace, 30001))
    config_b = json.dumps({"architectures": ["LlamaForCausalLM"], "hidden_size": 128})
    (workspace / "drafter" / "config.json").write_text(config_b)
    (workspace / "bench" / "results.json").write_text('{"tokens_per_s": 140}\n')
    b = _pack(workspace, out, "2", {ENV_VAR: ENV_VALUE})
    return BundlePair(
        workspace=workspace,
        venv_python=venv.python,
        a=a,
        b=b,
        a_dir=_extract(a, base / "a-dir"),
        b_dir=_extract(b, base / "b-dir"),
        drafter_config_a=config_a,
        unit_a=unit_a,
    )


def tamper(archive: Path, out: Path, rel: str, content: bytes) -> Path:
    """A copy of `archive` with member `rel` (below the top directory) replaced, every
    other member and the manifest kept as they were and in the same order."""
    with tarfile.open(archive) as source, tarfile.open(out, "w", format=tarfile.PAX_FORMAT) as dest:
        for member in source.getmembers():
            data = source.extractfile(member) if member.isfile() else None
            if member.name.split("/", 1)[-1] == rel:
                member.size = len(content)
                dest.addfile(member, io.BytesIO(content))
            else:
                dest.addfile(member, data)
    return out
