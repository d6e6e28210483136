"""Ask package indexes whether they can serve pinned distributions.

Speaks the simple repository API: PEP 691 JSON (`application/vnd.pypi.simple.v1+json`)
when the server offers it, else the PEP 503 HTML page. `file://` indexes are read from
disk (`<root>/<project>/index.html`, as pip does). A pin counts as served when the index
has a wheel of exactly that version whose tags the target interpreter accepts; the sha256
of every file of that version (wheels the target accepts, and sdists) is recorded for the
lock's `--hash` lines.

The target's tags are computed with `packaging.tags` from facts the target interpreter
reports about itself (implementation, version, machine, glibc), so the target does not
need `packaging` installed. Linux/glibc, musl, macOS and Windows platforms are covered;
anything else falls back to the interpreter's own `sysconfig.get_platform()`.
"""

from __future__ import annotations

import json
import threading
import urllib.parse
from collections.abc import Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from html.parser import HTMLParser
from pathlib import Path
from typing import TYPE_CHECKING, Any

from packaging.tags import Tag, compatible_tags, cpython_tags, generic_tags, mac_platforms
from packaging.utils import (
    InvalidSdistFilename,
    InvalidWheelFilename,
    canonicalize_name,
    parse_sdist_filename,
    parse_wheel_filename,
)
from packaging.version import InvalidVersion, Version

from repro.errors import ProbeError, ProjectNotListed
from repro.interpreter import run_target_script

JSON_TYPE = "application/vnd.pypi.simple.v1+json"
ACCEPT = f"{JSON_TYPE}, application/vnd.pypi.simple.v1+html;q=0.2, text/html;q=0.01"
DEFAULT_TIMEOUT = 30.0

if TYPE_CHECKING:  # requests is slow to import; imported where a page is fetched
    import requests


@dataclass(frozen=True)
class IndexFile:
    """One file an index serves for a pinned version."""

    filename: str
    url: str
    sha256: str | None


@dataclass(frozen=True)
class IndexReport:
    """What the indexes hold: files per pinned name, names none can serve, and failures."""

    found: dict[str, list[IndexFile]] = field(default_factory=dict)
    missing: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    index_of: dict[str, str] = field(default_factory=dict)  # name -> index it was found on

    def serves(self, name: str) -> bool:
        return canonicalize_name(name) in self.found


@dataclass(frozen=True)
class InterpreterFacts:
    """What decides which wheel tags an interpreter accepts."""

    implementation: str  # sys.implementation.name: "cpython", "pypy"
    python_version: tuple[int, int]
    system: str  # platform.system().lower(): "linux", "darwin", "windows"
    machine: str  # platform.machine(): "x86_64", "aarch64", "arm64", "AMD64"
    platform: str  # sysconfig.get_platform()
    libc: str | None = None  # "glibc" or "musl"
    libc_version: tuple[int, int] | None = None
    mac_version: tuple[int, int] | None = None
    # sysconfig's EXT_SUFFIX (".pypy310-pp73-x86_64-linux-gnu.so"): the ABI of an
    # interpreter other than CPython; None when it did not say
    ext_suffix: str | None = None


def interpreter_facts(python: Path, *, timeout: float = 60.0) -> InterpreterFacts:
    """Run repro/probe/tag_facts.py with the target interpreter to learn its tag facts."""
    proc = run_target_script(python, "tag_facts.py", timeout=timeout)
    if proc.returncode != 0:
        raise ProbeError(
            f"{python} failed to report its platform (exit {proc.returncode}): "
            + proc.stderr.strip()[-500:]
        )
    try:
        data: dict[str, Any] = json.loads(proc.stdout)
        return InterpreterFacts(
            implementation=str(data["implementation"]),
            python_version=(int(data["python_version"][0]), int(data["python_version"][1])),
            system=str(data["system"]),
            machine=str(data["machine"]),
            platform=str(data["platform"]),
            libc=data.get("libc"),
            libc_version=_pair(data.get("libc_version")),
            mac_version=_pair(data.get("mac_version")),
            ext_suffix=_text_or_none(data.get("ext_suffix")),
        )
    except (ValueError, KeyError, TypeError, IndexError) as exc:
        raise ProbeError(f"{python} printed unreadable platform facts: {exc}") from exc


