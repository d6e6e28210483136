"""`repro unpack` end to end, through the real CLI: real bundles from `repro pack`,
real venvs, real installs from PyPI and from a wheel vault, real kills.

The only test doubles are the ones this machine forces: an `nvidia-smi` script (there
is no GPU here) and a small HTTP server that drops a connection on purpose.
"""

from __future__ import annotations

import base64
import errno
import hashlib
import io
import json
import os
import shutil
import signal
import subprocess
import sys
import tarfile
import time
import zipfile
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import tomli_w

from repro._toml import loads as toml_loads
from repro.bundle.manifesttree import write_manifest
from tests.conftest import REPO_ROOT, unpacked_venv
from tests.support.doubles.nvidia_smi import fake_nvidia_smi
from tests.support.httpfiles import Version, file_server
from tests.support.run import run, run_repro
from tests.support.venvs import find_python

pytestmark = pytest.mark.slow

LOCAL = "reprolocal"
LOCAL_VERSION = "0.1.0"
PINS = {"six": "1.16.0", "idna": "3.7", LOCAL: LOCAL_VERSION}
# A dead proxy: any attempt to reach an index through it fails at once, and loudly.
DEAD_PROXY = "http://127.0.0.1:9"
NO_NETWORK = {
    "http_proxy": DEAD_PROXY,
    "https_proxy": DEAD_PROXY,
    "HTTP_PROXY": DEAD_PROXY,
    "HTTPS_PROXY": DEAD_PROXY,
    "ALL_PROXY": DEAD_PROXY,
    "NO_PROXY": "",
    "no_proxy": "",
}


# --- building the source workspace and its bundles ------------------------------------


def _record_hash(data: bytes) -> str:
    return base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def build_local_wheel(directory: Path, extra: Mapping[str, bytes] | None = None) -> Path:
    """A real wheel no index serves, with a console script, so `pack` vaults it;
    `extra`: more files (path in the wheel -> bytes), listed in its RECORD."""
    info = f"{LOCAL}-{LOCAL_VERSION}.dist-info"
    files = {
        **(extra or {}),
        f"{LOCAL}/__init__.py": b"def main():\n    print('reprolocal ok')\n    return 0\n",
        f"{info}/METADATA": (
            f"Metadata-Version: 2.1\nName: {LOCAL}\nVersion: {LOCAL_VERSION}\n".encode()
        ),
        f"{info}/WHEEL": b"Wheel-Version: 1.0\nGenerator: tests\nRoot-Is-Purelib: true\n"
        b"Tag: py3-none-any\n",
        f"{info}/entry_points.txt": f"[console_scripts]\n{LOCAL} = {LOCAL}:main\n".encode(),
    }
    record = "".join(f"{p},sha256={_record_hash(d)},{len(d)}\n" for p, d in files.items())
    files[f"{info}/RECORD"] = (record + f"{info}/RECORD,,\n").encode()
    directory.mkdir(parents=True, exist_ok=True)
    wheel = directory / f"{LOCAL}-{LOCAL_VERSION}-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        for path, data in files.items():
            archive.writestr(zipfile.ZipInfo(path, (2020, 1, 1, 0, 0, 0)), data)
    return wheel


def site_packages(venv: Path) -> Path:
    script = "import sysconfig; print(sysconfig.get_paths()['purelib'])"
    return Path(run([str(venv / "bin" / "python"), "-I", "-c", script]).strip())


def build_workspace(root: Path, python: Path, requirements: list[str]) -> Path:
    """A workspace whose venv holds small PyPI packages, one modified file (six.py)
    and, when idna is there, one added file."""
    venv = root / ".venv"
    run([str(python), "-m", "venv", str(venv)])
    run([str(venv / "bin" / "python"), "-m", "pip", "install", "-q", *requirements])
    site = site_packages(venv)
    six = site / "six.py"
    text = six.read_text()
    assert '__version__ = "1.16.0"\n' in text
    six.write_text(
        text.replace('__version__ = "1.16.0"\n', '__version__ = "1.16.0"\nPATCHED = 1\n')
    )
    if (site / "idna").is_dir():
        (site / "idna" / "repro_added.py").write_text("ADDED = True\n")
    return root


def pack(workspace: Path, out: Path, version: str, *extra: str) -> Path:
    result = run_repro(
        "pack", str(workspace), "-o", f"{out}/", "--name", "demo", "--version", version, *extra
    )
    assert result.returncode == 0, result.stderr.decode()
    bundle = out / f"demo-{version}.tar"
    assert bundle.is_file()
    return bundle


@dataclass(frozen=True)
class Bundles:
    root: Path
    default: Path  # demo 1: the local wheel in the vault, the rest from PyPI
    all_wheels: Path  # demo 2: --wheels all


@pytest.fixture(scope="session")
def bundles(tmp_path_factory: pytest.TempPathFactory) -> Bundles:
    root = tmp_path_factory.mktemp("unpack")
    wheel = build_local_wheel(root / "localwheel")
    workspace = build_workspace(
        root / "ws", find_python("3.11"), ["six==1.16.0", "idna==3.7", str(wheel)]
    )
    out = root / "bundles"
    return Bundles(
        root,
        pack(workspace, out, "1"),
        pack(workspace, out, "2", "--wheels", "all"),
    )


