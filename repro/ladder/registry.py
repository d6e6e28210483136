"""The rungs of the ladder, in the order they are climbed: the one place a rung is named.

Everything that knows the rungs reads RUNGS: repro.toml's `ladder.rungs` check
(repro.config), the `repro init` template (repro.snapshot.workspace.discovery),
`repro smoke --rungs` (its help and its check), a bundle's `[ladder] rungs`
(repro.ladder.spec), unpack's verdict (repro.install.smoke) and the runner.

To add a rung:
  1. write its function, `(spec, context) -> RungResult`, in repro/ladder/rungs.py (or a
     module of its own); it names its result `context.name` and runs its script with
     `context.script.file` and `context.timeout` (repro.ladder.interp.run_script);
  2. if it runs code inside the target, put that script under repro/ladder/scripts/
     (standard library plus what it checks; it prints one MARKER line, see interp.py);
  3. add a `Rung(...)` below at its place in the ladder: name, function, what it needs
     (without it the rung skips or fails), its script and timeout, and the facts of its
     result that later rungs read from `context.known`;
  4. describe it in docs/smoke.md's table of rungs.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

from repro.ladder.kernels import kernels_rung
from repro.ladder.rungs import engine_rung, nccl_rung, python_rung, torch_rung, triton_rung
from repro.ladder.server import server_rung
from repro.ladder.types import LadderSpec, RungContext, RungResult, RungScript

RungFunction = Callable[[LadderSpec, RungContext], RungResult]


@dataclass(frozen=True)
class Rung:
    """One rung: its name (in reports, --rungs and [ladder] rungs), how it runs, and
    what it needs."""

    name: str
    run: RungFunction
    needs: str  # what must be there for it to run, in words
    script: RungScript | None = None  # None: it runs no script of its own
    passes_on: tuple[str, ...] = ()  # facts of its result later rungs read (context.known)


RUNGS: tuple[Rung, ...] = (
    Rung("python", python_rung, "the interpreter", RungScript("rung_python.py", 60)),
    Rung(
        "torch",
        torch_rung,
        "torch; a GPU unless --cpu",
        RungScript("rung_torch.py", 600),
        passes_on=("device_count",),
    ),
    Rung(
        "triton", triton_rung, "triton, a C compiler, Python.h", RungScript("rung_triton.py", 300)
    ),
    # its deadline is the spec's Timeouts.kernel_check, per check command
    Rung(
        "kernels",
        kernels_rung,
        "a kernel source with a check command (env/kernels.toml), not --cpu",
    ),
    Rung("nccl", nccl_rung, "two or more GPUs, not --cpu", RungScript("rung_nccl.py", 300)),
    Rung("engine", engine_rung, "sglang, vllm or patched files", RungScript("rung_engine.py", 600)),
    # its deadlines are the spec's Timeouts (server_ready: --timeout, [ladder] timeout_s)
    Rung("server", server_rung, "a launch command (--launch, --service or the bundle's)"),
)

RUNG_NAMES: tuple[str, ...] = tuple(rung.name for rung in RUNGS)

# every rung's script, by rung name: a rung may run another's (nccl asks torch's script
# for the GPU count when the torch rung did not run)
SCRIPTS: Mapping[str, RungScript] = {
    rung.name: rung.script for rung in RUNGS if rung.script is not None
}


def unknown_rungs(names: Iterable[str]) -> list[str]:
    """The names that are no rung, in the order given."""
    return [name for name in names if name not in RUNG_NAMES]


def in_ladder_order(names: Iterable[str]) -> tuple[str, ...]:
    """The rungs named, each once, in the order the ladder climbs them."""
    wanted = set(names)
    return tuple(name for name in RUNG_NAMES if name in wanted)
