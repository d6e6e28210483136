"""`repro demo`: the whole round trip on an example workspace, in one command.

The example is shaped like a real deployment: a venv with real packages from
PyPI (and torch's CPU build where pip can take it without a download), a hand
patch inside site-packages (the patch set shipped under patches/, applied with
repro's own patch transaction), a systemd unit, a drafter config and model
card, a bench script with results. The demo packs it, checks the bundle,
tampers with a copy to show the check catching it, unpacks offline at another
path and climbs the smoke ladder there. The workspace is cached, so a second
run only repeats the round trip.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from repro.check import CheckOptions, check_target
from repro.errors import ReproError
from repro.install.patching import apply_patches
from repro.install.smoke import ladder_step
from repro.install.unpack import UnpackOptions, unpack
from repro.patchset import load_patchset
from repro.snapshot.pack import PackOptions, default_cache_dir, pack

PACKAGES = ("idna==3.10", "six==1.16.0", "packaging==24.2")
TORCH = "torch==2.13.0"
PATCH_SET = "idna-serving-policy"
DEMO_UNIT = """[Unit]
Description=Example serving endpoint packed by repro demo
After=network-online.target

[Service]
WorkingDirectory={home}
EnvironmentFile={home}/serving.env
ExecStart={venv}/bin/python -m http.server 8000 --bind 127.0.0.1
Restart=on-failure

[Install]
WantedBy=multi-user.target
"""


@dataclass(frozen=True)
class DemoStep:
    name: str
    ok: bool
    proved: str
    seconds: float


@dataclass
class DemoReport:
    steps: list[DemoStep] = field(default_factory=list)
    bundle: Path | None = None
    target: Path | None = None

    @property
    def ok(self) -> bool:
        return all(step.ok for step in self.steps)

    def to_json(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "bundle": str(self.bundle) if self.bundle else None,
            "target": str(self.target) if self.target else None,
            "steps": [
                {"name": s.name, "ok": s.ok, "proved": s.proved, "seconds": round(s.seconds, 2)}
                for s in self.steps
            ],
        }


def shipped_patch_set() -> Path:
    path = Path(__file__).resolve().parent.parent / "patches" / PATCH_SET
    if not (path / "patches.toml").is_file():
        raise ReproError(
            f"{path}: the demo's patch set is missing",
            hint="run the demo from a checkout of the repro repository",
        )
    return path


def _pip(python: Path, *args: str) -> None:
    result = subprocess.run(
        [str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check", *args],
        capture_output=True,
        text=True,
        timeout=1800,
        check=False,
    )
    if result.returncode != 0:
        raise ReproError(f"pip install {' '.join(args)} failed:\n{result.stderr.strip()[-2000:]}")


def torch_available_offline(python: Path) -> bool:
    """Whether pip can take torch's CPU build from a local find-links directory."""
    with tempfile.TemporaryDirectory() as temp:
        result = subprocess.run(
            [str(python), "-m", "pip", "download", "-q", "--no-deps", "--no-index",
             "--disable-pip-version-check", "-d", temp, TORCH],
            capture_output=True, timeout=600, check=False,
        )  # fmt: skip
    return result.returncode == 0


