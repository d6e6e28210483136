"""Reading a unit's ExecStart= as systemd does, and telling which server it runs."""

from __future__ import annotations

import pytest

from repro.errors import PortNotANumber
from repro.servecmd import ModelArgument, engine_of, model_arguments, port_of, serve_command
from repro.units.command import parse_service, split_words


def service(body: str, *, head: str = "[Unit]\nDescription=x\n\n") -> str:
    return f"{head}[Service]\n{body}\n[Install]\nWantedBy=multi-user.target\n"


ARGV_CASES = [
    # (what, [Service] body, argv)
    ("plain", "ExecStart=/v/bin/python -m x --port 1", ("/v/bin/python", "-m", "x", "--port", "1")),
    ("prefix -", "ExecStart=-/bin/srv a", ("/bin/srv", "a")),
    ("prefixes +!:", "ExecStart=+!:/bin/srv a", ("/bin/srv", "a")),
    ("prefix @ drops argv[0]", "ExecStart=@/bin/srv srv-name a b", ("/bin/srv", "a", "b")),
    ("prefixes -@", "ExecStart=-@/bin/srv name a", ("/bin/srv", "a")),
    ("last ExecStart wins", "ExecStart=/bin/a\nExecStart=/bin/b x", ("/bin/b", "x")),
    ("empty ExecStart resets", "ExecStart=/bin/a\nExecStart=\nExecStart=/bin/c", ("/bin/c",)),
    (
        "continuation",
        "ExecStart=/bin/srv \\\n    --a 1 \\\n    --b 2",
        ("/bin/srv", "--a", "1", "--b", "2"),
    ),
    (
        "comment inside a continuation",
        "ExecStart=/bin/srv \\\n# a comment\n    --a 1",
        ("/bin/srv", "--a", "1"),
    ),
    ("double quotes", 'ExecStart=/bin/srv --name "two words"', ("/bin/srv", "--name", "two words")),
    ("single quotes", "ExecStart=/bin/srv '--name=a b'", ("/bin/srv", "--name=a b")),
    ("quote inside a word", 'ExecStart=/bin/srv --x="a b"c', ("/bin/srv", "--x=a bc")),
    # systemd decodes C escapes inside single quotes too; shlex keeps them literal
    ("escape in single quotes", "ExecStart=/bin/srv 'a\\tb'", ("/bin/srv", "a\tb")),
    # outside quotes, shlex would give "asb"
    ("escape \\s", "ExecStart=/bin/srv a\\sb", ("/bin/srv", "a b")),
    ("hex escape", "ExecStart=/bin/srv \\x41", ("/bin/srv", "A")),
    ("unknown escape kept", "ExecStart=/bin/srv a\\qb", ("/bin/srv", "a\\qb")),
    ("lone ; separates, last taken", "ExecStart=/bin/a 1 ; /bin/b 2", ("/bin/b", "2")),
    ("escaped ; is literal", "ExecStart=/bin/a \\; b", ("/bin/a", ";", "b")),
    (
        "${VAR} is one word",
        'Environment="ARGS=--a 1"\nExecStart=/bin/srv ${ARGS}',
        ("/bin/srv", "--a 1"),
    ),
    (
        "$VAR alone is split",
        'Environment="ARGS=--a 1"\nExecStart=/bin/srv $ARGS',
        ("/bin/srv", "--a", "1"),
    ),
    (
        "${VAR} inside a word",
        "Environment=P=9\nExecStart=/bin/srv --port=${P}",
        ("/bin/srv", "--port=9"),
    ),
    ("$VAR inside a word stays", "Environment=P=9\nExecStart=/bin/srv x$P", ("/bin/srv", "x$P")),
    ("$$ is a dollar", "ExecStart=/bin/srv $$HOME", ("/bin/srv", "$HOME")),
    ("unset variable is empty", "ExecStart=/bin/srv a $NOPE b", ("/bin/srv", "a", "b")),
    (
        "later Environment= wins",
        "Environment=P=1\nEnvironment=P=2\nExecStart=/bin/srv ${P}",
        ("/bin/srv", "2"),
    ),
    (
        "REPRO variables are kept",
        "Environment=REPRO_HOME=/x\n"
        "ExecStart=${REPRO_VENV}/bin/python $REPRO_HOME ${REPRO_MODELS}/m",
        ("${REPRO_VENV}/bin/python", "${REPRO_HOME}", "${REPRO_MODELS}/m"),
    ),
    ("specifiers", "ExecStart=/bin/srv %n %N %%", ("/bin/srv", "llm.service", "llm", "%")),
    ("other sections ignored", "ExecStart=/bin/srv", ("/bin/srv",)),
    ("no ExecStart", "Restart=always", ()),
]


