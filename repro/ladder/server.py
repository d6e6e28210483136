"""Rung 'server': launch the engine, wait for a real generation, always tear down."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from repro.errors import GenerationError, ServerNotReady
from repro.ladder.process import (
    log_errors,
    log_tail,
    port_taken,
    start_server,
    stop_group,
    terminated_raises,
)
from repro.ladder.readiness import Generation, Probe, generate, probe_health, served_model
from repro.ladder.types import (
    LadderSpec,
    LaunchSpec,
    RungContext,
    RungResult,
    RungStatus,
    Timeouts,
    UnreadyModel,
)
from repro.ladder.variables import unfilled_variables
from repro.servecmd import model_arguments

POLL_INTERVAL_S = 0.25  # a server that is ready is seen within this; a refused probe is cheap


@dataclass(frozen=True)
class _Ready:
    generation: Generation
    ready_at: float
    model: str | None  # the name the generation asked for (None: SGLang, which takes none)
    model_from: str  # where the name came from


def command_line_model(launch: LaunchSpec) -> str | None:
    """The served model the launch command names (``--model``, ``--model-path``, the
    positional model of ``vllm serve`` / ``transformers serve``); None if it names none."""
    argv: list[str] | tuple[str, ...] | None = launch.argv
    if not argv and launch.shell:
        try:
            argv = shlex.split(launch.shell)
        except ValueError:
            return None
    targets = [m.value for m in model_arguments(argv or ()) if m.role == "target"]
    return targets[0] if targets else None


def _wait_for_generation(
    launch: LaunchSpec, process: subprocess.Popen[bytes], timeouts: Timeouts, started: float
) -> _Ready:
    """Poll every POLL_INTERVAL_S until a real generation succeeds; raise ServerNotReady.

    The model to ask for is the first of ``GET /v1/models``; a server that answers
    health but cannot list its models (``transformers serve`` lists the hub cache, and
    answers 500 where there is none) is asked for the model its command line names."""
    deadline = started + timeouts.server_ready
    last = "no probe yet"
    fallback = command_line_model(launch)
    while True:
        tick = time.monotonic()
        code = process.poll()
        if code is not None:
            raise ServerNotReady(
                f"the server exited with code {code} before it was ready",
                "read the log tail: a bad argument, a missing model, out of memory, "
                "or an import error in the engine",
            )
        remaining = deadline - tick
        if remaining <= 0:
            raise ServerNotReady(
                f"not ready within {timeouts.server_ready:g} s (last probe: {last})",
                "the server started but never answered a generation: look at the log for a "
                "stuck model load or compile; raise --timeout if start-up is known to be slow",
            )
        health = probe_health(launch, min(timeouts.probe, remaining))
        last = health.detail
        if health.state is Probe.READY:
            model = None
            model_from = "none asked (SGLang)"
            if launch.engine != "sglang":
                named = served_model(launch, min(timeouts.probe, remaining))
                if named.state is Probe.BROKEN and fallback is None:
                    raise ServerNotReady(f"{health.detail}, but {named.detail}", None)
                if named.state is Probe.BROKEN:
                    model, model_from = fallback, f"the command line ({named.detail})"
                elif named.state is Probe.READY:
                    model, model_from = named.detail, "GET /v1/models"
                last = named.detail
            if model is not None or launch.engine == "sglang":
                ready_at = time.monotonic()
                try:
                    budget = min(timeouts.generation, max(deadline - ready_at, 1.0))
                    generation = generate(launch, model, budget)
                    return _Ready(generation, ready_at, model, model_from)
                except GenerationError as exc:
                    if exc.state is Probe.BROKEN:
                        raise ServerNotReady(
                            f"{health.detail}, but generation failed: {exc.detail}",
                            "the health endpoint answers but the engine cannot generate: "
                            "an attention backend or kernel that does not support this "
                            "model or GPU; the log has the engine's traceback",
                        ) from exc
                    last = exc.detail
        time.sleep(max(0.0, POLL_INTERVAL_S - (time.monotonic() - tick)))


def _facts(launch: LaunchSpec, log_path: Path, argv: tuple[str, ...]) -> dict[str, Any]:
    facts: dict[str, Any] = {
        "launch": launch.name,
        "engine": launch.engine,
        "port": launch.port,
        "argv": list(argv),
        "log": str(log_path),
    }
    if launch.cwd is not None:
        facts["cwd"] = str(launch.cwd)
    if launch.unit is not None:
        facts["unit"] = launch.unit  # where the command came from: this unit's ExecStart=
    return facts


NO_LAUNCH = (
    "no launch command: the bundle has none (no unit's ExecStart= runs a server, no "
    "[launch] in repro.toml) and none was given (--launch CMD, --service NAME)"
)
VARIABLE_OPTIONS = {
    "REPRO_VENV": "--venv",
    "REPRO_HOME": "--home",
    "REPRO_MODELS": "--models",
}


def names_model(launch: LaunchSpec, model: UnreadyModel) -> bool:
    """Whether the launch command names the model: one of the words the model is known
    by, as a whole word of the command (after `=` too, `--model=PATH`) or as the
    directory of a path in it (`PATH/tokenizer.json`); in a shell line, anywhere
    between blanks or quotes."""
    for word in (w for w in model.words if w):
        pattern = re.compile(r"(?:^|[\s='\"])" + re.escape(word) + r"(?:$|[\s/'\"])")
        if any(pattern.search(arg) for arg in launch.command):
            return True
    return False


def _model_not_ready(launch: LaunchSpec, unready: tuple[UnreadyModel, ...]) -> RungResult | None:
    """A failure before the launch when the command names a model the models step did
    not find as packed: no start, no readiness wait."""
    named = [m for m in unready if names_model(launch, m)]
    if not named:
        return None
    fixes = [m.fix for m in named if m.fix]
    return RungResult(
        "server",
        RungStatus.FAIL,
        0.0,
        f"{launch.name}: not launched: "
        + "; ".join(f"model {m.name} is {m.status}: {m.reason}" for m in named),
        {"launch": launch.name, "models": {m.name: m.status for m in named}},
        hint=("; ".join(fixes) + ", then run unpack again")
        if fixes
        else "put the model where the models step says, then run unpack again",
    )


def _cannot_launch(launch: LaunchSpec, cpu: bool) -> RungResult | None:
    """A skip or a failure decided before anything starts; None when it can start."""
    if cpu and launch.engine == "sglang":
        return RungResult(
            "server",
            RungStatus.SKIP,
            0.0,
            f"{launch.name}: SGLang needs a GPU; not launched with --cpu",
            {"launch": launch.name, "engine": launch.engine},
        )
    missing = unfilled_variables(launch)
    if missing:
        options = " ".join(f"{VARIABLE_OPTIONS.get(name, name)} DIR" for name in missing)
        names = ", ".join(f"${{{name}}}" for name in missing)
        return RungResult(
            "server",
            RungStatus.FAIL,
            0.0,
            f"launch command {launch.name} names {names}, which nothing here sets",
            {"launch": launch.name, "unfilled": list(missing)},
            hint=f"give the target's paths: repro smoke {options}; repro unpack --models DIR "
            "for ${REPRO_MODELS}",
        )
    if launch.cwd is not None and not launch.cwd.is_dir():
        return RungResult(
            "server",
            RungStatus.FAIL,
            0.0,
            f"launch command {launch.name}: working directory {launch.cwd} does not exist",
            {"launch": launch.name, "cwd": str(launch.cwd)},
            hint="the unit's WorkingDirectory= must exist on this box",
        )
    return None


def server_rung(spec: LadderSpec, context: RungContext) -> RungResult:
    """Launch the spec's server, wait for a real generation, tear it down. It runs no
    script of its own (context is unused): its deadlines are spec.timeouts."""
    launch = spec.launch
    if launch is None:
        return RungResult("server", RungStatus.SKIP, 0.0, NO_LAUNCH)
    refused = _cannot_launch(launch, spec.cpu) or _model_not_ready(launch, spec.unready_models)
    if refused is not None:
        return refused
    argv = launch.command
    log_dir = spec.log_dir or Path(tempfile.mkdtemp(prefix="repro-smoke-"))
    log_dir.mkdir(parents=True, exist_ok=True)
    log_path = log_dir / f"server-{launch.name}.log"
    facts = _facts(launch, log_path, argv)
    if port_taken(launch.host, launch.port):
        return RungResult(
            "server",
            RungStatus.FAIL,
            0.0,
            f"port {launch.port} is already in use; refusing to launch (a stale server "
            "would answer the checks)",
            facts,
            hint=f"stop what listens there (ss -ltnp 'sport = :{launch.port}') or use --port",
        )
    # SIGTERM or SIGHUP to repro becomes an exception here, so the finally below ends
    # the server's group instead of leaving it running.
    with terminated_raises():
        started = time.monotonic()
        env = {**os.environ, **launch.env}
        try:
            process = start_server(argv, env, log_path, launch.cwd)
        except OSError as exc:
            return RungResult(
                "server",
                RungStatus.FAIL,
                0.0,
                f"cannot start {argv[0]}: {exc.strerror or exc}",
                facts,
                hint="check the launch command's program path",
            )
        outcome: _Ready | ServerNotReady
        try:
            facts["pid"] = process.pid
            try:
                outcome = _wait_for_generation(launch, process, spec.timeouts, started)
            except ServerNotReady as exc:
                outcome = exc
            # Before teardown: shutdown noise would push the cause out of the tail.
            tail = log_tail(log_path)
        finally:
            # Runs on success, failure and KeyboardInterrupt alike.
            left = stop_group(process, spec.timeouts.grace)
    duration = time.monotonic() - started
    facts["exit_code"] = process.returncode
    errors = log_errors(log_path)
    if errors:
        facts["log_errors"] = list(errors)
        tail = (*(f"[error in log] {line}" for line in errors), "...", *tail)
    if left:
        facts["left_running"] = list(left)
        return RungResult(
            "server",
            RungStatus.FAIL,
            duration,
            f"processes of the server's group survived SIGKILL: {list(left)}",
            facts,
            hint="a process stuck in the kernel (D state); check the GPU driver",
            output_tail=tail,
        )
    if isinstance(outcome, ServerNotReady):
        return RungResult(
            "server",
            RungStatus.FAIL,
            duration,
            outcome.summary,
            facts,
            hint=outcome.hint,
            output_tail=tail,
        )
    generation, ready_at = outcome.generation, outcome.ready_at
    facts.update(
        {
            "model": outcome.model,
            "model_from": outcome.model_from,
            "ready_s": round(ready_at - started, 3),
            "ttft_s": generation.ttft_s,
            "tokens": generation.tokens,
            "tokens_per_s": generation.tokens_per_s,
            "generation_s": generation.total_s,
            "text": generation.text,
        }
    )
    if launch.expected_text is not None and launch.expected_text not in generation.text:
        return RungResult(
            "server",
            RungStatus.FAIL,
            duration,
            f"the generation does not contain the expected text {launch.expected_text!r}: "
            f"{generation.text[:200]!r}",
            facts,
            hint="the model or its weights differ from the bundle's, or sampling "
            "is not deterministic",
            output_tail=tail,
        )
    rate = f"{generation.tokens_per_s:.1f} tok/s" if generation.tokens_per_s else "n/a tok/s"
    ttft = f"{generation.ttft_s * 1000:.0f} ms" if generation.ttft_s is not None else "n/a"
    summary = (
        f"{launch.engine} ready in {ready_at - started:.1f} s; TTFT {ttft}, "
        f"{generation.tokens} tokens, {rate}"
    )
    return RungResult("server", RungStatus.PASS, duration, summary, facts)
