"""The target's paths written into a bundle's unit text, escaped for the syntax each
lands in, and read back to prove systemd sees exactly the path.

A unit names ${REPRO_VENV}, ${REPRO_HOME} and ${REPRO_MODELS}; on the target each is a
path that may hold a space, "%", "$", a quote or a backslash. Plain text replacement
would split a command at the space or make systemd expand "%h" or "$HOME" in it. So,
per setting (systemd.service(5) "Command lines", systemd.unit(5) "Specifiers",
systemd.exec(5) Environment=):

- every setting: "%" is written "%%" (systemd resolves specifiers in nearly all);
- a command (ExecStart=, ExecStartPre=, ... repro.units.command.EXEC_KEYS): outside quotes
  a path that needs it is put in double quotes; inside quotes "\\" and the quote are
  escaped with a backslash; in an argument "$" is written "$$". The executable itself
  (a command's first word) is never variable-expanded by systemd and may not hold a
  quote or backslash at all (string_is_safe): such a path there is refused;
- Environment= and the path lists (ReadWritePaths=, ...): words as in a command, "$"
  as it is (systemd expands no variables there);
- any other setting (WorkingDirectory=, EnvironmentFile=, ...): the path as it is.

The rendered text is then read again (repro.units.text, repro.units.command.split_words): the
same lines and settings, and each value the template's with exactly the path in place
of the variable; anything else is refused (exit 2) before a file is written.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

from repro.errors import UnitPathError
from repro.units.command import EXEC_KEYS, split_words
from repro.units.names import VARIABLES
from repro.units.text import UnitLine, forbidden_character, physical_lines, unit_lines

_BLANKS = " \t\n\r"
# Settings whose value is a list of words with systemd's quoting (extract_first_word
# with EXTRACT_UNQUOTE): a space in a path must be quoted there too.
WORD_KEYS = frozenset(
    {
        "Environment",
        "ReadWritePaths",
        "ReadOnlyPaths",
        "InaccessiblePaths",
        "ExecPaths",
        "NoExecPaths",
        "BindPaths",
        "BindReadOnlyPaths",
    }
)
_UNSAFE_EXECUTABLE = "\"'\\$"
_PLACEHOLDER = re.compile(r"\$\{(REPRO_[A-Z]+)\}")
# where a model's unit text ends: what may follow a path in a unit or a command
_TOKEN_END = r"(?=[/\s\"':;,\\]|$)"


@dataclass(frozen=True)
class _Slot:
    """Where one ${REPRO_*} sits in a value: its quote, and for a command whether it is
    in the executable's word."""

    start: int
    end: int
    name: str
    quote: str | None
    executable: bool


def check_path_value(name: str, value: str) -> None:
    """A path repro writes into units: no control character (a newline would start a
    new setting, a tab split a word), nothing else unit text may not hold
    (repro.units.text), and no blank at its end (systemd strips it)."""
    bad = next((c for c in value if c in "\t\n" or forbidden_character(c)), None)
    if bad is not None:
        raise UnitPathError(
            f"{name} {value!r} holds U+{ord(bad):04X}, a control character: it would end "
            "or hide a line of the units repro writes with it",
            hint="choose a path of printable characters",
        )
    if value != value.rstrip(_BLANKS):
        raise UnitPathError(
            f"{name} {value!r} ends in a blank, which systemd strips from a setting",
            hint="choose a path that does not end in a space",
        )


def _slots(value: str, *, command: bool) -> list[_Slot]:
    """Each ${REPRO_*} in `value`, with the quote it is inside and (for a command)
    whether it is in a command's first word, walking systemd's word syntax."""
    slots: list[_Slot] = []
    quote: str | None = None
    word_start: int | None = None
    first = True  # the next word is a command's first (its executable)
    index = 0
    while index < len(value):
        char = value[index]
        match = _PLACEHOLDER.match(value, index)
        if match is not None and not _doubled_dollar(value, index, command):
            word_start = index if word_start is None else word_start
            slots.append(_Slot(index, match.end(), match.group(1), quote, command and first))
            index = match.end()
            continue
        if char == "\\":
            word_start = index if word_start is None else word_start
            index += 2
            continue
        if quote is not None:
            quote = None if char == quote else quote
        elif char in "\"'":
            quote = char
            word_start = index if word_start is None else word_start
        elif char in _BLANKS:
            if word_start is not None:
                lone = value[word_start:index] == ";"
                first = lone  # after a lone ";" a new command starts
            word_start = None
        elif word_start is None:
            word_start = index
        index += 1
    return slots


def _doubled_dollar(value: str, index: int, command: bool) -> bool:
    """`$${REPRO_X}` in a command is systemd's literal text "${REPRO_X}", no variable."""
    run = len(value[:index]) - len(value[:index].rstrip("$"))
    return command and run % 2 == 1