@pytest.fixture(scope="session")
def bundle_py312(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("unpack312")
    workspace = build_workspace(root / "ws312", find_python("3.12"), ["six==1.16.0"])
    return pack(workspace, root / "bundles", "12")


def extract(bundle: Path, dest: Path) -> Path:
    with tarfile.open(bundle) as archive:
        archive.extractall(dest, filter="data")
    (top,) = [p for p in dest.iterdir() if p.is_dir()]
    return top


@pytest.fixture(scope="session")
def bundle_dir(bundles: Bundles, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return extract(bundles.default, tmp_path_factory.mktemp("extracted"))


# --- looking at a target --------------------------------------------------------------


def unpack(
    bundle: Path | str, target: Path, *args: str, **kw: Any
) -> subprocess.CompletedProcess[bytes]:
    return run_repro("unpack", str(bundle), "--target", str(target), *args, **kw)


def ok(result: subprocess.CompletedProcess[bytes]) -> str:
    assert result.returncode == 0, result.stderr.decode()
    return result.stderr.decode()


def installed(target: Path) -> dict[str, str]:
    script = (
        "import json, importlib.metadata as m; "
        "print(json.dumps({d.metadata['Name'].lower(): d.version for d in m.distributions()}))"
    )
    data: dict[str, str] = json.loads(
        run([str(unpacked_venv(target) / "bin" / "python"), "-I", "-c", script])
    )
    return data


def bundle_member(bundle: Path, suffix: str) -> str:
    with tarfile.open(bundle) as archive:
        member = next(m for m in archive.getmembers() if m.name.endswith(suffix))
        stream = archive.extractfile(member)
        assert stream is not None
        return stream.read().decode()


def patch_entries(bundle: Path) -> list[dict[str, Any]]:
    entries: list[dict[str, Any]] = toml_loads(bundle_member(bundle, "patches/patches.toml"))[
        "files"
    ]
    return entries


def locked_pins(bundle: Path) -> dict[str, str]:
    lines = bundle_member(bundle, "env/requirements.lock").splitlines()
    pins = [line.split(";")[0].split()[0] for line in lines if "==" in line and line[0] != "#"]
    return {name.lower(): version for name, version in (p.split("==") for p in pins)}


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def assert_round_trip(target: Path, bundle: Path) -> dict[str, Any]:
    """Every pin at its version, every patch applied, the report saved."""
    pins = locked_pins(bundle)
    assert set(pins) >= {"six"}
    assert {name: installed(target).get(name) for name in pins} == pins
    site = site_packages(unpacked_venv(target))
    entries = patch_entries(bundle)
    assert {e["path"] for e in entries} >= {"six.py"}
    for entry in entries:
        assert sha256(site / entry["path"]) == entry["patched_sha256"], entry["path"]
    report: dict[str, Any] = json.loads((target / ".repro" / "unpack-report.json").read_text())
    assert report["target"] == str(target.resolve())
    return report


def mtimes(target: Path) -> dict[str, int]:
    # A run's own bookkeeping: its lock (holds the pid) and its report (of the latest run).
    skip = {".repro", ".repro/unpack.lock", ".repro/unpack-report.json"}
    return {
        p.relative_to(target).as_posix(): p.lstat().st_mtime_ns
        for p in target.rglob("*")
        if p.relative_to(target).as_posix() not in skip
    }


def state(target: Path) -> dict[str, Any]:
    return toml_loads((target / ".repro" / "state.toml").read_text())


@pytest.fixture(scope="session")
def online(bundles: Bundles, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """demo 1 unpacked from PyPI (plus its vault) with each installer."""
    root = tmp_path_factory.mktemp("online")
    targets = {}
    for installer in ("uv", "pip"):
        target = root / installer
        ok(unpack(bundles.default, target, "--cpu", "--no-smoke", "--installer", installer))
        targets[installer] = target
    return targets


# --- round trips ------------------------------------------------------------------------


@pytest.mark.parametrize("installer", ["uv", "pip"])
def test_online_install_pins_every_dist_and_applies_patches(
    online: dict[str, Path], bundles: Bundles, installer: str
) -> None:
    target = online[installer]
    report = assert_round_trip(target, bundles.default)
    assert locked_pins(bundles.default).items() >= PINS.items()
    assert report["changed"] is True
    assert [s["name"] for s in report["steps"]] == [
        "verify",
        "preflight",
        "venv",
        "install",
        "kernels",
        "patch",
        "workspace",
        "caches",
        "services",
        "models",
        "smoke",
    ]
    # What the venv's own seeding put in site-packages that runs at startup: the baseline
    # of a --no-exec rerun (setuptools' .pth, seeded by `python -m venv` on 3.11).
    seeded = [] if installer == "uv" else ["lib/python3.11/site-packages/distutils-precedence.pth"]
    facts = dict(report["steps"][2]["facts"])
    made = facts.pop("made")  # what the venv step made (repro.install.venv.guard)
    assert facts == {"installer": installer, "startup_files": seeded}
    assert made["pyvenv.cfg"].startswith("file sha256 ") and "bin/python" in made
    assert sorted(report["patches"]["written"]) == ["idna/repro_added.py", "six.py"]
    # The local wheel came from the vault, console script included.
    assert run([str(unpacked_venv(target) / "bin" / LOCAL)]).strip() == "reprolocal ok"
    assert state(target)["done"] == [
        "preflight",
        "venv",
        "install",
        "kernels",
        "patch",
        "workspace",
        "caches",
        "services",
        "models",
    ]


@pytest.mark.parametrize("installer", ["uv", "pip"])
def test_offline_install_from_the_vault_uses_no_network(
    bundles: Bundles, tmp_path: Path, installer: str
) -> None:
    target = tmp_path / "offline"
    args = ("--cpu", "--no-smoke", "--offline", "--installer", installer)
    ok(unpack(bundles.all_wheels, target, *args, env=NO_NETWORK))
    assert_round_trip(target, bundles.all_wheels)
    assert locked_pins(bundles.all_wheels).items() >= PINS.items()


def test_the_kept_bundle_holds_no_second_copy_of_the_vault(
    bundles: Bundles, tmp_path: Path
) -> None:
    """Once installed, the vault's wheels leave TARGET/.repro/bundle (the venv holds
    them); verify and unpatch read the rest. An install that must run again (its step
    forgotten, as a kill after the wheels were written but before the step was recorded
    leaves it) gets the wheels back from the verified bundle, offline. --keep-bundle
    keeps them, and the kept bundle then passes `repro check` whole."""
    from repro.install.state import load_state

    target = tmp_path / "t"
    args = ("--cpu", "--no-smoke", "--offline")
    err = ok(unpack(bundles.all_wheels, target, *args, env=NO_NETWORK))
    kept = target / ".repro" / "bundle"
    assert not (kept / "env" / "wheels").exists()
    assert not list((kept / "env").glob(".wheels*"))
    assert (kept / "env" / "requirements.lock").is_file() and (kept / "patches").is_dir()
    # each wheel left as the vault installer unpacked it: none is left to remove after
    assert "the vault's wheels unpacked by repro" in " ".join(err.split())
    assert "removed install:" not in err
    for command in ("verify", "unpatch"):
        proc = run_repro(command, str(target))
        assert proc.returncode == 0, proc.stderr.decode()
    manifest = str(kept / "MANIFEST.sha256")
    proc = run_repro("check", manifest)
    assert proc.returncode == 1 and "env/wheels/" in proc.stdout.decode(), proc.stderr.decode()
    proc = run_repro("check", "--ignore-missing", manifest)
    assert proc.returncode == 0, proc.stderr.decode()

    state = load_state(target)
    assert state is not None
    state.forget("install")
    ok(unpack(bundles.all_wheels, target, *args, env=NO_NETWORK))
    assert not (kept / "env" / "wheels").exists()
    assert_round_trip(target, bundles.all_wheels)

    whole = tmp_path / "whole"
    ok(unpack(bundles.all_wheels, whole, *args, "--keep-bundle", env=NO_NETWORK))
    vault = whole / ".repro" / "bundle" / "env" / "wheels"
    assert sorted(p.name for p in vault.iterdir()) == sorted(
        p.name for p in (extract(bundles.all_wheels, tmp_path / "x") / "env" / "wheels").iterdir()
    )
    proc = run_repro("check", str(whole / ".repro" / "bundle" / "MANIFEST.sha256"))
    assert proc.returncode == 0, proc.stderr.decode()


def test_the_dead_proxy_does_block_an_online_install(bundles: Bundles, tmp_path: Path) -> None:
    """The control for the offline test: without --offline, the same environment fails
    at the first attempt to reach an index (uv resolving the lock against PyPI)."""
    target = tmp_path / "online"
    result = unpack(
        bundles.all_wheels, target, "--cpu", "--no-smoke", "--installer", "uv", env=NO_NETWORK
    )
    assert result.returncode == 3, result.stderr.decode()
    err = result.stderr.decode()
    assert "uv pip sync failed" in err and "pypi.org" in err
    report = json.loads((target / ".repro" / "unpack-report.json").read_text())
    assert report["steps"][-1]["name"] == "install"
    assert report["steps"][-1]["status"] == "failed"


def test_second_run_changes_nothing_and_says_so(online: dict[str, Path], bundles: Bundles) -> None:
    target = online["uv"]
    before = mtimes(target)
    result = unpack(bundles.default, target, "--cpu", "--no-smoke", "--json")
    assert "nothing to do" not in ok(result)  # --json: the report says it
    report = json.loads(result.stdout)
    assert report["changed"] is False
    assert {s["status"] for s in report["steps"][1:-1]} == {"already done"}
    assert mtimes(target) == before
    saved = json.loads((target / ".repro" / "unpack-report.json").read_text())
    assert saved["changed"] is False
    plain = unpack(bundles.default, target, "--cpu", "--no-smoke")
    ok(plain)
    assert "nothing to do" in plain.stdout.decode()  # the result: stdout
    assert mtimes(target) == before


def test_another_version_plans_an_upgrade_and_replace_rebuilds(
    online: dict[str, Path], bundles: Bundles, tmp_path: Path
) -> None:
    """Another version of the same bundle upgrades in place (tests/install/test_upgrade.py);
    its dry run plans that and writes nothing; --replace rebuilds the target instead."""
    target = tmp_path / "t"
    shutil.copytree(online["pip"], target, symlinks=True)
    before = mtimes(target)
    planned = unpack(bundles.all_wheels, target, "--cpu", "--offline", "--dry-run")
    assert "would upgrade in place" in ok(planned) + planned.stdout.decode()
    assert mtimes(target) == before
    # A dry run with --replace plans only: the other bundle's target is still whole.
    ok(unpack(bundles.all_wheels, target, "--cpu", "--offline", "--replace", "--dry-run"))
    assert mtimes(target) == before
    ok(unpack(bundles.all_wheels, target, "--cpu", "--no-smoke", "--offline", "--replace"))
    assert state(target)["bundle"]["version"] == "2"
    assert_round_trip(target, bundles.all_wheels)


def test_smoke_step_is_run_and_recorded(
    online: dict[str, Path], bundles: Bundles, tmp_path: Path
) -> None:
    """After a --no-smoke run, a run without it runs the ladder and records the outcome.

    The outcome is known, so it is the one asserted: demo 1 holds no torch, triton or
    engine and --cpu asks for no GPU, so the python rung passes, the engine rung verifies
    the two patched files (six.py changed, idna/repro_added.py added) and the rest skip,
    each with its reason. That is a pass (exit 0), recorded as done; a failing rung here
    is a regression, not the other accepted outcome it once was."""
    target = tmp_path / "t"
    shutil.copytree(online["uv"], target, symlinks=True)
    result = unpack(bundles.default, target, "--cpu")
    assert result.returncode == 0, result.stderr.decode()
    report = json.loads((target / ".repro" / "unpack-report.json").read_text())
    smoke_step = report["steps"][-1]
    assert smoke_step["name"] == "smoke"
    assert smoke_step["status"] == "done"
    assert "smoke" in state(target)["done"]
    rungs = {r["name"]: (r["status"], r["summary"]) for r in report["smoke"]["ladder"]["rungs"]}
    assert list(rungs) == ["python", "torch", "triton", "kernels", "nccl", "engine", "server"]
    assert rungs["python"][0] == "pass"
    assert rungs["engine"] == ("pass", "2 patched file(s) verified")
    assert rungs["torch"] == ("skip", "torch is not installed in this environment")
    assert {rungs[name][0] for name in ("triton", "kernels", "nccl", "server")} == {"skip"}
    assert report["smoke"]["summary"].startswith("python, engine passed; torch skipped")


def test_py312_bundle_builds_its_venv_with_python_312(bundle_py312: Path, tmp_path: Path) -> None:
    python = find_python("3.12")
    target = tmp_path / "t312"
    ok(unpack(bundle_py312, target, "--cpu", "--no-smoke", "--python", str(python)))
    version = run(
        [str(unpacked_venv(target) / "bin" / "python"), "-c", "import sys; print(sys.version)"]
    )
    assert version.startswith("3.12.")
    assert installed(target)["six"] == "1.16.0"
    assert_round_trip(target, bundle_py312)


def test_py312_bundle_without_312_on_path_fails_clearly(bundle_py312: Path, tmp_path: Path) -> None:
    target = tmp_path / "t312"
    path = os.pathsep.join(p for p in ("/usr/bin", "/bin") if Path(p).is_dir())
    assert not any((Path(p) / "python3.12").exists() for p in path.split(os.pathsep))
    result = unpack(bundle_py312, target, "--cpu", "--no-smoke", env={"PATH": path})
    assert result.returncode == 1
    err = result.stderr.decode()
    assert "no Python 3.12 interpreter found" in err
    assert "--python" in err
    assert "Traceback" not in err
    assert not target.exists()


# --- patches on a drifted or conflicting target -----------------------------------------


def test_drifted_target_is_patched_through_its_diff_and_conflicts_touch_nothing(
    online: dict[str, Path], bundles: Bundles, tmp_path: Path
) -> None:
    target = tmp_path / "t"
    shutil.copytree(online["uv"], target, symlinks=True)
    site = site_packages(unpacked_venv(target))
    entries = {e["path"]: e for e in patch_entries(bundles.default)}

    ok(run_repro("unpatch", str(target)))
    assert sha256(site / "six.py") == entries["six.py"]["pristine_sha256"]
    assert not (site / "idna" / "repro_added.py").exists()
    assert "patch" not in state(target)["done"]

    # Drift: a local edit far from the patch's hunk. The diff still applies, exactly.
    drifted = (site / "six.py").read_text() + "LOCAL_EDIT = 1\n"
    (site / "six.py").write_text(drifted)
    result = unpack(bundles.default, target, "--cpu", "--no-smoke", "--json")
    ok(result)
    patches = json.loads(result.stdout)["patches"]
    assert patches["via_diff"] == ["six.py"]
    assert sorted(patches["written"]) == ["idna/repro_added.py", "six.py"]
    text = (site / "six.py").read_text()
    assert "PATCHED = 1\n" in text and text.endswith("LOCAL_EDIT = 1\n")
    assert (
        sha256(site / "idna" / "repro_added.py") == entries["idna/repro_added.py"]["patched_sha256"]
    )

    # Conflicts: the patched line edited, and the added file present with other content.
    restored = run_repro("unpatch", str(target))
    ok(restored)
    assert restored.stdout.decode().splitlines() == [
        "restored idna/repro_added.py",
        "restored six.py",
    ]
    # Again: nothing is patched now, which is no failure
    again = run_repro("unpatch", str(target))
    ok(again)
    assert again.stdout.decode() == f"{target}: nothing was patched; nothing to restore\n"
    assert (site / "six.py").read_text() == drifted
    (site / "six.py").write_text(drifted.replace('__version__ = "1.16.0"', '__version__ = "x"'))
    (site / "idna" / "repro_added.py").write_text("MINE = True\n")
    before = {p: sha256(p) for p in site.rglob("*") if p.is_file()}
    result = unpack(bundles.default, target, "--cpu", "--no-smoke")
    assert result.returncode == 4, result.stderr.decode()
    err = result.stderr.decode()
    assert "2 patch conflict(s)" in err and "nothing was written" in err
    assert "six 1.16.0: six.py" in err
    assert "idna 3.7: idna/repro_added.py" in err
    assert entries["six.py"]["pristine_sha256"] in err
    assert {p: sha256(p) for p in site.rglob("*") if p.is_file()} == before
    assert "patch" not in state(target)["done"]
    report = json.loads((target / ".repro" / "unpack-report.json").read_text())
    assert report["steps"][-1] == {
        "name": "patch",
        "status": "failed",
        "detail": report["steps"][-1]["detail"],
        "facts": {},
    }


# --- killed and resumed -----------------------------------------------------------------


def _commands_naming(text: str) -> list[str]:
    """Command lines of the processes that name `text` (the installers run in a process
    group of their own, tethered to repro's)."""
    commands = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            command = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        if text in command:
            commands.append(command)
    return commands


def test_run_killed_mid_install_resumes_to_the_same_state(
    online: dict[str, Path], bundles: Bundles, tmp_path: Path
) -> None:
    target = tmp_path / "killed"
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    argv = [sys.executable, "-m", "repro", "unpack", str(bundles.default), "--target", str(target)]
    argv += ["--cpu", "--no-smoke", "--installer", "pip"]
    proc = subprocess.Popen(
        argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True
    )
    seen = ""
    deadline = time.monotonic() + 120
    try:
        while time.monotonic() < deadline and proc.poll() is None:
            installing = [c for c in _commands_naming(str(target)) if " pip install" in c]
            if installing:
                seen = installing[0]
                break
            time.sleep(0.02)
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=60)
    assert seen, f"the installer never ran: {proc.stderr.read().decode() if proc.stderr else ''}"
    if proc.stderr is not None:
        proc.stderr.close()
    done = state(target)["done"]
    assert "venv" in done and "install" not in done
    # The verified bundle was moved into the target before the install began, so the
    # killed run leaves no staging copy beside it.
    assert (target / ".repro" / "bundle" / "bundle.toml").is_file()
    assert not list(tmp_path.glob(".repro-unpack-*"))

    result = unpack(bundles.default, target, "--cpu", "--no-smoke", "--installer", "pip", "--json")
    ok(result)
    steps = {s["name"]: s["status"] for s in json.loads(result.stdout)["steps"]}
    # The install was cut short: its venv is rebuilt from nothing, then installed into.
    assert steps["venv"] == "done" and steps["install"] == "done"
    assert installed(target) == installed(online["pip"])
    assert_round_trip(target, bundles.default)
    assert state(target)["done"] == state(online["pip"])["done"]
    assert not list(tmp_path.glob(".repro-unpack-*"))


# --- verify before touching, dry run ----------------------------------------------------


def test_tampered_bundle_is_refused_before_anything_is_created(
    bundles: Bundles, tmp_path: Path
) -> None:
    """Same members, same manifest, one byte of one file changed: a valid tar that lies."""
    tampered = tmp_path / "demo-1.tar"
    with (
        tarfile.open(bundles.default) as source,
        tarfile.open(tampered, "w", format=tarfile.PAX_FORMAT) as out,
    ):
        for member in source.getmembers():
            stream = source.extractfile(member) if member.isfile() else None
            data = stream.read() if stream is not None else None
            if data is not None and member.name.endswith("patches/full/six/six.py"):
                data = data.replace(b"PATCHED = 1", b"PATCHED = 2")
                assert len(data) == member.size
            out.addfile(member, io.BytesIO(data) if data is not None else None)
    parent = tmp_path / "targets"
    parent.mkdir()
    target = parent / "t"
    result = unpack(tampered, target, "--cpu", "--no-smoke")
    assert result.returncode == 1, result.stderr.decode()
    err = result.stderr.decode()
    assert "does not verify" in err and "mismatched: patches/full/six/six.py" in err
    assert not target.exists()
    assert list(parent.iterdir()) == []
    assert not list(tmp_path.glob(".repro-unpack-*"))


EDIT_DURING_PREFLIGHT = """
import hashlib, pathlib, sys
# TEST DOUBLE of nvidia-smi (no GPU on this machine). Called by the preflight, after the
# bundle directory verified: it changes the directory as anyone who can write to it
# could, the patched six.py and, so that they agree, its patched_sha256 in patches.toml;
# then it answers as the real tool does on a box without GPUs.
bundle = pathlib.Path({bundle!r})
full = bundle / "patches" / "full" / "six" / "six.py"
old = full.read_bytes()
if b"PATCHED = 1\\n" in old:
    new = old.replace(b"PATCHED = 1\\n", b"PATCHED = 'edited after verification'\\n")
    full.write_bytes(new)
    toml = bundle / "patches" / "patches.toml"
    digests = hashlib.sha256(old).hexdigest(), hashlib.sha256(new).hexdigest()
    toml.write_text(toml.read_text().replace(*digests))
    (bundle.parent / "edited").write_text("yes")
print("No devices were found")
sys.exit(6)
"""


def test_a_directory_bundle_edited_during_preflight_installs_what_was_verified(
    bundles: Bundles, tmp_path: Path
) -> None:
    """`repro unpack DIR/` verifies DIR, then the preflight runs; an edit made to DIR in
    between must not reach the target: the directory is copied into staging, hashed
    while copied, and every later step reads that verified copy."""
    directory = extract(bundles.all_wheels, tmp_path / "dir")
    double = tmp_path / "double"
    double.mkdir()
    script = double / "nvidia-smi"
    script.write_text(f"#!{sys.executable}\n" + EDIT_DURING_PREFLIGHT.format(bundle=str(directory)))
    script.chmod(0o755)
    target = tmp_path / "t"
    result = unpack(
        directory,
        target,
        "--cpu",
        "--no-smoke",
        "--offline",
        env={"PATH": f"{double}{os.pathsep}{os.environ['PATH']}", **NO_NETWORK},
    )
    ok(result)
    # the edit really happened, between verification and use
    assert (tmp_path / "dir" / "edited").read_text() == "yes"
    assert b"edited after verification" in (directory / "patches/full/six/six.py").read_bytes()
    installed_six = (site_packages(unpacked_venv(target)) / "six.py").read_text()
    assert "PATCHED = 1\n" in installed_six
    assert "edited after verification" not in installed_six
    kept = target / ".repro" / "bundle"
    assert b"edited after verification" not in (kept / "patches/full/six/six.py").read_bytes()
    assert_round_trip(target, bundles.all_wheels)
    assert not list(tmp_path.glob(".repro-unpack-*"))


def test_a_directory_bundle_holding_a_link_is_refused_naming_it(
    bundle_dir: Path, tmp_path: Path
) -> None:
    """A bundle holds only directories and regular files (the archive reader refuses
    the rest): a directory bundle with a link to a file outside, or a FIFO, is refused
    naming each, before anything is created; the link is never read."""
    directory = tmp_path / "dir" / bundle_dir.name
    shutil.copytree(bundle_dir, directory)
    outside = tmp_path / "outside.txt"
    outside.write_text("outside\n")
    (directory / "files").mkdir(exist_ok=True)
    (directory / "files" / "leak.txt").symlink_to(outside)
    os.mkfifo(directory / "files" / "queue")
    parent = tmp_path / "targets"
    parent.mkdir()
    result = unpack(directory, parent / "t", "--cpu", "--no-smoke", timeout=120)
    assert result.returncode == 1, result.stderr.decode()
    err = result.stderr.decode()
    assert "holds what a bundle never holds" in err
    assert "files/leak.txt: a symbolic link" in err and "files/queue: a FIFO" in err
    assert "Traceback" not in err
    assert list(parent.iterdir()) == []
    assert not list(parent.glob(".repro-unpack-*"))


def test_a_directory_bundle_unpacked_from_inside_itself(bundle_dir: Path, tmp_path: Path) -> None:
    """`cd DIR && repro unpack . --target t`: the staging copy goes beside the target,
    inside DIR; the copy must not copy itself (it would nest until the name limit)."""
    directory = tmp_path / bundle_dir.name
    shutil.copytree(bundle_dir, directory)
    result = run_repro(
        "unpack", ".", "--target", "t", "--cpu", "--dry-run", cwd=directory, timeout=300
    )
    ok(result)
    assert "dry run, nothing was created" in result.stdout.decode()
    assert not list(directory.glob(".repro-unpack-*")) and not (directory / "t").exists()


def _report_path_that_cannot_be_written(target: Path) -> Path:
    """The report's path taken by a directory: writing the report fails for real
    (EISDIR), as it does on a full disk, while the rest of .repro/ stays writable."""
    report = target / ".repro" / "unpack-report.json"
    report.mkdir(parents=True)
    (report / "keep").write_text("")
    return report


def test_the_installer_error_survives_a_report_that_cannot_be_written(
    bundles: Bundles, tmp_path: Path
) -> None:
    """On a full disk the installer fails, then so does the report write: the user must
    see the install error (exit 3, the installer's words), with the report's failure
    after it, not an exit 1 about the report. Both failures are real here: --offline
    with demo 1, whose vault holds only the local wheel (six and idna cannot be found),
    and a report path that is a directory."""
    target = tmp_path / "t"
    report = _report_path_that_cannot_be_written(target)
    result = unpack(bundles.default, target, "--cpu", "--no-smoke", "--offline", env=NO_NETWORK)
    err = result.stderr.decode()
    assert result.returncode == 3, err
    assert "Traceback" not in err
    message = err.split("repro: error: ", 1)[1]
    assert message.startswith("uv pip sync failed (exit") or message.startswith("pip-sync"), err
    assert "was not found" in message  # the installer's own words name what it lacks
    assert f"(the report {report.resolve()} could not be written either: Is a directory)" in message
    assert "install" not in state(target)["done"]


def test_a_full_disk_mid_step_is_an_install_error_naming_the_step(
    bundles: Bundles, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """ENOSPC raised in repro's own code during a step (not by the installer) is an
    install failure too: exit 3 naming the step and the cause, with the report's own
    failure mentioned. Library level: a full disk cannot be made here without root, so
    a TEST DOUBLE of `create_venv` raises ENOSPC as Python does on a full disk; the
    report write fails for real (its path is a directory)."""
    from repro.errors import InstallError
    from repro.install import stages
    from repro.install import unpack as unpack_module

    target = tmp_path / "t"
    report = _report_path_that_cannot_be_written(target)

    def full_disk(python: Path, venv: Path, installer: str) -> None:  # TEST DOUBLE
        raise OSError(errno.ENOSPC, "No space left on device", str(venv / "bin" / "python"))

    monkeypatch.setattr(stages, "create_venv", full_disk)
    options = unpack_module.UnpackOptions(
        bundle=str(bundles.all_wheels), target=target, cpu=True, offline=True, smoke=False
    )
    with pytest.raises(InstallError) as caught:
        unpack_module.unpack(options)
    message = caught.value.message
    assert caught.value.exit_code == 3
    assert message.startswith("venv: No space left on device (")
    assert "/bin/python)" in message.splitlines()[0]
    assert f"(the report {report.resolve()} could not be written either" in message
    assert "preflight" in state(target)["done"] and "venv" not in state(target)["done"]


def test_dry_run_prints_the_plan_and_creates_nothing(bundles: Bundles, tmp_path: Path) -> None:
    target = tmp_path / "new" / "deeper" / "t"
    before = sorted(tmp_path.rglob("*"))
    result = unpack(bundles.default, target, "--cpu", "--dry-run")
    ok(result)
    out = result.stdout.decode()  # the summary and the plan: the result, on stdout
    assert (
        f"dry run, nothing was created: would create a venv at {target / '.venv'} and install 5"
        in out
    )
    assert "nothing to do" not in out
    assert sorted(tmp_path.rglob("*")) == before


def test_dry_run_json_says_which_steps_a_real_run_would_do(
    bundles: Bundles, tmp_path: Path
) -> None:
    """`pending`: every step on a new target, none once it is unpacked (what the
    Ansible module's check mode reports as changed or not)."""
    target = tmp_path / "t"
    args = ("--cpu", "--offline", "--no-smoke", "--dry-run", "--json")
    fresh = json.loads(unpack(bundles.all_wheels, target, *args).stdout)
    assert fresh["pending"] == [
        "preflight",
        "venv",
        "install",
        "kernels",
        "patch",
        "workspace",
        "caches",
        "services",
        "models",
    ]
    assert fresh["plan"].startswith("would create a venv")
    assert not target.exists()
    ok(unpack(bundles.all_wheels, target, "--cpu", "--offline", "--no-smoke"))
    again = json.loads(unpack(bundles.all_wheels, target, *args).stdout)
    assert again["pending"] == [] and again["changed"] is False
    assert again["plan"] == f"nothing to do: {target} already holds demo 2"
    with_ladder = json.loads(unpack(bundles.all_wheels, target, *args[:2], *args[3:]).stdout)
    assert with_ladder["pending"] == ["smoke"]


# --- preflight verdicts with a test double of nvidia-smi (tests/support/doubles/nvidia_smi.py)


def bundle_for(bundle_dir: Path, dest: Path, arch_list: list[str], torch_cuda: str | None) -> Path:
    """A copy of the bundle whose source torch was built for `arch_list` and `torch_cuda`,
    with its manifest rewritten so it verifies."""
    copy = dest / bundle_dir.name
    shutil.copytree(bundle_dir, copy)
    info = toml_loads((copy / "bundle.toml").read_text())
    info["source"]["torch_arch_list"] = arch_list
    if torch_cuda is not None:
        info["source"]["torch_cuda"] = torch_cuda
    (copy / "bundle.toml").write_text(tomli_w.dumps(info))
    write_manifest(copy)
    return copy


ARCH_CASES = [
    ("12.0", ["sm_80", "sm_90", "sm_100", "sm_120"], "pass"),  # SM120 RTX PRO 6000
    ("12.0", ["sm_90"], "fail"),  # SM120 box, a bundle built for SM90 only
    ("12.0", ["sm_90", "compute_90"], "warn"),  # PTX JIT for a newer arch
    ("10.3", ["sm_100"], "pass"),  # B300 runs sm_100 SASS (same major, minor >= 0)
    ("10.3", ["sm_100a"], "fail"),  # arch-specific SASS runs on exactly 10.0
    ("10.0", ["sm_100a"], "pass"),
    ("10.0", ["sm_90", "sm_120"], "fail"),
    ("9.0", ["sm_90a"], "pass"),  # H200
    ("9.0", ["sm_80"], "fail"),  # never across majors
    ("9.0", ["sm_100", "sm_120"], "fail"),
]


@pytest.mark.parametrize(("capability", "arch_list", "verdict"), ARCH_CASES)
def test_preflight_gpu_verdicts(
    bundle_dir: Path, tmp_path: Path, capability: str, arch_list: list[str], verdict: str
) -> None:
    bundle = bundle_for(bundle_dir, tmp_path, arch_list, "12.8")
    env = fake_nvidia_smi(tmp_path / "double", capability, "13.0")
    target = tmp_path / "t"
    result = unpack(bundle, target, "--dry-run", "--json", env=env)
    err = result.stderr.decode()
    assert not target.exists()
    if verdict == "fail":
        assert result.returncode == 1, err
        assert "preflight failed" in err and "gpu 0 torch: NVIDIA Test Double GPU" in err
        assert "nothing was installed" in err
        return
    assert result.returncode == 0, err
    checks = {c["name"]: c for c in json.loads(result.stdout)["preflight"]["checks"]}
    assert checks["gpu 0 torch"]["status"] == verdict
    assert checks["driver"]["status"] == "pass"


@pytest.mark.parametrize(("driver_cuda", "code"), [("12.4", 1), ("12.8", 0), ("13.0", 0)])
def test_preflight_driver_older_than_torch_fails(
    bundle_dir: Path, tmp_path: Path, driver_cuda: str, code: int
) -> None:
    bundle = bundle_for(bundle_dir, tmp_path, ["sm_90"], "12.8")
    env = fake_nvidia_smi(tmp_path / "double", "9.0", driver_cuda)
    result = unpack(bundle, tmp_path / "t", "--dry-run", env=env)
    assert result.returncode == code, result.stderr.decode()
    if code:
        err = result.stderr.decode()
        assert f"driver supports CUDA {driver_cuda}; torch was built for 12.8" in err
        assert "upgrade the NVIDIA driver" in err


@pytest.mark.parametrize(("cpu", "code"), [(False, 1), (True, 0)])
def test_preflight_without_gpu_fails_unless_cpu(
    bundle_dir: Path, tmp_path: Path, cpu: bool, code: int
) -> None:
    bundle = bundle_for(bundle_dir, tmp_path, ["sm_90"], "12.8")
    env = fake_nvidia_smi(tmp_path / "double", None, "13.0")
    args = ["--dry-run", *(["--cpu"] if cpu else [])]
    result = unpack(bundle, tmp_path / "t", *args, env=env)
    assert result.returncode == code, result.stderr.decode()
    if not cpu:
        err = result.stderr.decode()
        assert "gpu: nvidia-smi failed: No devices were found" in err
        assert "--cpu" in err


# --- a bundle from a URL ------------------------------------------------------------------


@dataclass
class DroppingServer:
    """TEST DOUBLE of a file server (tests/support/httpfiles.py): the first request's connection
    drops mid-body, later requests honour Range."""

    body: bytes
    requests: list[dict[str, str]]
    url: str


@pytest.fixture
def dropping_server(bundles: Bundles) -> Iterator[DroppingServer]:
    body = bundles.default.read_bytes()
    with file_server([Version(body, '"demo-1"')], drop_after={0: len(body) // 3}) as served:
        yield DroppingServer(body, served.requests, served.url)


def test_url_bundle_resumes_with_range_after_a_drop(
    dropping_server: DroppingServer, tmp_path: Path
) -> None:
    target = tmp_path / "t"
    env = {"NO_PROXY": "127.0.0.1", "no_proxy": "127.0.0.1"}
    result = unpack(dropping_server.url, target, "--dry-run", "--cpu", env=env)
    err = ok(result)
    assert "every file matches MANIFEST.sha256" in err  # the verify step's event
    assert "would create a venv" in result.stdout.decode()  # the plan
    ranges = [r.get("Range") for r in dropping_server.requests]
    assert ranges[0] is None
    assert ranges[1] == f"bytes={len(dropping_server.body) // 3}-"
    assert not target.exists()
    assert not list(tmp_path.glob(".repro-unpack-*"))


@pytest.mark.parametrize(
    ("verb", "extra"),
    [
        ("check", ()),
        ("inspect", ()),
        ("diff", ("{default}",)),
        ("sbom", ()),
        ("smoke", ("--python", sys.executable, "--rungs", "python", "--cpu")),
    ],
)
def test_every_verb_that_reads_a_bundle_resumes_a_url_after_a_drop(
    dropping_server: DroppingServer, bundles: Bundles, verb: str, extra: tuple[str, ...]
) -> None:
    """check, inspect, diff, sbom and smoke --bundle read a URL as unpack does: the same
    streamed, safe reader, resumed with Range after the connection drops mid-body."""
    env = {"NO_PROXY": "127.0.0.1", "no_proxy": "127.0.0.1"}
    source = ("--bundle", dropping_server.url) if verb == "smoke" else (dropping_server.url,)
    args = [arg.format(default=bundles.default) for arg in extra]
    result = run_repro(verb, *source, *args, env=env)
    assert result.returncode == 0, result.stderr.decode()
    assert result.stdout.strip()
    ranges = [r.get("Range") for r in dropping_server.requests]
    assert ranges == [None, f"bytes={len(dropping_server.body) // 3}-"], ranges
