"""Stage `caches`: with `--caches` (or repro.toml's `[caches] enable`), the compile
caches the workspace's engine uses, carried under caches/<kind>/ and listed with their
keys in env/caches.toml (repro.snapshot.workspace.caches finds and reads them).

`--caches-max-size` (or `[caches] max_size`) bounds them all together: a cache that
would pass the bound is left out whole, with a line, and the pack goes on (a cache only
saves time on the target; the bundle is whole without it).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from repro.bundle import layout
from repro.bundle.caches import dump_caches, human_size
from repro.bundle.environment import EnvironmentFacts
from repro.snapshot.stages.options import Progress
from repro.snapshot.stages.probe import Start
from repro.snapshot.workspace.caches import FoundCache, find_caches
from repro.snapshot.workspace.leftout import LeftOut
from repro.snapshot.workspace.unitcapture import CapturedUnit


@dataclass(frozen=True)
class Caches:
    carried: tuple[FoundCache, ...] = ()
    left_out: tuple[LeftOut, ...] = ()
    warnings: tuple[str, ...] = ()

    def members(self) -> dict[str, Path | bytes]:
        """caches/<kind>/<rel> -> the file, and env/caches.toml; nothing when none is
        carried."""
        if not self.carried:
            return {}
        out: dict[str, Path | bytes] = {
            layout.CACHES_TOML: dump_caches([c.carried() for c in self.carried])
        }
        for cache in self.carried:
            for rel, path in cache.files:
                out[layout.cache_file(cache.kind.name, rel)] = path
        return out

    def described(self) -> tuple[str, ...]:
        """One line per carried cache: kind, files, size, where from, key."""
        return tuple(c.carried().describe() for c in self.carried)


def gather(
    start: Start,
    facts: EnvironmentFacts,
    units: tuple[CapturedUnit, ...],
    say: Progress,
) -> Caches:
    """The caches to carry, or none when they were not asked for."""
    options, config = start.options, start.config.caches
    if not (options.caches or config.enable):
        return Caches()
    say("looking for the engine's compile caches")
    found, warnings = find_caches(
        units,
        facts,
        kinds=config.kinds,
        paths=config.paths,
        secret_values=start.secret_values,
    )
    bound = options.caches_max_size if options.caches_max_size is not None else config.max_size
    carried: list[FoundCache] = []
    left_out: list[LeftOut] = []
    total = 0
    for cache in found:
        left_out += cache.left_out
        warnings += [f"{item.path}: {item.reason}" for item in cache.left_out]
        if not cache.files:
            say(f"  {cache.kind.name}: {cache.directory} holds nothing to carry")
            continue
        if bound is not None and total + cache.size > bound:
            reason = (
                f"the {cache.kind.name} cache ({human_size(cache.size)}) would pass the "
                f"caches' bound of {human_size(bound)} ({human_size(total)} carried before "
                "it): left out (--caches-max-size)"
            )
            left_out.append(LeftOut(f"{cache.directory}/", reason, "size"))
            warnings.append(f"{cache.directory}: {reason}")
            continue
        total += cache.size
        carried.append(cache)
        say(f"  carrying {cache.carried().describe()}, found as {cache.origin}")
    if not found:
        say("  no compile cache found")
    return Caches(tuple(carried), tuple(left_out), tuple(warnings))