def _escaped(path: str, slot: _Slot, *, command: bool) -> str:
    """`path` as it must be written at `slot`."""
    text = path.replace("%", "%%")
    if command and not slot.executable:
        text = text.replace("$", "$$")
    if slot.quote is None:
        if not any(char in _BLANKS or char in "\"'\\;" for char in text):
            return text
        return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'
    return text.replace("\\", "\\\\").replace(slot.quote, "\\" + slot.quote)


def _render_value(key: str, value: str, values: Mapping[str, str], where: str) -> str:
    """The value with each ${REPRO_*} of `values` filled in, escaped for `key`."""
    command = key in EXEC_KEYS
    if not (command or key in WORD_KEYS):
        return _fill(value, values, dollars=False)
    out, last = [], 0
    for slot in _slots(value, command=command):
        if slot.name not in values:
            continue
        path = values[slot.name]
        if slot.executable:
            _refuse_executable(slot.name, path, key, where)
        out.append(value[last : slot.start])
        out.append(_escaped(path, slot, command=command))
        last = slot.end
    out.append(value[last:])
    return "".join(out)


def _refuse_executable(name: str, path: str, key: str, where: str) -> None:
    bad = sorted({char for char in path if char in _UNSAFE_EXECUTABLE})
    if bad:
        raise UnitPathError(
            f"{where}: {key}= runs a program under ${{{name}}} = {path!r}, which holds "
            f"{' '.join(repr(c) for c in bad)}: systemd refuses a quote or backslash in "
            'the executable of a command, and a "$" there would be expanded in argv[0] '
            "but not in the path it runs",
            hint="choose a --target (or --models) without quotes, backslashes or '$'",
        )


def _fill(text: str, values: Mapping[str, str], *, dollars: bool) -> str:
    """${REPRO_*} of `values` replaced by the path with "%" as "%%" (and, in a command's
    argument, `dollars`: "$" as "$$" and "$${REPRO_X}" left alone as systemd's literal
    text): the text systemd must read before its own expansions."""

    def one(match: re.Match[str]) -> str:
        if match.group(1) not in values or _doubled_dollar(text, match.start(), dollars):
            return match.group(0)
        path = values[match.group(1)].replace("%", "%%")
        return path.replace("$", "$$") if dollars else path

    return _PLACEHOLDER.sub(one, text)


def _expected_words(
    key: str, template: str, values: Mapping[str, str], rendered: str
) -> tuple[list[str], list[str]]:
    """The words the template's value gives with the paths in place, and those the
    rendered value gives (repro.units.command.split_words, systemd's word syntax)."""
    command = key in EXEC_KEYS
    expected: list[str] = []
    first = True  # a command's executable: systemd expands no "$" in it
    for word in split_words(template):
        expected.append(_fill(word.text, values, dollars=command and not first))
        first = command and word.text == ";" and not word.quoted
    return expected, [word.text for word in split_words(rendered)]


def _fill_raw(text: str, values: Mapping[str, str]) -> str:
    return _PLACEHOLDER.sub(lambda m: values.get(m.group(1), m.group(0)), text)


def _tokens(values: Mapping[str, str]) -> list[tuple[str, str]]:
    """The model places of `values`: keys that are a unit's text for a model
    (`${REPRO_MODELS}/<name>`, `${REPRO_HOME}/<path>`), longest first."""
    return sorted(
        ((k, v) for k, v in values.items() if k.startswith("${")),
        key=lambda item: len(item[0]),
        reverse=True,
    )


def _letters(index: int) -> str:
    out = ""
    index += 1
    while index:
        index, rest = divmod(index - 1, 26)
        out = chr(ord("A") + rest) + out
    return out


def with_placeholders(template: str, values: Mapping[str, str]) -> tuple[str, dict[str, str]]:
    """`values` may name, besides the variables, a model's unit text (a key such as
    `${REPRO_MODELS}/Kimi-K2.6`) with the place where the model was found: each such
    text in `template` becomes a variable of its own (${REPRO_PLACEDA}, ...) set to that
    place, so it is escaped and read back as the variables are."""
    plain = {k: v for k, v in values.items() if not k.startswith("${")}
    for index, (token, path) in enumerate(_tokens(values)):
        name = f"REPRO_PLACED{_letters(index)}"
        pattern = re.escape(token) + _TOKEN_END
        template = re.sub(pattern, f"${{{name}}}", template)
        plain[name] = path
    return template, plain


def place_models(text: str, values: Mapping[str, str]) -> str:
    """`text` (a launch command's word) with each model's unit text of `values` (see
    `with_placeholders`) replaced by the place where the model was found, as it is."""
    for token, path in _tokens(values):
        text = re.sub(re.escape(token) + _TOKEN_END, path.replace("\\", "\\\\"), text)
    return text


