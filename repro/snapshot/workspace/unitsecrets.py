"""Take the credentials out of a unit file before it enters a bundle.

From `Environment=` (every assignment of a line, quoted or not): a variable whose name
says it is a credential (repro.redaction.is_secret_variable), or whose value looks like a
token or is a URL with credentials. From the command lines (`ExecStart=`,
`ExecStartPre=`, `ExecStartPost=`, `ExecReload=`, `ExecStop=`...): the value of a
credential flag (`--token=V`, `--token V`, `--api-key V`, `--hf-token V`,
`--password V`), a token-shaped string anywhere, the user:password of a URL.

An assignment goes away; an argument's value becomes `${NAME}` (systemd expands it
from the environment). Every NAME is then provided by the drop-in (repro.units.dropin) the
unit now reads. Lines with nothing to take keep their bytes; a changed line is written
anew as one line, its words quoted as systemd reads them.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from repro.redaction import (
    TOKEN_VALUE,
    is_secret_variable,
    looks_like_token,
    secret_assignment,
)
from repro.units.command import EXEC_KEYS, Word, split_words
from repro.units.dropin import dropin_reference
from repro.units.text import unit_lines

_URL_USERINFO = re.compile(r"(?P<scheme>[A-Za-z][A-Za-z0-9+.-]*://)(?P<userinfo>[^/@\s]+)@")
_REFERENCE = re.compile(r"\$\{?[A-Za-z_][A-Za-z0-9_]*\}?")
_BARE_WORD = re.compile(r"[^\s\"'\\;]+")
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


@dataclass(frozen=True)
class TakenSecret:
    """One credential taken out: what the operator sets, and where it was."""

    name: str  # the variable the drop-in lists
    key: str  # the unit setting it was in: Environment, ExecStart, ...
    why: str  # "its name", "the value of --api-key", ...


@dataclass(frozen=True)
class CleanUnit:
    text: str
    taken: tuple[TakenSecret, ...]
    values: tuple[str, ...] = field(repr=False)  # what was taken: kept in memory only

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(sorted({item.name for item in self.taken}))


@dataclass
class _Names:
    """Variable names handed out for a unit, each for one value."""

    used: dict[str, str] = field(default_factory=dict)  # name -> value
    plain: set[str] = field(default_factory=set)  # names the unit sets with no secret

    def take(self, wanted: str, value: str) -> str:
        for name, known in self.used.items():
            if known == value:
                return name  # the same credential twice (--token=$HF_TOKEN's value)
        base = wanted if _NAME.fullmatch(wanted) else "SECRET"
        name, count = base, 1
        while name in self.used or name in self.plain:
            count += 1
            name = f"{base}_{count}"
        self.used[name] = value
        return name


def secret_flag(word: str) -> bool:
    """`--token`, `--api-key`, `--hf-token`, `--password`: a flag whose value is a
    credential (not `--tokenizer`, `--max-tokens`, `--ssl-keyfile`)."""
    return word.startswith("-") and len(word) > 1 and is_secret_variable(word.lstrip("-"))


def _flag_variable(flag: str) -> str:
    return flag.lstrip("-").upper().replace("-", "_")


def quote_word(word: Word) -> str:
    """A word as systemd reads it back: bare where it can be, else double-quoted."""
    text = word.text
    if text == ";":
        return "\\;" if word.quoted else ";"
    if _BARE_WORD.fullmatch(text):
        return text
    escaped = []
    for char in text:
        if char in '"\\':
            escaped.append("\\" + char)
        elif char == "\n":
            escaped.append("\\n")
        elif char == "\t":
            escaped.append("\\t")
        elif ord(char) < 0x20 or ord(char) == 0x7F:
            escaped.append(f"\\x{ord(char):02x}")
        else:
            escaped.append(char)
    return '"' + "".join(escaped) + '"'


class _Cleaner:
    def __init__(self, unit: str, names: _Names) -> None:
        self.unit = unit
        self.names = names
        self.taken: list[TakenSecret] = []
        self.values: list[str] = []

    def _take(self, wanted: str, value: str, key: str, why: str) -> str:
        name = self.names.take(wanted, value)
        self.taken.append(TakenSecret(name, key, why))
        self.values.append(value)
        return name

    def environment(self, value: str) -> str | None:
        """The Environment= value without its credentials (None: nothing left)."""
        words = split_words(value)
        kept: list[Word] = []
        for word in words:
            name, sep, assigned = word.text.partition("=")
            why = secret_assignment(name, assigned) if sep and _NAME.fullmatch(name) else None
            if why is None:
                kept.append(word)
            else:
                self._take(name, assigned, "Environment", why)
        if len(kept) == len(words):
            return value
        return " ".join(quote_word(word) for word in kept) if kept else None

    def _inside(self, text: str, key: str, flag: str | None) -> str:
        """Token-shaped strings and URL user:password inside a word become ${NAME}."""
        wanted = _flag_variable(flag) if flag else "SECRET"

        def userinfo(match: re.Match[str]) -> str:
            info = match.group("userinfo")
            plain_user = ":" not in info and not looks_like_token(info)
            if ("ssh" in match.group("scheme").lower() and plain_user) or _REFERENCE.fullmatch(
                info
            ):
                return match.group(0)
            wanted_url = (f"{_flag_variable(flag)}_" if flag else "") + "URL_CREDENTIALS"
            name = self._take(wanted_url, info, key, "credentials in a URL")
            return f"{match.group('scheme')}${{{name}}}@"

        def token(match: re.Match[str]) -> str:
            name = self._take(wanted, match.group(0), key, "a value that looks like a token")
            return f"${{{name}}}"

        return TOKEN_VALUE.sub(token, _URL_USERINFO.sub(userinfo, text))

    def command(self, key: str, value: str) -> str:
        words = split_words(value)
        out: list[Word] = []
        changed = False
        pending: str | None = None  # a credential flag whose value is the next word
        for word in words:
            text = word.text
            if pending is not None and not text.startswith("-"):
                if not _REFERENCE.fullmatch(text):
                    name = self._take(_flag_variable(pending), text, key, f"the value of {pending}")
                    text = f"${{{name}}}"
                pending = None
            elif text.startswith("-") and "=" in text:
                flag, _, assigned = text.partition("=")
                if secret_flag(flag) and assigned and not _REFERENCE.fullmatch(assigned):
                    name = self._take(_flag_variable(flag), assigned, key, f"the value of {flag}")
                    text = f"{flag}=${{{name}}}"
                else:
                    text = f"{flag}={self._inside(assigned, key, flag)}"
                pending = None
            elif secret_flag(text):
                pending = text
            else:
                previous = out[-1].text if out and out[-1].text.startswith("--") else None
                text = self._inside(text, key, previous)
                pending = None
            changed = changed or text != word.text
            out.append(Word(text, word.quoted))
        if not changed:
            return value
        return " ".join(quote_word(word) for word in out)


def clean_unit(text: str, *, unit: str, source: str | None = None) -> CleanUnit:
    """`text` without its credentials, and what was taken. When anything was, the
    unit's [Service] (or the section that held the first one) reads the drop-in. The
    text is read as systemd reads it (repro.units.text; `source` names the file in a
    refusal, default the unit's name)."""
    lines = unit_lines(text, source=source or unit)
    assignments = (
        word.text.partition("=")
        for line in lines
        if line.kind == "assignment" and line.key == "Environment"
        for word in split_words(line.value)
    )
    plain = {name for name, _, value in assignments if secret_assignment(name, value) is None}
    cleaner = _Cleaner(unit, _Names(plain=plain))
    out: list[str] = []
    headers: dict[str, int] = {}  # section -> index in `out` just after its header
    first_section: str | None = None
    for line in lines:
        section = line.section or ""
        if line.kind == "section":
            out.extend(line.raw)
            headers.setdefault(section, len(out))
            continue
        key, value = line.key, line.value
        before = len(cleaner.taken)
        new: str | None = value
        if line.kind == "assignment" and key == "Environment" and value:
            new = cleaner.environment(value)
        elif line.kind == "assignment" and key in EXEC_KEYS and value:
            new = cleaner.command(key, value)
        if len(cleaner.taken) == before:
            out.extend(line.raw)
            continue
        first_section = first_section or section
        if new is not None:
            out.append(f"{key}={new}\n")
    if cleaner.taken:
        where = "Service" if "Service" in headers else first_section or ""
        at = headers.get(where, len(out))
        out.insert(at, dropin_reference(unit) + "\n")
    return CleanUnit("".join(out), tuple(cleaner.taken), tuple(cleaner.values))
