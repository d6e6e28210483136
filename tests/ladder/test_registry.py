"""The rung registry (repro.ladder.registry.RUNGS) is the one place a rung is added: the
runner, `--rungs`, repro.toml's check, a bundle's [ladder] rungs and unpack's verdict
all read it, and a rung's function names its result from it."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from repro.config import CONFIG_NAME, load_config
from repro.install.smoke import verdict
from repro.ladder import LadderSpec, RungStatus, registry, run_ladder
from repro.ladder.interp import script_path
from repro.ladder.registry import RUNGS, Rung
from repro.ladder.rungs import python_rung
from repro.ladder.runner import parse_rungs
from repro.ladder.spec import spec_from_bundle_dir
from repro.ladder.types import RungScript
from repro.snapshot.workspace.discovery import discover_workspace, render_repro_toml
from tests.ladder.test_spec import HEADER, write_bundle


def test_the_ladder_is_the_seven_rungs_in_order() -> None:
    assert registry.RUNG_NAMES == (
        "python",
        "torch",
        "triton",
        "kernels",
        "nccl",
        "engine",
        "server",
    )


def test_every_rung_script_is_shipped_and_every_shipped_script_is_a_rungs() -> None:
    named = {rung.script.file for rung in RUNGS if rung.script is not None}
    for name in named:
        assert script_path(name).is_file(), name
    shipped = {path.name for path in script_path("x").parent.glob("rung_*.py")}
    assert shipped == named


def test_the_init_template_lists_the_registrys_rungs(tmp_path: Path) -> None:
    template = render_repro_toml(discover_workspace(tmp_path))
    listed = ", ".join(f'"{name}"' for name in registry.RUNG_NAMES)
    assert f"# rungs = [{listed}]" in template


def test_a_rung_added_to_the_registry_is_known_everywhere(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A rung that reruns the python rung's script under another name, put between
    python and torch: one line in the registry, nothing else."""
    again = Rung("again", python_rung, "the interpreter", RungScript("rung_python.py", 60))
    rungs = (RUNGS[0], again, *RUNGS[1:])
    monkeypatch.setattr(registry, "RUNGS", rungs)
    monkeypatch.setattr(registry, "RUNG_NAMES", tuple(r.name for r in rungs))
    monkeypatch.setattr(registry, "SCRIPTS", {**registry.SCRIPTS, "again": again.script})

    assert parse_rungs("again,python") == ("python", "again")

    report = run_ladder(LadderSpec(python=Path(sys.executable), rungs=("python", "again")))
    assert [(r.name, r.status) for r in report.results] == [
        ("python", RungStatus.PASS),
        ("again", RungStatus.PASS),
    ]
    assert verdict(report.results).endswith("not run: torch, triton, kernels, nccl, engine, server")

    (tmp_path / CONFIG_NAME).write_text('[ladder]\nrungs = ["again"]\n')
    assert load_config(tmp_path).ladder.rungs == ("again",)

    bundle = write_bundle(tmp_path / "b", HEADER + '[ladder]\nrungs = ["torch", "again"]\n', None)
    assert spec_from_bundle_dir(bundle, Path(sys.executable)).rungs == ("again", "torch")

    template = render_repro_toml(discover_workspace(tmp_path))
    assert '# rungs = ["python", "again", "torch",' in template
