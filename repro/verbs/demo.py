"""`repro demo`: the whole round trip on an example workspace, in one command.

The example is shaped like a real deployment: a venv with real packages from
PyPI (and torch's CPU build where pip can take it without a download), a hand
patch inside site-packages (the patch set shipped under patches/, applied with
repro's own patch transaction), a systemd unit, a drafter config and model
card, a bench script with results. The demo packs it, checks the bundle,
tampers with a copy to show the check catching it, unpacks offline at another
path and climbs the smoke ladder there. The workspace is cached, so a second
run only repeats the round trip. Everything else a run writes (the bundle, the
tampered copy, the rebuilt target) goes into one work directory of the run,
removed when the run ends, passed or failed, unless it is asked to be kept.
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

from repro.bundle import layout
from repro.bundle.patchset import load_patchset
from repro.errors import ReproError, UsageError
from repro.install.smoke import ladder_step
from repro.install.transaction.patching import apply_patches
from repro.install.unpack import UnpackOptions, unpack
from repro.ladder import RungStatus
from repro.snapshot.facts.installed import scheme_paths
from repro.snapshot.pack import PackOptions, default_cache_dir, pack
from repro.verbs.check import CheckOptions, check_target

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
    workdir: Path
    steps: list[DemoStep] = field(default_factory=list)
    bundle: Path | None = None
    target: Path | None = None
    kept: bool = False  # the work directory is still there (asked for, or not removable)

    @property
    def ok(self) -> bool:
        return all(step.ok for step in self.steps)

    @property
    def logs(self) -> Path | None:
        """Where the rebuilt target's unpack report and ladder logs are, while kept."""
        logs = self.target / ".repro" if self.target is not None else None
        return logs if self.kept and logs is not None and logs.is_dir() else None

    def to_json(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "workdir": str(self.workdir),
            "kept": self.kept,
            "bundle": str(self.bundle) if self.bundle else None,
            "target": str(self.target) if self.target else None,
            "steps": [
                {"name": s.name, "ok": s.ok, "proved": s.proved, "seconds": round(s.seconds, 2)}
                for s in self.steps
            ],
        }


def shipped_patch_set() -> Path:
    path = Path(__file__).resolve().parents[2] / "patches" / PATCH_SET
    if not (path / layout.PATCHSET_FILE).is_file():
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


def workspace_dir(root: Path, *, with_torch: bool | None) -> Path:
    """Where the cached example workspace of this recipe lives under `root`."""
    recipe = hashlib.sha256(
        json.dumps([PACKAGES, TORCH, with_torch, sys.version_info[:2]]).encode()
        + (shipped_patch_set() / layout.PATCHSET_FILE).read_bytes()
    ).hexdigest()[:16]
    return root / f"dflash-{recipe}"


def build_workspace(root: Path, *, with_torch: bool | None) -> tuple[Path, bool]:
    """The example workspace under `root` (cached: built once per recipe)."""
    workspace = workspace_dir(root, with_torch=with_torch)
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
    site = scheme_paths(python).purelib
    with tempfile.TemporaryDirectory() as state:
        apply_patches(
            load_patchset((patch_dir / layout.PATCHSET_FILE).read_bytes(), source=str(patch_dir)),
            patch_dir,
            site,
            python=python,
            state_dir=Path(state),
        )
    layout.at(workspace, layout.SERVICES).mkdir()
    layout.at(workspace, layout.unit("dflash-demo.service")).write_text(
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
    return layout.REPRODUCE


def open_workdir(workdir: Path | None) -> tuple[Path, bool]:
    """The run's work directory and whether this run created it: a new temporary one,
    or `workdir`, which must be new or empty (all it holds afterwards is the run's)."""
    if workdir is None:
        return Path(tempfile.mkdtemp(prefix="repro-demo-")), True
    if workdir.exists() and not workdir.is_dir():
        raise UsageError(f"--workdir {workdir}: not a directory")
    if workdir.is_dir() and any(workdir.iterdir()):
        raise UsageError(
            f"--workdir {workdir}: not empty; the demo removes what its run writes there",
            hint="pass a new or empty directory, or leave --workdir out for a temporary one",
        )
    created = not workdir.exists()
    workdir.mkdir(parents=True, exist_ok=True)
    return workdir, created


def remove_workdir(workdir: Path, *, created: bool) -> bool:
    """Remove the run's work directory (its contents only, when it was there before the
    run); True when nothing of it is left."""
    if created:
        shutil.rmtree(workdir, ignore_errors=True)
        return not workdir.exists()
    for child in list(workdir.iterdir()):
        if child.is_dir() and not child.is_symlink():
            shutil.rmtree(child, ignore_errors=True)
        else:
            child.unlink(missing_ok=True)
    return not any(workdir.iterdir())


def run_demo(
    workdir: Path | None = None,
    *,
    keep: bool = False,
    cache: Path | None = None,
    with_torch: bool | None = None,
    say: Callable[[DemoStep], None] | None = None,
) -> DemoReport:
    """The round trip in a work directory of its own (`workdir`, new or empty, or a
    temporary one), removed at the end, passed or failed, unless `keep`. The cached
    example workspace is not part of it and stays."""
    root, created = open_workdir(workdir)
    report = DemoReport(workdir=root, kept=True)
    try:
        _round_trip(report, cache=cache, with_torch=with_torch, say=say)
    finally:
        report.kept = keep or not remove_workdir(root, created=created)
    return report


def _round_trip(
    report: DemoReport,
    *,
    cache: Path | None,
    with_torch: bool | None,
    say: Callable[[DemoStep], None] | None,
) -> None:
    workdir = report.workdir
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
            smoke=ladder_step(cpu=True, log_dir=target / ".repro"),
        )
        steps = ", ".join(s.name for s in result.steps if s.status == "done")
        passed = []
        if result.smoke is not None:
            rungs = result.smoke.ladder.results
            passed = [r.name for r in rungs if r.status is RungStatus.PASS]
        return (
            f"rebuilt offline at another path ({target}): {steps}; "
            f"smoke rungs passed: {', '.join(passed) or 'none'}"
        )

    ok = step("workspace", make_workspace)
    ok = ok and step("pack", do_pack)
    ok = ok and step("check", do_check)
    ok = ok and step("tamper", do_tamper)
    ok = ok and step("unpack", do_unpack)
