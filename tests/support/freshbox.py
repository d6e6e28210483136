"""An isolated root ("fresh box") for tests, built with bubblewrap.

A round trip tested where the source workspace still exists proves nothing about a
fresh machine (DESIGN.md, principle 8). A box here shares only the host's /usr and
/etc, read-only; inside it:

- the network is unshared: only loopback, no route out;
- /proc, /dev and a read-only /sys as on any machine;
- /tmp is an empty tmpfs, /usr/local is empty, /work, /root, /opt and /home are not
  there (for "3.12" only the pyenv prefix of that Python, read-only at its own path);
- HOME is /box/home, PATH is /usr/local/bin:/usr/bin:/bin, PIP_CONFIG_FILE is
  /dev/null and /etc's pip configuration is masked, no PIP_* or UV_* variables;
- `python3` is the chosen Python: for "3.12" Debian's python3 and python3.11 are
  replaced by shims (python3 runs 3.12, python3.11 says "not on this box" and exits
  127), so nothing silently runs 3.11; for "debian-3.11" it is Debian's own;
- uv is at /usr/local/bin/uv only when asked for; repro is nowhere.

The host directory `root` is /box inside, writable; everything else the box sees is
read-only or its own tmpfs. `unit_paths` lists what a rendered unit names, for a test
to check that each path exists in the box.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from repro.units.command import EXEC_KEYS, PREFIX_CHARS, service_settings, split_words

BWRAP = "/usr/bin/bwrap"
INNER_ROOT = "/box"
PYENV_ROOT = Path(os.environ.get("PYENV_ROOT", str(Path.home() / ".pyenv")))
PYTHON_312_PREFIX = PYENV_ROOT / "versions" / "3.12.1"
DEBIAN_PYTHON = "/usr/bin/python3.11"
BoxPython = Literal["3.12", "debian-3.11"]
_EMPTY: Mapping[Path, str] = {}


@dataclass(frozen=True)
class FreshBox:
    root: Path  # host directory that is /box inside the sandbox (writable)
    python: str  # the box's python3 inside
    argv_prefix: tuple[str, ...] = field(repr=False, default=())
    base_env: Mapping[str, str] = field(repr=False, default_factory=dict)

    def inside(self, host_path: Path) -> str:
        """The path inside the box of a host path under `root`."""
        rel = Path(os.path.abspath(host_path)).relative_to(Path(os.path.abspath(self.root)))
        return INNER_ROOT if rel == Path(".") else f"{INNER_ROOT}/{rel.as_posix()}"

    def host(self, inner: str) -> Path:
        """The host path of an inner path under /box."""
        rel = os.path.relpath(os.path.normpath(inner), INNER_ROOT)
        if rel == ".." or rel.startswith("../") or os.path.isabs(rel):
            raise ValueError(f"{inner} is not under {INNER_ROOT}")
        return self.root if rel == "." else self.root / rel

    def run(
        self,
        argv: Sequence[str] | str,
        *,
        cwd: str = INNER_ROOT,
        env: Mapping[str, str] | None = None,
        timeout: float = 900,
    ) -> subprocess.CompletedProcess[str]:
        """Run `argv` inside the box (a str is a `bash -c` script); `env` adds to or
        overrides the box's own variables."""
        command = ["/bin/bash", "-c", argv] if isinstance(argv, str) else list(argv)
        variables = {**self.base_env, **(env or {})}
        setenv = [part for key, value in variables.items() for part in ("--setenv", key, value)]
        return subprocess.run(
            [*self.argv_prefix, *setenv, "--chdir", cwd, "--", *command],
            capture_output=True,
            text=True,
            timeout=timeout,
            stdin=subprocess.DEVNULL,
            env={"PATH": "/usr/bin:/bin"},
            check=False,
        )


