"""The unpack's last step: the smoke ladder run in the rebuilt environment."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from repro.bundle import layout
from repro.bundle.info import BundleInfo
from repro.install.deploy.caches import cache_environment
from repro.ladder import (
    LadderReport,
    LaunchSpec,
    RungResult,
    RungStatus,
    UnreadyModel,
    registry,
    run_ladder,
)
from repro.ladder.spec import spec_from_bundle_dir
from repro.units.dropin import dropin_member, read_values, required_names


@dataclass(frozen=True)
class SmokeResult:
    """The ladder's outcome, as the unpack report's "smoke" section."""

    passed: bool
    summary: str  # what ran and what did not (`verdict`)
    ladder: LadderReport

    def to_json(self) -> dict[str, Any]:
        return {"passed": self.passed, "summary": self.summary, "ladder": self.ladder.to_json()}


# interpreter, the kept bundle directory, its bundle.toml, and the target's values of
# ${REPRO_VENV}, ${REPRO_HOME} and ${REPRO_MODELS}
# (interpreter, kept bundle, info, the units' variables, the models not found as packed)
SmokeStep = Callable[
    [Path, Path, BundleInfo, Mapping[str, str], tuple[UnreadyModel, ...]], SmokeResult
]


def verdict(results: Sequence[RungResult]) -> str:
    """What ran and what did not: a skipped rung is named with its reason, so a pass
    never reads as more than was checked."""
    failed = [r for r in results if r.status is RungStatus.FAIL]
    if failed:
        return "; ".join(f"{r.name}: {r.summary}" for r in failed)
    passed = [r.name for r in results if r.status is RungStatus.PASS]
    skipped = [r for r in results if r.status is RungStatus.SKIP]
    absent = [name for name in registry.RUNG_NAMES if name not in {r.name for r in results}]
    if not skipped and not absent:
        return "every rung passed"
    parts = [f"{', '.join(passed) or 'no rung'} passed"]
    parts += [f"{r.name} skipped: {r.summary}" for r in skipped]
    parts += [f"not run: {', '.join(absent)}"] if absent else []
    return "; ".join(parts)


def with_unit_credentials(launch: LaunchSpec, info: BundleInfo, home: Path) -> LaunchSpec:
    """The credentials pack took out of the launch's unit, as systemd would give them to
    the service: the values the operator put in the unit's drop-in
    (TARGET/services/<unit>.d/repro-secrets.env) set in its environment and expanded
    where its command names them (${NAME}); one left empty expands to nothing."""
    unit = next((c.unit for c in info.launch.commands if c.name == launch.name), None)
    dropin = layout.at(home, layout.unit(dropin_member(unit))) if unit else None
    if dropin is None or not dropin.is_file():
        return launch
    text = dropin.read_text(encoding="utf-8")
    values = {name: "" for name in required_names(text)} | read_values(text)
    pattern = re.compile(r"\$\{(" + "|".join(map(re.escape, values)) + r")\}")

    def expand(arg: str) -> str:
        return pattern.sub(lambda m: values[m.group(1)], arg) if values else arg

    env = {**{k: v for k, v in values.items() if v}, **launch.env}
    argv = tuple(expand(a) for a in launch.argv) if launch.argv else launch.argv
    return replace(launch, argv=argv, env=env)


def with_cache_environment(launch: LaunchSpec, home: Path) -> LaunchSpec:
    """The restored compile caches' variables (TARGET/cache/caches.env), as the rendered
    units read them last: the server rung starts the engine on the restored caches."""
    restored = cache_environment(home)
    if not restored:
        return launch
    return replace(launch, env={**launch.env, **restored})


def ladder_step(
    *,
    cpu: bool,
    log_dir: Path | None,
    on_rung: Callable[[RungResult], None] | None = None,
) -> SmokeStep:
    """A smoke step for `unpack`: the rungs the bundle's [ladder] selects (every rung
    where it selects none). `unpack --no-exec` runs no rung at all: each starts the
    rebuilt interpreter (which runs the .pth files of its site-packages), the later ones
    import the installed, patched stack, and the server rung runs the bundle's own
    launch command."""

    def step(
        interpreter: Path,
        bundle_dir: Path,
        info: BundleInfo,
        variables: Mapping[str, str],
        unready: tuple[UnreadyModel, ...] = (),
    ) -> SmokeResult:
        spec = spec_from_bundle_dir(
            bundle_dir, interpreter, cpu=cpu, log_dir=log_dir, variables=variables
        )
        spec = replace(spec, unready_models=unready)
        if spec.launch is not None and "REPRO_HOME" in variables:
            home = Path(variables["REPRO_HOME"])
            launch = with_unit_credentials(spec.launch, info, home)
            spec = replace(spec, launch=with_cache_environment(launch, home))
        report = run_ladder(spec, on_rung=on_rung)
        return SmokeResult(passed=report.ok, summary=verdict(report.results), ladder=report)

    return step