@pytest.mark.parametrize(("what", "body", "argv"), ARGV_CASES, ids=[c[0] for c in ARGV_CASES])
def test_execstart_argv(what: str, body: str, argv: tuple[str, ...]) -> None:
    head = "[Unit]\nExecStart=/bin/not-this\n\n"
    assert parse_service(service(body, head=head), unit="llm.service").argv == argv


def test_split_words_marks_quoted_words() -> None:
    words = split_words("a ';' \"b c\"")
    assert [(w.text, w.quoted) for w in words] == [("a", False), (";", True), ("b c", True)]


def test_a_quoted_semicolon_is_a_word() -> None:
    parsed = parse_service(service('ExecStart=/bin/a ";" b'), unit="x.service")
    assert parsed.argv == ("/bin/a", ";", "b")


def test_environment_and_working_directory() -> None:
    parsed = parse_service(
        service(
            'Environment="A=1 2" B=x\nEnvironment=C=%n\n'
            "WorkingDirectory=-/srv/app\nExecStart=/bin/srv"
        ),
        unit="llm.service",
    )
    assert parsed.environment == {"A": "1 2", "B": "x", "C": "llm.service"}
    assert parsed.working_directory == "/srv/app"
    assert parsed.prefixes == ""


def test_empty_environment_resets() -> None:
    parsed = parse_service(service("Environment=A=1\nEnvironment=\nEnvironment=B=2"), unit="x")
    assert parsed.environment == {"B": "2"}


def test_unknown_variable_and_specifier_are_named() -> None:
    parsed = parse_service(service("ExecStart=/bin/srv ${NOPE} %h"), unit="x.service")
    assert parsed.argv == ("/bin/srv", "", "%h")
    assert any("$NOPE" in w and "no Environment= line sets" in w for w in parsed.warnings)
    assert any("%h is not resolved" in w for w in parsed.warnings)


def test_prefixes_are_recorded() -> None:
    parsed = parse_service(service("ExecStart=-@/bin/srv name a"), unit="x.service")
    assert parsed.prefixes == "-@"


ENGINE_CASES = [
    # (argv, engine, port)
    (("/v/bin/python", "-m", "sglang.launch_server", "--model-path", "/m"), "sglang", 30000),
    (("python3", "-u", "-m", "sglang.launch_server", "--port", "31000"), "sglang", 31000),
    (("/v/bin/sglang", "serve", "--model-path", "/m", "--port=30001"), "sglang", 30001),
    (("/v/bin/vllm", "serve", "Qwen/Qwen3-8B"), "vllm", 8000),
    (("vllm", "serve", "/m", "--port", "8100"), "vllm", 8100),
    (("python", "-m", "vllm.entrypoints.openai.api_server", "--model", "/m"), "vllm", 8000),
    (("/opt/tgi/bin/server", "--port", "8080"), "openai", 8080),
    (("python", "-m", "http.server", "8000"), None, None),
    (("/bin/true",), None, None),
    ((), None, None),
    (("python", "script.py", "-m", "sglang.launch_server"), None, None),
]


@pytest.mark.parametrize(("argv", "engine", "port"), ENGINE_CASES)
def test_engine_and_port(argv: tuple[str, ...], engine: str | None, port: int | None) -> None:
    assert engine_of(argv) == engine
    command = serve_command(argv)
    if engine is None:
        assert command is None
    else:
        assert command is not None and (command.engine, command.port) == (engine, port)


@pytest.mark.parametrize("value", ["${PORT}", "http", "70000", "0"])
def test_a_port_that_is_not_a_number(value: str) -> None:
    with pytest.raises(PortNotANumber):
        port_of(("/bin/srv", "--port", value), "openai")


MODEL_CASES = [
    (
        (
            "python",
            "-m",
            "sglang.launch_server",
            "--model-path",
            "/m/t",
            "--tokenizer-path",
            "/m/k",
        ),
        [("--model-path", "/m/t", "target"), ("--tokenizer-path", "/m/k", "target")],
    ),
    (
        ("sglang", "serve", "--model-path=/m/t", "--speculative-draft-model-path", "/w/d"),
        [("--model-path", "/m/t", "target"), ("--speculative-draft-model-path", "/w/d", "drafter")],
    ),
    (
        ("vllm", "serve", "/m/t", "--tokenizer", "/m/k", "--draft-model", "/m/d"),
        [
            ("serve", "/m/t", "target"),
            ("--tokenizer", "/m/k", "target"),
            ("--draft-model", "/m/d", "drafter"),
        ],
    ),
    (("vllm", "serve", "--model", "Qwen/Qwen3-8B"), [("--model", "Qwen/Qwen3-8B", "target")]),
    (("vllm", "serve", "--port", "1"), []),
    (("srv", "--model"), []),
    ((), []),
]


@pytest.mark.parametrize(("argv", "models"), MODEL_CASES)
def test_model_arguments(argv: tuple[str, ...], models: list[tuple[str, str, str]]) -> None:
    assert model_arguments(argv) == tuple(ModelArgument(*m) for m in models)  # type: ignore[arg-type]