def build_workspace(root: Path, *, with_torch: bool | None) -> tuple[Path, bool]:
    """The example workspace under `root` (cached: built once per recipe)."""
    recipe = hashlib.sha256(
        json.dumps([PACKAGES, TORCH, with_torch, sys.version_info[:2]]).encode()
        + (shipped_patch_set() / "patches.toml").read_bytes()
    ).hexdigest()[:16]
    workspace = root / f"dflash-{recipe}"
    marker = workspace / ".demo-ready"
    if marker.exists():
        return workspace, json.loads(marker.read_text())["torch"]
    shutil.rmtree(workspace, ignore_errors=True)
    workspace.mkdir(parents=True)
    venv = workspace / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
    python = venv / "bin" / "python"
    _pip(python, *PACKAGES)
    torch = torch_available_offline(python) if with_torch is None else with_torch
    if torch:
        _pip(python, TORCH)
    patch_dir = shipped_patch_set()
    site = Path(
        subprocess.run(
            [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
            capture_output=True, text=True, check=True, timeout=60,
        ).stdout.strip()
    )  # fmt: skip
    with tempfile.TemporaryDirectory() as state:
        apply_patches(
            load_patchset((patch_dir / "patches.toml").read_bytes(), source=str(patch_dir)),
            patch_dir,
            site,
            python=python,
            state_dir=Path(state),
        )
    (workspace / "services").mkdir()
    (workspace / "services" / "dflash-demo.service").write_text(
        DEMO_UNIT.format(home=workspace, venv=venv)
    )
    (workspace / "serving.env").write_text("NCCL_DEBUG=WARN\nHF_TOKEN=hf_demo_not_a_real_token\n")
    drafter = workspace / "drafter"
    drafter.mkdir()
    (drafter / "config.json").write_text(
        json.dumps({"model_type": "llama", "hidden_size": 256, "num_hidden_layers": 2}, indent=2)
    )
    (drafter / "README.md").write_text("# Example drafter\n\nA model card for the demo.\n")
    (drafter / "model.safetensors").write_bytes(b"\0" * (2 << 20))
    (workspace / "bench").mkdir()
    (workspace / "bench" / "run_bench.sh").write_text("#!/bin/sh\necho 'tokens/s: 1234'\n")
    (workspace / "bench" / "run_bench.sh").chmod(0o755)
    (workspace / "bench" / "results.json").write_text(json.dumps({"tokens_per_s": 1234}))
    (workspace / "repro.toml").write_text(
        '[bundle]\nname = "dflash-demo"\n\n[files]\ninclude = ["bench/*"]\n'
    )
    marker.write_text(json.dumps({"torch": torch}))
    return workspace, torch


def _tamper(bundle: Path, copy: Path) -> str:
    """Flip one byte inside REPRODUCE.md's content in a copy; the tar stays valid."""
    data = bytearray(bundle.read_bytes())
    needle = b"This bundle was written by repro"
    at = data.find(needle)
    if at < 0:
        raise ReproError(f"{bundle}: cannot find REPRODUCE.md's text to tamper with")
    data[at] ^= 0x20
    copy.write_bytes(bytes(data))
    return "REPRODUCE.md"


def run_demo(
    workdir: Path,
    *,
    cache: Path | None = None,
    with_torch: bool | None = None,
    say: Callable[[DemoStep], None] | None = None,
) -> DemoReport:
    report = DemoReport()
    emit = say or (lambda step: None)

    def step(name: str, action: Callable[[], str]) -> bool:
        started = time.monotonic()
        try:
            proved = action()
            ok = True
        except ReproError as exc:
            proved, ok = f"failed: {exc}", False
        record = DemoStep(name, ok, proved, time.monotonic() - started)
        report.steps.append(record)
        emit(record)
        return ok

    cache_dir = cache or default_cache_dir()
    state: dict[str, Any] = {}
    workdir.mkdir(parents=True, exist_ok=True)

    def make_workspace() -> str:
        workspace, torch = build_workspace(cache_dir / "demo", with_torch=with_torch)
        state["workspace"], state["torch"] = workspace, torch
        what = "torch CPU build, " if torch else ""
        return (
            f"example workspace at {workspace}: venv with {what}{', '.join(PACKAGES)}; "
            "idna patched by the shipped patch set (1 modified, 1 added file), a unit, "
            "a drafter config and card, bench files"
        )

    def do_pack() -> str:
        result = pack(
            PackOptions(
                source=state["workspace"],
                output=workdir / "bundles",
                version="1",
                wheels="all",
                cache_dir=cache_dir,
            )
        )
        assert result.path is not None
        report.bundle = result.path
        state["pack"] = result
        return (
            f"{result.path.name}: {result.distributions} distributions, "
            f"{len(result.vault_wheels)} wheels in the vault (air-gapped ready), "
            f"{len(result.patched_files)} patched files found against RECORD, "
            f"units {', '.join(result.units)}, {result.bundle_bytes / 2**20:.1f} MiB"
        )

    def do_check() -> str:
        assert report.bundle is not None
        result = check_target(str(report.bundle), CheckOptions())
        if not result.passed(ignore_missing=False, strict=True):
            raise ReproError(f"{report.bundle}: the fresh bundle does not verify")
        return f"every one of {len(result.verified)} files matches MANIFEST.sha256 (streamed)"

    def do_tamper() -> str:
        assert report.bundle is not None
        copy = workdir / "tampered.tar"
        member = _tamper(report.bundle, copy)
        result = check_target(str(copy), CheckOptions())
        bad = [m.path for m in result.mismatched]
        if result.passed(ignore_missing=False, strict=True) or member not in bad:
            raise ReproError(f"{copy}: a tampered bundle was not caught")
        return f"one flipped byte in {member} of a copy: `repro check` reports it mismatched"

    def do_unpack() -> str:
        assert report.bundle is not None
        target = workdir / "rebuilt" / f"app-{int(time.time())}"
        report.target = target
        result = unpack(
            UnpackOptions(bundle=str(report.bundle), target=target, offline=True, cpu=True),
            smoke=ladder_step(cpu=True, no_exec=False, log_dir=target / ".repro"),
        )
        steps = ", ".join(s.name for s in result.steps if s.status == "done")
        passed = []
        if result.smoke:
            passed = [r["name"] for r in result.smoke["ladder"]["rungs"] if r["status"] == "pass"]
        return (
            f"rebuilt offline at another path ({target}): {steps}; "
            f"smoke rungs passed: {', '.join(passed) or 'none'}"
        )

    ok = step("workspace", make_workspace)
    ok = ok and step("pack", do_pack)
    ok = ok and step("check", do_check)
    ok = ok and step("tamper", do_tamper)
    ok = ok and step("unpack", do_unpack)
    return report