def render_unit_text(template: str, values: Mapping[str, str], *, source: str) -> str:
    """`template` (a bundle's unit) with ${REPRO_*} of `values` filled in, escaped for
    each setting, read back and checked; UnitPathError when systemd would read
    anything else. Lines without a variable keep their bytes; a changed setting is
    written on one line. A model's unit text in `values` is its place
    (`with_placeholders`)."""
    template, values = with_placeholders(template, values)
    for name, path in values.items():
        check_path_value(f"${{{name}}}", path)
    lines = unit_lines(template, source=source)
    out: list[str] = []
    for line in lines:
        if not _PLACEHOLDER.search(line.text):
            out.extend(line.raw)
        elif line.kind != "assignment":
            out.append(_fill_raw("".join(line.raw), values))
        else:
            new = _render_value(line.key, line.value, values, f"{source}:{line.number}")
            out.append(f"{_fill_raw(line.key, values)}={new}\n")
    rendered = "".join(out)
    _check_read_back(lines, rendered, values, source)
    return rendered


def _check_read_back(
    lines: list[UnitLine], rendered: str, values: Mapping[str, str], source: str
) -> None:
    """The rendered unit has the template's lines and settings, each value exactly the
    template's with the paths in place."""
    again = [line for line in unit_lines(rendered, source=source) if line.kind != "blank"]
    before = [line for line in lines if line.kind != "blank"]
    shape = [(line.kind, _fill_raw(line.key, values)) for line in before]
    if shape != [(line.kind, line.key) for line in again]:
        raise UnitPathError(
            f"{source}: the target's paths change the unit's lines when written into it "
            f"({', '.join(f'{k}={v!r}' for k, v in values.items())})",
            hint="choose a --target (or --models) of plain path characters",
        )
    for old, new in zip(before, again, strict=True):
        if old.kind != "assignment" or not _PLACEHOLDER.search(old.value):
            continue
        if old.key in EXEC_KEYS or old.key in WORD_KEYS:
            expected, actual = _expected_words(old.key, old.value, values, new.value)
        else:
            expected, actual = [_fill(old.value, values, dollars=False)], [new.value]
        if expected != actual:
            raise UnitPathError(
                f"{source}:{old.number}: {old.key}= would not read back as written: "
                f"expected {expected!r}, systemd reads {actual!r}",
                hint="choose a --target (or --models) of plain path characters",
            )


def render_env_text(template: str, values: Mapping[str, str], *, source: str) -> str:
    """An environment file (systemd.exec(5) EnvironmentFile=) with ${REPRO_*} filled in:
    outside single quotes "\\", '"', "$" and "`" are escaped with a backslash (systemd's
    env-file parser and a shell both read them back); inside single quotes nothing can
    be escaped, so a path holding "'" is refused there."""
    template, values = with_placeholders(template, values)
    for name, path in values.items():
        check_path_value(f"${{{name}}}", path)
    out: list[str] = []
    for number, line in enumerate(physical_lines(template, source=source), start=1):
        out.append(_render_env_line(line, values, f"{source}:{number}"))
    return "".join(out)


def _render_env_line(line: str, values: Mapping[str, str], where: str) -> str:
    """One line of an environment file, walked as systemd's parser does
    (parse_env_file_internal): quotes open only where a value (or a closed quoted part)
    starts; elsewhere they are plain characters."""
    if _is_env_comment(line) or "=" not in line:
        return _fill_raw(line, values)
    key, _, rest = line.partition("=")
    out: list[str] = [key, "="]
    state = "pre"  # "pre" (a value may start quoted), "bare", "'" or '"'
    index = 0
    while index < len(rest):
        match = _PLACEHOLDER.match(rest, index)
        if match is not None and match.group(1) in values:
            out.append(_env_escaped(values[match.group(1)], state, match.group(1), where))
            state = "bare" if state == "pre" else state
            index = match.end()
            continue
        char = rest[index]
        if char == "\\" and state != "'":
            out.append(rest[index : index + 2])
            state = "bare" if state == "pre" else state
            index += 2
            continue
        if state == "pre" and char in "\"'":
            state = char
        elif state in "\"'" and char == state:
            state = "pre"
        elif state == "pre" and char not in _BLANKS:
            state = "bare"
        out.append(char)
        index += 1
    return "".join(out)


def _is_env_comment(line: str) -> bool:
    stripped = line.lstrip(_BLANKS)
    return not stripped or stripped[0] in "#;"


def _env_escaped(path: str, state: str, name: str, where: str) -> str:
    if state != "'":
        return re.sub(r"([\\\"$`])", r"\\\1", path)
    if "'" in path:
        raise UnitPathError(
            f'{where}: ${{{name}}} = {path!r} holds a "\'" inside single quotes, which an '
            "environment file cannot escape",
            hint="choose a --target (or --models) without quotes",
        )
    return path


def render_unit(template: str, values: dict[str, str]) -> str:
    """Fill ${REPRO_*} variables in plain text (a launch command's argv); other ${...}
    (systemd's own) stay as they are; a model's unit text in `values` is replaced by
    its place (`place_models`). Unit text is rendered by `render_unit_text`, which
    escapes each path for its setting."""
    template = place_models(template, values)
    for name in VARIABLES:
        if name in values:
            template = template.replace(f"${{{name}}}", values[name])
    return template