def _text_or_none(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def generic_abis(ext_suffix: str | None) -> list[str]:
    """The ABI tag an extension suffix names, as packaging.tags derives it for the
    interpreter it runs in (`_generic_abi`), here for the TARGET's suffix:
    `.pypy310-pp73-x86_64-linux-gnu.so` -> `pypy310_pp73`. Nothing when it names none."""
    parts = (ext_suffix or "").split(".")
    if len(parts) < 3 or not parts[1]:
        return []
    soabi = parts[1]
    if soabi.startswith("cpython"):
        abi = "cp" + soabi.split("-")[1]
    elif soabi.startswith("cp"):
        abi = soabi.split("-")[0]
    elif soabi.startswith("pypy"):
        abi = "-".join(soabi.split("-")[:2])
    elif soabi.startswith("graalpy"):
        abi = "-".join(soabi.split("-")[:3])
    else:
        abi = soabi
    return [abi.replace(".", "_").replace("-", "_")]


def _pair(value: Any) -> tuple[int, int] | None:
    if isinstance(value, list) and len(value) >= 2:
        return int(value[0]), int(value[1])
    return None


def _platforms(facts: InterpreterFacts) -> list[str]:
    machine = facts.machine
    if facts.system == "linux":
        arch = {"amd64": "x86_64", "arm64": "aarch64"}.get(machine.lower(), machine)
        if arch in ("i686", "i386") and facts.python_version:
            arch = "i686"
        platforms: list[str] = []
        if facts.libc == "glibc" and facts.libc_version is not None:
            major, top = facts.libc_version
            lowest = 5 if arch in ("x86_64", "i686") else 17
            legacy = {17: "manylinux2014", 12: "manylinux2010", 5: "manylinux1"}
            for minor in range(top, lowest - 1, -1):
                platforms.append(f"manylinux_{major}_{minor}_{arch}")
                if minor in legacy:
                    platforms.append(f"{legacy[minor]}_{arch}")
        platforms.append(f"linux_{arch}")
        return platforms
    if facts.system == "darwin":
        arch = "arm64" if machine.lower() in ("arm64", "aarch64") else "x86_64"
        return list(mac_platforms(facts.mac_version, arch))
    if facts.system == "windows":
        return {"amd64": ["win_amd64"], "arm64": ["win_arm64"]}.get(machine.lower(), ["win32"])
    return [facts.platform.replace("-", "_").replace(".", "_")]


def tags_for(facts: InterpreterFacts) -> list[Tag]:
    """Wheel tags the interpreter accepts, most preferred first (packaging.tags)."""
    platforms = _platforms(facts)
    version = facts.python_version
    if facts.implementation == "cpython":
        abis = [f"cp{version[0]}{version[1]}"]
        tags = list(cpython_tags(version, abis, platforms))
        return tags + list(compatible_tags(version, f"cp{version[0]}{version[1]}", platforms))
    interpreter = {"pypy": "pp"}.get(facts.implementation, facts.implementation)
    short = f"{interpreter}{version[0]}{version[1]}"
    # The target's own ABI, never the packing interpreter's (what abis=None would give)
    abis = generic_abis(facts.ext_suffix)
    return list(generic_tags(short, abis, platforms)) + list(
        compatible_tags(version, short, platforms)
    )


def target_tags(python: Path) -> list[Tag]:
    return tags_for(interpreter_facts(python))


class _AnchorParser(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.links: list[tuple[str, str]] = []
        self._href: str | None = None
        self._text: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "a":
            self._href = dict(attrs).get("href")
            self._text = []

    def handle_data(self, data: str) -> None:
        if self._href is not None:
            self._text.append(data)

    def handle_endtag(self, tag: str) -> None:
        if tag == "a" and self._href is not None:
            self.links.append((self._href, "".join(self._text).strip()))
            self._href = None


def _files_from_html(text: str, page_url: str) -> list[IndexFile]:
    parser = _AnchorParser()
    parser.feed(text)
    files: list[IndexFile] = []
    for href, label in parser.links:
        url, _, fragment = urllib.parse.urljoin(page_url, href).partition("#")
        name = label or urllib.parse.unquote(url.rsplit("/", 1)[-1])
        algo, _, value = fragment.partition("=")
        files.append(IndexFile(name, url, value if algo == "sha256" and value else None))
    return files


def _files_from_json(data: Any, page_url: str) -> list[IndexFile]:
    files: list[IndexFile] = []
    for item in data.get("files", []) if isinstance(data, dict) else []:
        if not isinstance(item, dict) or "filename" not in item or "url" not in item:
            continue
        hashes = item.get("hashes") or {}
        sha = hashes.get("sha256") if isinstance(hashes, dict) else None
        url = urllib.parse.urljoin(page_url, str(item["url"])).partition("#")[0]
        files.append(IndexFile(str(item["filename"]), url, sha if isinstance(sha, str) else None))
    return files


def _project_files(
    index: str, project: str, session: requests.Session, timeout: float
) -> list[IndexFile]:
    page = index.rstrip("/") + "/" + project + "/"
    if page.startswith("file:"):
        directory = Path(urllib.parse.unquote(urllib.parse.urlparse(page).path))
        for candidate, kind in (("index.json", "json"), ("index.html", "html")):
            path = directory / candidate
            if path.is_file():
                text = path.read_text(encoding="utf-8")
                page_url = path.as_uri()
                if kind == "json":
                    return _files_from_json(json.loads(text), page_url)
                return _files_from_html(text, page_url)
        raise ProjectNotListed(page)
    response = session.get(page, headers={"Accept": ACCEPT}, timeout=timeout)
    if response.status_code == 404:
        raise ProjectNotListed(page)
    response.raise_for_status()
    content_type = response.headers.get("Content-Type", "").split(";", 1)[0].strip()
    if content_type == JSON_TYPE:
        return _files_from_json(response.json(), response.url)
    return _files_from_html(response.text, response.url)


def _version_of(filename: str) -> tuple[str, Version, frozenset[Tag] | None] | None:
    """(canonical name, version, tags or None for an sdist), or None if unparseable."""
    try:
        if filename.endswith(".whl"):
            name, version, _build, tags = parse_wheel_filename(filename)
            return name, version, tags
        name, version = parse_sdist_filename(filename)
        return name, version, None
    except (InvalidWheelFilename, InvalidSdistFilename, InvalidVersion):
        return None


def select_files(
    files: Iterable[IndexFile], name: str, version: str, tags: Sequence[Tag]
) -> tuple[list[IndexFile], bool]:
    """Files of exactly this version that the target can use; and whether a wheel fits."""
    wanted_name, wanted = canonicalize_name(name), Version(version)
    accepted = frozenset(tags)
    chosen: list[IndexFile] = []
    has_wheel = False
    for item in files:
        parsed = _version_of(item.filename)
        if parsed is None or parsed[0] != wanted_name or parsed[1] != wanted:
            continue
        file_tags = parsed[2]
        if file_tags is None:
            chosen.append(item)
        elif file_tags & accepted:
            chosen.append(item)
            has_wheel = True
    return chosen, has_wheel


def check_index(
    pins: Sequence[tuple[str, str]],
    indexes: Sequence[str],
    *,
    tags: Sequence[Tag],
    session: requests.Session | None = None,
    timeout: float = DEFAULT_TIMEOUT,
    sdists: bool = False,
    jobs: int = 8,
) -> IndexReport:
    """Which pins (name, version) the indexes can serve as a wheel the target accepts
    (with `sdists`, an sdist of the version counts too).

    A pin counts as found on the first index that has such a file; its files there
    (those wheels and any sdist of the version) are recorded with their sha256, and the
    index in `index_of`. Pages are read `jobs` at a time; an index that cannot be reached
    at all is not asked again. Network or parse failures are collected in `errors`; a pin
    no index could confirm is missing.
    """
    import requests

    own_session = session is None
    http = session or requests.Session()
    found: dict[str, list[IndexFile]] = {}
    index_of: dict[str, str] = {}
    errors: list[str] = []
    todo = [(canonicalize_name(name), name, version) for name, version in pins]
    try:
        for index in indexes:
            if not todo:
                break
            pages = _fetch_all(index, sorted({p for p, _, _ in todo}), http, timeout, jobs)
            left = []
            for project, name, version in todo:
                listing = pages.get(project)
                chosen, has_wheel = select_files(listing or (), name, version, tags)
                if has_wheel or (sdists and chosen):
                    found[project] = chosen
                    index_of[project] = index
                else:
                    left.append((project, name, version))
            errors += pages.errors
            todo = left
    finally:
        if own_session:
            http.close()
    return IndexReport(
        found=found, missing=[p for p, _, _ in todo], errors=errors, index_of=index_of
    )


class _Pages(dict[str, list[IndexFile]]):
    """Project pages read from one index, and what could not be read."""

    def __init__(self) -> None:
        super().__init__()
        self.errors: list[str] = []


def _fetch_all(
    index: str, projects: Sequence[str], session: requests.Session, timeout: float, jobs: int
) -> _Pages:
    import requests

    pages = _Pages()
    down = threading.Event()  # the index cannot be reached: the other pages are not asked
    said = threading.Lock()

    def fetch(project: str) -> tuple[str, list[IndexFile] | None, str | None]:
        if down.is_set():
            return project, None, None
        try:
            return project, _project_files(index, project, session, timeout), None
        except ProjectNotListed:
            return project, None, None
        except requests.ConnectionError as exc:
            with said:
                first = not down.is_set()
                down.set()
            return project, None, (f"{index}: cannot connect: {exc}" if first else None)
        except (requests.RequestException, OSError, ValueError) as exc:
            return project, None, f"{index}: cannot read the page of {project}: {exc}"

    with ThreadPoolExecutor(max_workers=max(1, min(jobs, len(projects)))) as pool:
        for project, listing, error in pool.map(fetch, projects):
            if listing is not None:
                pages[project] = listing
            if error is not None:
                pages.errors.append(error)
    return pages
