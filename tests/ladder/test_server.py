"""The server rung against a test double that fails on demand
(tests/support/doubles/engine_server.py).

Every case checks the verdict, that the log tail reaches the report, and that
no process of the server's group is left behind.
"""

from __future__ import annotations

import socket
from dataclasses import replace
from pathlib import Path

import pytest

from repro.ladder import RungResult, RungStatus, run_ladder
from tests.support.ladder import fake_launch, free_port, group_alive, read_pids, server_spec

FAST = {"server_ready": 20.0, "probe": 1.0, "generation": 3.0, "grace": 3.0}


def run_server(
    tmp_path: Path, mode: str, *extra: str, engine: str = "openai", **timeouts: float
) -> tuple[RungResult, dict[str, int]]:
    port = free_port()
    pid_file = tmp_path / "pids.json"
    launch = fake_launch(port, mode, pid_file, *extra, engine=engine)
    spec = server_spec(launch, tmp_path / "logs", **{**FAST, **timeouts})
    report = run_ladder(spec)
    result = report.result("server")
    pids = read_pids(pid_file)
    assert group_alive(pids["pgid"]) == [], f"processes left behind: {group_alive(pids['pgid'])}"
    return result, pids


def tail_text(result: RungResult) -> str:
    return "\n".join(result.output_tail)


@pytest.mark.parametrize("engine", ["openai", "sglang"])
def test_ready_server_passes_with_a_real_generation(tmp_path: Path, engine: str) -> None:
    result, _ = run_server(tmp_path, "ready", "--child", engine=engine)
    assert result.status is RungStatus.PASS, result
    assert result.facts["text"] == "Paris is the capital of France"
    assert result.facts["tokens"] == 6
    assert result.facts["ttft_s"] > 0
    assert result.facts["tokens_per_s"] > 0
    assert Path(result.facts["log"]).read_text().count("fake-engine: starting") == 1


def test_strict_openai_server_is_asked_for_the_command_lines_model(tmp_path: Path) -> None:
    """A server that cannot list its models (`transformers serve` lists the hub cache,
    and answers 500 where there is none) and refuses fields outside the OpenAI API."""
    result, _ = run_server(tmp_path, "strict", "--model", "/models/tiny")
    assert result.status is RungStatus.PASS, (result.summary, tail_text(result))
    assert result.facts["model"] == "/models/tiny"
    assert result.facts["model_from"].startswith("the command line (GET /v1/models: HTTP 500")
    assert result.facts["tokens"] == 6


def test_strict_server_without_a_model_on_its_command_line_fails(tmp_path: Path) -> None:
    result, _ = run_server(tmp_path, "strict")
    assert result.status is RungStatus.FAIL
    assert "GET /v1/models: HTTP 500" in result.summary


def test_process_that_exits_at_once_fails_fast_with_its_log(tmp_path: Path) -> None:
    result, _ = run_server(tmp_path, "exit", server_ready=60.0)
    assert result.status is RungStatus.FAIL
    assert "exited with code 3" in result.summary
    assert "model path does not exist" in tail_text(result)
    assert result.duration_s < 15


def test_server_that_never_binds_times_out(tmp_path: Path) -> None:
    result, _ = run_server(tmp_path, "never-bind", "--child", server_ready=4.0)
    assert result.status is RungStatus.FAIL
    assert "not ready within 4 s" in result.summary
    assert "connection refused" in result.summary
    assert "loading weights" in tail_text(result)


def test_503_while_starting_means_keep_waiting(tmp_path: Path) -> None:
    result, _ = run_server(tmp_path, "slow-start", "--ready-after", "3")
    assert result.status is RungStatus.PASS, result
    assert result.facts["ready_s"] >= 3
    log = Path(result.facts["log"]).read_text()
    assert '"GET /health HTTP/1.1" 503' in log


def test_health_200_while_generation_fails_is_a_failure(tmp_path: Path) -> None:
    result, _ = run_server(tmp_path, "broken-generation", server_ready=60.0)
    assert result.status is RungStatus.FAIL
    assert "HTTP 200" in result.summary
    assert "generation failed" in result.summary
    assert "HTTP 500" in result.summary
    assert "head_dim=16" in tail_text(result)
    assert result.facts["log_errors"] == [
        "RuntimeError: attention kernel does not support head_dim=16"
    ]
    assert result.output_tail[0].startswith("[error in log] RuntimeError")
    assert result.duration_s < 30


