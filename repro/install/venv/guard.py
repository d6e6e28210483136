"""Is this venv's interpreter the one the venv step made?

`python -I -S` does not make a venv's own files trustworthy: the interpreter reads
`pyvenv.cfg` before anything else, and a `home =` pointing into files a wheel installed
makes it load that wheel's `encodings` package at start-up; a `bin/python` a wheel
replaced is the wheel's program. So right after the venv step made the venv, what it
made is recorded (`record_venv`: `pyvenv.cfg`'s sha256, each `bin/python*` as a link and
its destination or a file and its sha256) in the venv step's facts in
TARGET/.repro/state.toml, outside the venv; every later start of the target interpreter
by repro asks `trusted_interpreter` first, which compares the venv with that record and
refuses on any difference without running anything of it.

A target unpacked before the record existed has none: then only what holds for every
venv is checked (`pyvenv.cfg` a regular file whose `home` lies outside the venv, each
`bin/python*` link ending outside the venv).
"""

from __future__ import annotations

import hashlib
import os
import stat
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from repro.errors import InstallError
from repro.install.state import UnpackState, load_state

PYVENV_CFG = "pyvenv.cfg"
SCRIPTS = "bin"
# what the venv step makes that the interpreter is, or reads before any code runs
INTERPRETER_GLOB = "python*"


@dataclass(frozen=True)
class VenvDifference:
    """One of the venv's own files that is not as the venv step made it."""

    path: str  # relative to the venv
    expected: str
    found: str

    def describe(self) -> str:
        return f"{self.path}: expected {self.expected}, found {self.found}"


def _describe(path: Path) -> str:
    """What `path` is, in the words the record keeps: a link and its destination, a
    regular file and its sha256, or what else it is."""
    try:
        info = path.lstat()
    except FileNotFoundError:
        return "missing"
    except OSError as exc:
        return f"unreadable ({exc.strerror})"
    if stat.S_ISLNK(info.st_mode):
        return f"link to {os.readlink(path)}"
    if stat.S_ISDIR(info.st_mode):
        return "a directory"
    if not stat.S_ISREG(info.st_mode):
        return "not a regular file"
    digest = hashlib.sha256()
    with path.open("rb") as stream:
        while chunk := stream.read(1 << 20):
            digest.update(chunk)
    return f"file sha256 {digest.hexdigest()}"


def _own_files(venv: Path) -> list[str]:
    """The venv's own files as they are now, relative to it: pyvenv.cfg and every
    bin/python* entry."""
    names = [PYVENV_CFG]
    scripts = venv / SCRIPTS
    if scripts.is_dir() and not scripts.is_symlink():
        names += sorted(f"{SCRIPTS}/{p.name}" for p in scripts.glob(INTERPRETER_GLOB))
    return names


def _home(cfg: Path) -> str | None:
    """`home =` of a pyvenv.cfg, as the interpreter reads it (the first `home` key)."""
    try:
        text = cfg.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None
    for line in text.splitlines():
        key, sep, value = line.partition("=")
        if sep and key.strip().lower() == "home":
            return value.strip()
    return None


def _inside(path: Path, venv: Path) -> bool:
    return path == venv or venv in path.parents


def _rules(venv: Path) -> list[VenvDifference]:
    """What holds for every venv repro makes, record or not: a regular pyvenv.cfg whose
    `home` is outside the venv, and bin/python* links that end outside it."""
    out: list[VenvDifference] = []
    cfg = venv / PYVENV_CFG
    if not cfg.is_file() or cfg.is_symlink():
        return [VenvDifference(PYVENV_CFG, "a regular file", _describe(cfg))]
    home = _home(cfg)
    real = venv.resolve()
    if home is None:
        out.append(VenvDifference(PYVENV_CFG, "a `home =` line", "none"))
    elif _inside(Path(home).resolve(), real):
        out.append(
            VenvDifference(PYVENV_CFG, "home = the base interpreter's directory", f"home = {home}")
        )
    for rel in _own_files(venv)[1:]:
        path = venv / rel
        if path.is_symlink() and _inside(path.resolve(), real):
            out.append(VenvDifference(rel, "a link to the base interpreter", _describe(path)))
    return out


@dataclass(frozen=True)
class VenvRecord:
    """What the venv step made: each own file (relative path) and what it was."""

    files: Mapping[str, str]

    def to_facts(self) -> dict[str, str]:
        return dict(self.files)

    @classmethod
    def from_facts(cls, facts: object, *, where: str) -> VenvRecord:
        if not isinstance(facts, Mapping) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in facts.items()
        ):
            raise InstallError(
                f"{where}: the venv step's record of what it made is unreadable",
                hint="remove the target (or unpack with --replace) to build it again",
            )
        return cls(dict(facts))


def record_venv(venv: Path) -> VenvRecord:
    """What the venv step just made, to be kept in its facts; a venv that breaks the
    rules of every venv already (a base interpreter inside its own venv) is refused."""
    problems = _rules(venv)
    if problems:
        raise InstallError(_message(venv, problems, "record"))
    return VenvRecord({rel: _describe(venv / rel) for rel in _own_files(venv)})


def venv_differences(venv: Path, record: VenvRecord | None) -> list[VenvDifference]:
    """Every own file of `venv` that differs from `record` (with no record: every rule
    of a venv that does not hold), each once; nothing of the venv is run."""
    out = _rules(venv)
    if record is not None:
        seen = {d.path for d in out}
        for rel in sorted(set(record.files) | set(_own_files(venv))):
            expected = record.files.get(rel, "absent")
            found = _describe(venv / rel)
            if found == "missing" and expected == "absent":
                continue
            if found != expected and rel not in seen:
                out.append(VenvDifference(rel, expected, "absent" if found == "missing" else found))
    return out


def recorded(state: UnpackState) -> VenvRecord | None:
    """The venv step's record in `state`, None for a target unpacked before it existed."""
    facts = state.made_venv
    if facts is None:
        return None
    return VenvRecord.from_facts(facts, where=str(state.path))


def trusted_interpreter(target: Path, venv: Path, *, state: UnpackState | None = None) -> Path:
    """`venv`'s bin/python, once pyvenv.cfg and bin/python* are checked to be the ones
    the venv step made (as TARGET/.repro/state.toml records them); raises InstallError
    naming each difference, before anything of the venv runs."""
    state = state if state is not None else load_state(target)
    record = recorded(state) if state is not None else None
    problems = venv_differences(venv, record)
    if problems:
        raise InstallError(
            _message(venv, problems, "start"),
            hint=f"the venv was changed after repro made it; remove {venv} (or unpack with "
            "--replace) to build it again",
        )
    return venv / SCRIPTS / "python"


def _message(venv: Path, problems: list[VenvDifference], doing: str) -> str:
    if doing == "record":
        lead = "refusing the new venv: its own files break what every venv obeys"
    else:
        lead = (
            "refusing to start its interpreter: the venv's own files are not the ones the "
            "venv step made (the interpreter reads them before any code runs)"
        )
    return f"{venv}: {lead}:\n" + "\n".join(f"  - {venv / p.describe()}" for p in problems)