def bwrap_available() -> bool:
    """bubblewrap is installed and can make a box with its own network namespace here."""
    if not os.access(BWRAP, os.X_OK):
        return False
    try:
        proc = subprocess.run(
            [BWRAP, "--unshare-net", "--ro-bind", "/", "/", "--", "/bin/true"],
            capture_output=True,
            timeout=30,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return False
    return proc.returncode == 0


def find_uv() -> Path | None:
    """The uv binary to bind into a box: on PATH, else next to this interpreter."""
    found = shutil.which("uv")
    if found:
        return Path(found).resolve()
    beside = Path(sys.executable).parent / "uv"
    return beside.resolve() if beside.is_file() else None


def _shim(path: Path, body: str) -> Path:
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(0o755)
    return path


def _python_binds(python: BoxPython, shims: Path) -> tuple[str, list[tuple[Path, str]]]:
    """The box's python3 and what to bind for it (host path, inner path), read-only."""
    if python == "debian-3.11":
        return DEBIAN_PYTHON, []
    real = PYTHON_312_PREFIX / "bin" / "python3.12"
    if not real.is_file():
        raise FileNotFoundError(f"{real}: the pyenv Python 3.12 a '3.12' box runs")
    to_312 = _shim(shims / "python3.12", f'exec {real} "$@"\n')
    # Debian's python3 is a symlink to python3.11 (a mount over it lands on its target):
    # one shim over the real file answers by the name it was run as.
    masked = _shim(
        shims / "python3.11",
        'case "${0##*/}" in\n'
        f'    python3) exec {real} "$@" ;;\n'
        '    *) echo "${0##*/}: not on this box" >&2; exit 127 ;;\n'
        "esac\n",
    )
    binds = [(PYTHON_312_PREFIX, str(PYTHON_312_PREFIX)), (to_312, "/usr/local/bin/python3.12")]
    for name in ("python3", "python3.11"):
        debian = Path("/usr/bin", name)
        if debian.exists() and not debian.is_symlink():
            binds.append((masked, str(debian)))
    return str(real), binds


def fresh_box(
    base: Path,
    *,
    python: BoxPython,
    uv: bool = False,
    binds: Mapping[Path, str] = _EMPTY,
) -> FreshBox:
    """A box whose /box is `base`/box on the host. `binds`: extra read-only host paths
    and where they appear inside."""
    root = base / "box"
    (root / "home").mkdir(parents=True, exist_ok=True)
    shims = base / "box-shims"
    shims.mkdir(parents=True, exist_ok=True)
    inner_python, python_binds = _python_binds(python, shims)
    argv = [
        BWRAP,
        "--unshare-net",
        "--unshare-pid",
        "--unshare-ipc",
        "--unshare-uts",
        "--hostname",
        "freshbox",
        "--die-with-parent",
        "--new-session",
        "--clearenv",
        "--ro-bind",
        "/usr",
        "/usr",
        "--ro-bind",
        "/etc",
        "/etc",
    ]
    for link in ("bin", "lib", "lib64", "sbin"):
        if Path("/", link).is_symlink():
            argv += ["--symlink", os.readlink(Path("/", link)), f"/{link}"]
        elif Path("/", link).is_dir():
            argv += ["--ro-bind", f"/{link}", f"/{link}"]
    # /sys read-only, as on any box: lscpu (vLLM CPU asks it for the cores) reads it
    argv += ["--proc", "/proc", "--dev", "/dev", "--ro-bind", "/sys", "/sys"]
    argv += ["--tmpfs", "/tmp", "--tmpfs", "/run"]
    argv += ["--tmpfs", "/usr/local", "--dir", "/usr/local/bin"]
    empty = shims / "empty"
    empty.write_bytes(b"")
    for config in ("/etc/pip.conf",):
        if Path(config).is_file():
            argv += ["--ro-bind", str(empty), config]
    for config_dir in ("/etc/xdg/pip", "/etc/pip", "/etc/uv"):
        if Path(config_dir).is_dir():
            argv += ["--tmpfs", config_dir]
    argv += ["--bind", str(root), INNER_ROOT]
    extra = list(python_binds)
    if uv:
        found = find_uv()
        if found is None:
            raise FileNotFoundError("uv: not on PATH nor next to this interpreter")
        extra.append((found, "/usr/local/bin/uv"))
    extra += list(binds.items())
    for host_path, inner in extra:
        argv += ["--ro-bind", str(host_path), inner]
    env = {
        "HOME": f"{INNER_ROOT}/home",
        "PATH": "/usr/local/bin:/usr/bin:/bin",
        "PIP_CONFIG_FILE": "/dev/null",
        "LANG": "C.UTF-8",
        "TMPDIR": "/tmp",
        "USER": "root",
    }
    return FreshBox(root=root, python=inner_python, argv_prefix=tuple(argv), base_env=env)


def unit_paths(unit_text: str) -> list[str]:
    """Every absolute path a unit's [Service] section names, in order, read with repro's
    own unit parsing (repro.units.command: continuation lines, quotes and escapes): each word
    of every Exec*= command line, the first word of each `;`-separated command without
    systemd's `-@:+!` prefixes, and the value of each `--flag=/path` word;
    WorkingDirectory= and EnvironmentFile= without their `-` prefix. (A `-`
    EnvironmentFile= may be missing for systemd; those repro writes, the credentials
    drop-in and the captured files, are always rendered, so a test may require them.)"""
    paths: list[str] = []
    for key, value in service_settings(unit_text):
        if key in ("WorkingDirectory", "EnvironmentFile"):
            paths.append(value.removeprefix("-"))
        elif key in EXEC_KEYS:
            first = True
            for word in split_words(value):
                if word.text == ";" and not word.quoted:
                    first = True
                    continue
                text = word.text.lstrip(PREFIX_CHARS) if first else word.text
                first = False
                if text.startswith("-") and "=" in text:
                    text = text.partition("=")[2]
                paths.append(text)
    return [path for path in paths if path.startswith("/")]