def test_generation_that_hangs_fails_after_its_timeout(tmp_path: Path) -> None:
    result, _ = run_server(tmp_path, "hang-generation", engine="sglang", generation=2.0)
    assert result.status is RungStatus.FAIL
    assert "no answer within 2.0 s" in result.summary
    assert "listening on" in tail_text(result)


def test_health_probe_that_hangs_is_bounded_by_the_deadline(tmp_path: Path) -> None:
    result, _ = run_server(tmp_path, "hang-health", server_ready=4.0)
    assert result.status is RungStatus.FAIL
    assert "not ready within 4 s" in result.summary
    assert "GET /health: no answer within" in result.summary
    assert result.duration_s < 15


def test_server_ignoring_sigterm_is_killed(tmp_path: Path) -> None:
    result, _ = run_server(tmp_path, "ready", "--ignore-term", "--child", grace=1.0)
    assert result.status is RungStatus.PASS
    assert result.facts["exit_code"] == -9


def test_expected_text_is_checked(tmp_path: Path) -> None:
    port = free_port()
    launch = replace(fake_launch(port, "ready", tmp_path / "pids.json"), expected_text="Berlin")
    report = run_ladder(server_spec(launch, tmp_path / "logs", **FAST))
    result = report.result("server")
    assert result.status is RungStatus.FAIL
    assert "expected text 'Berlin'" in result.summary
    assert group_alive(read_pids(tmp_path / "pids.json")["pgid"]) == []


def test_port_already_taken_is_refused_before_launch(tmp_path: Path) -> None:
    with socket.socket() as stale:
        stale.bind(("127.0.0.1", 0))
        stale.listen()
        port = stale.getsockname()[1]
        pid_file = tmp_path / "pids.json"
        report = run_ladder(server_spec(fake_launch(port, "ready", pid_file), tmp_path, **FAST))
    result = report.result("server")
    assert result.status is RungStatus.FAIL
    assert f"port {port} is already in use" in result.summary
    assert not pid_file.exists(), "the server must not have been started"


def test_a_launch_naming_a_missing_model_is_not_started(tmp_path: Path) -> None:
    """unpack's models step found the model nowhere: the rung fails at once with the
    step's reason and the fetch command, and the server is never started (the engine's
    double would write its pid file on start)."""
    from repro.ladder import UnreadyModel

    port = free_port()
    pid_file = tmp_path / "pids.json"
    place = tmp_path / "models" / "tiny"
    launch = fake_launch(port, "ready", pid_file, "--model", str(place))
    unready = UnreadyModel(
        "tiny",
        "missing",
        "not under its recorded path: put it at " + str(place),
        f"hf download org/tiny --local-dir {place}",
        (str(place), "org/tiny"),
    )
    spec = replace(server_spec(launch, tmp_path / "logs", **FAST), unready_models=(unready,))
    result = run_ladder(spec).result("server")
    assert result.status is RungStatus.FAIL
    assert result.summary.startswith(f"{launch.name}: not launched: model tiny is missing")
    assert result.hint == f"hf download org/tiny --local-dir {place}, then run unpack again"
    assert result.facts["models"] == {"tiny": "missing"}
    assert result.duration_s < 1.0
    assert not pid_file.exists()


@pytest.mark.parametrize(
    ("argv", "named"),
    [
        (["vllm", "serve", "/m/tiny"], True),
        (["python", "-m", "sglang.launch_server", "--model-path=/m/tiny"], True),
        (["x", "--tokenizer", "/m/tiny/tokenizer.json"], True),
        (["vllm", "serve", "org/tiny"], True),
        (["vllm", "serve", "/m/tiny2"], False),
        (["vllm", "serve", "/m/tinyx/org/tiny2"], False),
    ],
)
def test_which_launch_commands_name_a_model(argv: list[str], named: bool) -> None:
    from repro.ladder import LaunchSpec, UnreadyModel
    from repro.ladder.server import names_model

    model = UnreadyModel("tiny", "different", "...", None, ("/m/tiny", "org/tiny"))
    assert names_model(LaunchSpec("l", 1, "vllm", argv=tuple(argv)), model) is named
    shell = LaunchSpec("l", 1, "vllm", shell=" ".join(argv))
    assert names_model(shell, model) is named
