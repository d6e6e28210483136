"""The command a systemd service runs, read as systemd reads it.

Rules from systemd.service(5) ("Command lines") and systemd.syntax(7). From a unit
file's [Service] section: the last ExecStart= (an empty one resets the list), split
into words, its prefixes taken off, variables from Environment= expanded; the
Environment= assignments themselves and WorkingDirectory=. ${REPRO_VENV},
${REPRO_HOME} and ${REPRO_MODELS} stay as variables: the unpacker fills them in.

Where this differs from shlex.split (POSIX mode):

- C escapes (``\\n``, ``\\t``, ``\\s``, ``\\xNN``, ``\\NNN``, ``\\uXXXX``...) are decoded,
  outside quotes and inside both kinds of quotes; shlex keeps single-quoted text
  literal and, outside quotes, turns ``\\n`` into ``n``.
- An unknown escape (``\\q``) is kept as it is; systemd refuses the line.
- A lone ``;`` separates commands (``\\;`` is a literal one); the last command is taken.
- ``$NAME`` as a word of its own becomes zero or more words (its value split at
  whitespace); ``${NAME}`` anywhere becomes exactly its value; ``$$`` is ``$``.
  A ``$NAME`` inside a longer word stays as it is. A variable that Environment= does
  not set expands to nothing (systemd would take EnvironmentFile= values and its own
  $MAINPID & co.; those are not known here, so a warning names each).
- Specifiers: ``%%``, ``%n`` (unit name), ``%N``, ``%p``, ``%i``, ``%I`` are
  resolved; other ``%x`` are kept and named in a warning.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field

from repro.units.names import VARIABLES
from repro.units.text import unit_assignments

PREFIX_CHARS = "-@+!:"
_SIMPLE_ESCAPES = {
    "a": "\a",
    "b": "\b",
    "f": "\f",
    "n": "\n",
    "r": "\r",
    "t": "\t",
    "v": "\v",
    "s": " ",
    "\\": "\\",
    '"': '"',
    "'": "'",
    ";": ";",
}
_HEX_ESCAPES = {"x": 2, "u": 4, "U": 8}
_WHOLE_VARIABLE = re.compile(r"\$([A-Za-z_][A-Za-z0-9_]*)")
_VARIABLE = re.compile(r"\$\$|\$\{([A-Za-z_][A-Za-z0-9_]*)\}")
_SPECIFIER = re.compile(r"%(.)")


@dataclass(frozen=True)
class Word:
    """One word of a command line; `quoted` when any part of it was quoted or escaped
    (so a ";" word that is quoted or escaped is no command separator)."""

    text: str
    quoted: bool


@dataclass(frozen=True)
class ServiceExec:
    """What a [Service] section runs: argv is empty when there is no ExecStart=."""

    unit: str
    argv: tuple[str, ...]
    prefixes: str  # the ExecStart= prefixes given, e.g. "-" or "@+"
    environment: Mapping[str, str] = field(default_factory=dict)
    working_directory: str | None = None
    warnings: tuple[str, ...] = ()


# Every setting whose value is a command systemd runs, in the order of a unit's life:
# [Service] (systemd.service(5)) and [Socket] (systemd.socket(5)).
EXEC_KEYS = (
    "ExecCondition",
    "ExecStartPre",
    "ExecStart",
    "ExecStartPost",
    "ExecReload",
    "ExecStop",
    "ExecStopPre",
    "ExecStopPost",
)
EXEC_SECTIONS = ("Service", "Socket")


def service_settings(text: str, *, source: str = "unit file") -> list[tuple[str, str]]:
    """(key, value) of each assignment in [Service], in order, read as systemd reads
    the file (repro.units.text: comments dropped, continuations joined, text systemd would
    read otherwise refused)."""
    return [
        (key, value)
        for section, key, value in unit_settings(text, source=source)
        if section == "Service"
    ]


def unit_commands(text: str, *, source: str = "unit file") -> list[tuple[str, str]]:
    """(key, command line) of every command a unit file makes systemd run: each Exec*=
    of [Service] and [Socket] (EXEC_KEYS), in that order, each key's lines in file
    order; an empty assignment resets the lines of its key before it."""
    lines: dict[tuple[str, str], list[str]] = {}
    for section, key, value in unit_settings(text, source=source):
        if section in EXEC_SECTIONS and key in EXEC_KEYS:
            slot = lines.setdefault((section, key), [])
            if value:
                slot.append(value)
            else:
                slot.clear()
    return [
        (key, command)
        for section in EXEC_SECTIONS
        for key in EXEC_KEYS
        for command in lines.get((section, key), [])
    ]


def unit_settings(text: str, *, source: str = "unit file") -> list[tuple[str, str, str]]:
    """(section, key, value) of each assignment of a unit file, in order
    (repro.units.text.unit_assignments; `source` names the file in a refusal)."""
    return [
        (line.section or "", line.key, line.value) for line in unit_assignments(text, source=source)
    ]


def _escape(text: str, index: int) -> tuple[str, int]:
    """The character(s) an escape at text[index] == '\\' stands for, and the next index."""
    if index + 1 >= len(text):
        return "\\", index + 1
    char = text[index + 1]
    if char in _SIMPLE_ESCAPES:
        return _SIMPLE_ESCAPES[char], index + 2
    if char in _HEX_ESCAPES:
        digits = text[index + 2 : index + 2 + _HEX_ESCAPES[char]]
        if len(digits) == _HEX_ESCAPES[char] and all(c in "0123456789abcdefABCDEF" for c in digits):
            return chr(int(digits, 16)), index + 2 + len(digits)
    octal = text[index + 1 : index + 4]
    if len(octal) == 3 and all(c in "01234567" for c in octal):
        return chr(int(octal, 8)), index + 4
    return "\\" + char, index + 2


def split_words(text: str) -> list[Word]:
    """Split at whitespace outside quotes, removing quotes and decoding escapes."""
    words: list[Word] = []
    current: list[str] = []
    in_word = quoted = False
    quote: str | None = None
    index = 0
    while index < len(text):
        char = text[index]
        if char == "\\":
            decoded, index = _escape(text, index)
            current.append(decoded)
            in_word = quoted = True
            continue
        if quote is not None:
            if char == quote:
                quote = None
            else:
                current.append(char)
        elif char in "\"'":
            quote = char
            in_word = quoted = True
        elif char.isspace():
            if in_word:
                words.append(Word("".join(current), quoted))
            current, in_word, quoted = [], False, False
        else:
            current.append(char)
            in_word = True
        index += 1
    if in_word:
        words.append(Word("".join(current), quoted))
    return words


def _specifiers(text: str, unit: str, warnings: list[str]) -> str:
    stem, _, _ = unit.rpartition(".")
    prefix, _, instance = stem.partition("@")
    known = {"%": "%", "n": unit, "N": stem, "p": prefix, "i": instance, "I": instance}

    def replace(match: re.Match[str]) -> str:
        letter = match.group(1)
        if letter in known:
            return known[letter]
        warnings.append(f"{unit}: specifier %{letter} is not resolved")
        return match.group(0)

    return _SPECIFIER.sub(replace, text)


def _value(name: str, environment: Mapping[str, str], unit: str, warnings: list[str]) -> str:
    if name in environment:
        return environment[name]
    warnings.append(
        f"{unit}: ExecStart= uses ${name}, which no Environment= line sets; it expands to nothing"
    )
    return ""


def expand_words(
    words: Sequence[Word],
    environment: Mapping[str, str],
    *,
    unit: str,
    warnings: list[str],
    provided: Collection[str] = (),
) -> list[str]:
    """systemd's variable expansion of an already split command line; the variables
    of `provided` (set on the target, by the secrets drop-in) stay as ${NAME}."""
    kept = {*VARIABLES, *provided}
    argv: list[str] = []
    for word in words:
        whole = _WHOLE_VARIABLE.fullmatch(word.text)
        if whole is not None:
            name = whole.group(1)
            if name in kept:
                argv.append(f"${{{name}}}")
            else:
                argv.extend(_value(name, environment, unit, warnings).split())
            continue

        def replace(match: re.Match[str]) -> str:
            name = match.group(1)
            if name is None:
                return "$"
            if name in kept:
                return f"${{{name}}}"
            return _value(name, environment, unit, warnings)

        argv.append(_VARIABLE.sub(replace, word.text))
    return argv


def _commands(words: Sequence[Word]) -> list[list[Word]]:
    """Split at lone, unquoted ';' words."""
    commands: list[list[Word]] = [[]]
    for word in words:
        if word.text == ";" and not word.quoted:
            commands.append([])
        else:
            commands[-1].append(word)
    return [command for command in commands if command]


def _environment(values: Sequence[str], unit: str, warnings: list[str]) -> dict[str, str]:
    environment: dict[str, str] = {}
    for value in values:
        if not value:
            environment.clear()  # an empty assignment resets the list
            continue
        for word in split_words(_specifiers(value, unit, warnings)):
            name, sep, assigned = word.text.partition("=")
            if not sep or not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name):
                warnings.append(f"{unit}: Environment= {word.text!r} is not NAME=VALUE; ignored")
                continue
            environment[name] = assigned
    return environment


def parse_service(
    text: str, *, unit: str, provided: Collection[str] = (), source: str | None = None
) -> ServiceExec:
    """The command, environment and working directory of a unit file's [Service];
    `provided` names variables the target sets (they stay ${NAME} in argv); `source`
    names the file in a refusal (default: the unit's name)."""
    warnings: list[str] = []
    settings = service_settings(text, source=source or unit)
    environment = _environment([v for k, v in settings if k == "Environment"], unit, warnings)
    starts: list[str] = []
    for key, value in settings:
        if key == "ExecStart":
            starts = [*starts, value] if value else []
    working = [v for k, v in settings if k == "WorkingDirectory"]
    directory = (
        _specifiers(working[-1].removeprefix("-"), unit, warnings)
        if working and working[-1]
        else None
    )
    if not starts:
        return ServiceExec(unit, (), "", environment, directory, tuple(warnings))
    commands = _commands(split_words(_specifiers(starts[-1], unit, warnings)))
    if len(commands) > 1:
        warnings.append(f"{unit}: ExecStart= holds {len(commands)} commands; the last is taken")
    if not commands:
        return ServiceExec(unit, (), "", environment, directory, tuple(warnings))
    first, *rest = commands[-1]
    program = first.text.lstrip(PREFIX_CHARS)
    prefixes = first.text[: len(first.text) - len(program)]
    words = [Word(program, first.quoted), *rest] if program else rest
    if "@" in prefixes and len(words) > 1:
        words = [words[0], *words[2:]]  # the second word is only argv[0] for the program
    argv = expand_words(words, environment, unit=unit, warnings=warnings, provided=provided)
    return ServiceExec(unit, tuple(argv), prefixes, environment, directory, tuple(warnings))
