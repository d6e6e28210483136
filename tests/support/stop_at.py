"""`repro unpack` stopped (SIGSTOP) right after it reports one event, for tests that kill it
exactly there (tests/e2e/test_kill_anywhere.py and others).

    python -m tests.support.stop_at "STEP STATUS" -- unpack BUNDLE --target T ...

runs repro's CLI in this process (the same process a test would start with `python -m
repro`: its PID, its process group, its children), with the events `repro unpack`
reports wrapped from outside: right after the event `STEP STATUS` (`verify done`,
`install sources`, `smoke cuda pass`...) is reported, the process stops itself, and goes
on when it is sent SIGCONT. The product holds no hook for this: the wrapping is done
here, on the two callbacks the command hands the library (the steps' events and the
smoke ladder's rungs), so the stop lands where the command's own report of the event is
printed.
"""

from __future__ import annotations

import os
import signal
import sys
from collections.abc import Callable
from typing import Any

USAGE = 'usage: python -m tests.support.stop_at "STEP STATUS" -- REPRO_ARGS...'


def python_argv(*args: str, stop_at: str | None = None) -> list[str]:
    """What follows the interpreter to run `repro ARGS`: `-m repro ARGS`, or, to stop
    right after the event `stop_at`, this module with it."""
    if stop_at is None:
        return ["-m", "repro", *args]
    return ["-m", "tests.support.stop_at", stop_at, "--", *args]


def install(event: str) -> None:
    """Make `repro unpack`, run in this process, stop itself right after `event`."""
    import repro.cli.unpack as command
    from repro.install.smoke import ladder_step as real_ladder_step
    from repro.install.unpack import unpack as real_unpack

    def reached(step: str, status: str) -> None:
        if f"{step} {status}" == event:
            os.kill(os.getpid(), signal.SIGSTOP)

    def unpack(options: Any, *, events: Callable[[str, str, str], None], **rest: Any) -> Any:
        def reported(step: str, status: str, detail: str) -> None:
            events(step, status, detail)
            reached(step, status)

        return real_unpack(options, events=reported, **rest)

    def ladder_step(*, on_rung: Callable[[Any], None], **rest: Any) -> Any:
        def rung(result: Any) -> None:
            on_rung(result)
            reached(f"smoke {result.name}", result.status.value)

        return real_ladder_step(on_rung=rung, **rest)

    # the names the command module calls them by (it imported them from the library)
    vars(command).update(unpack=unpack, ladder_step=ladder_step)


def main(argv: list[str]) -> None:
    if len(argv) < 3 or argv[1] != "--" or " " not in argv[0]:
        raise SystemExit(USAGE)
    install(argv[0])
    from repro.cli import main as repro_main

    sys.argv = ["repro", *argv[2:]]
    repro_main()


if __name__ == "__main__":
    main(sys.argv[1:])
