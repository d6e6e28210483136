"""The wheel vault, against real venvs, real pip installs and real PyPI."""

from __future__ import annotations

import base64
import hashlib
import os
import shutil
import sys
import textwrap
import zipfile
from dataclasses import dataclass
from pathlib import Path

import pytest
import requests

from repro.errors import PatchedFilesError
from repro.snapshot.facts.indexcheck import (
    IndexReport,
    check_index,
    target_tags,
)
from repro.snapshot.facts.installed import (
    InstalledDist,
    list_installed,
    scheme_paths,
)
from repro.snapshot.vault.build import build_vault, vault_reasons
from repro.wheel.rebuild import (
    CarryPatched,
    console_script_names,
    plan_rebuild,
    rebuild_wheel,
)
from repro.wheel.record import read_dist_record
from repro.wheel.scheme import SchemePaths
from repro.wheel.scripts import restore_shebang
from tests.support.run import run

PYPI = "https://pypi.org/simple/"
PIP_TIMEOUT = 600


def _without_python_vars() -> dict[str, str]:
    """This process's environment less PYTHON* and VIRTUAL_ENV: pip and the venvs' own
    interpreters see none of the test run's."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}
    env.pop("VIRTUAL_ENV", None)
    return env


def _isolated(argv: list[str | Path]) -> str:
    """`argv`, which must succeed, without the test run's PYTHON* and VIRTUAL_ENV."""
    return run(argv, env=_without_python_vars(), timeout=PIP_TIMEOUT)


def _make_venv(path: Path) -> Path:
    _isolated([sys.executable, "-m", "venv", path])
    return path / "bin" / "python"


def _write(path: Path, text: str, mode: int = 0o644) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text).lstrip())
    path.chmod(mode)


def _make_project(root: Path, name: str, version: str, *, extras: bool) -> Path:
    """A tiny setuptools project; with `extras`: console script, real script, header, data."""
    _write(root / "pyproject.toml", '[build-system]\nrequires = ["setuptools", "wheel"]\n')
    _write(
        root / name / "__init__.py",
        f'VALUE = "{name}-{version}"\n\ndef main() -> None:\n    print("main", VALUE)\n',
    )
    options = ""
    if extras:
        _write(
            root / "scripts" / f"{name}-tool",
            f'#!python\nimport {name}\nprint("tool", {name}.VALUE)\n',
            0o755,
        )
        # a script with no #! line (a tool's binary, as ruff and uv install theirs)
        _write(root / "scripts" / f"{name}-bin", "\x7fELF-like " * 20000, 0o755)
        _write(root / "include" / f"{name}.h", "#define VAULTDEMO 1\n")
        _write(root / "data" / "demo.txt", "demo data\n")
        options = f"""
            entry_points={{"console_scripts": ["{name}-cli = {name}:main"]}},
            scripts=["scripts/{name}-tool", "scripts/{name}-bin"],
            headers=["include/{name}.h"],
            data_files=[("share/{name}", ["data/demo.txt"])],
        """
    _write(
        root / "setup.py",
        f"from setuptools import setup\n"
        f'setup(name="{name}", version="{version}", packages=["{name}"],{options})\n',
    )
    return root


@dataclass(frozen=True)
class SourceEnv:
    python: Path
    scheme: SchemePaths
    dists: dict[str, InstalledDist]
    find_links: Path
    projects: Path


@pytest.fixture(scope="session")
def source_env(tmp_path_factory: pytest.TempPathFactory) -> SourceEnv:
    """A venv holding: a dist from a local wheel that has since been deleted (vaultdemo),
    an editable project (editdemo), a local version from a find-links dir (localdemo
    1.0+cu130), and PyPI dists (six, idna, wheel with its console script)."""
    base = tmp_path_factory.mktemp("vault-src")
    builder = _make_venv(base / "builder")
    projects = base / "projects"
    find_links = base / "find-links"
    gone = base / "gone"
    for name, version, extras, dest in [
        ("vaultdemo", "0.1.0", True, gone),
        ("localdemo", "1.0+cu130", False, find_links),
    ]:
        project = _make_project(projects / name, name, version, extras=extras)
        _isolated([builder, "-m", "pip", "wheel", "-q", "--no-deps", "-w", dest, project])
    _make_project(projects / "editdemo", "editdemo", "0.2.0", extras=False)
    python = _make_venv(base / "venv")
    pip: list[str | Path] = [python, "-m", "pip", "install", "-q"]
    _isolated([*pip, *sorted(gone.glob("*.whl"))])
    shutil.rmtree(gone)
    _isolated([*pip, "--find-links", find_links, "localdemo==1.0+cu130"])
    _isolated([*pip, "six==1.16.0", "idna==3.7", "wheel==0.43.0", "setuptools"])
    _isolated([*pip, "-e", projects / "editdemo"])
    scheme = scheme_paths(python)
    dists = {d.canonical_name: d for d in list_installed(scheme.purelib)}
    return SourceEnv(python, scheme, dists, find_links, projects)


@pytest.mark.slow
@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("vaultdemo", ["installed from local file"]),
        ("editdemo", ["editable install of file://"]),
        ("localdemo", ["local version 1.0+cu130"]),
        ("six", []),
        ("idna", []),
        ("wheel", []),
    ],
)
def test_vault_reasons(source_env: SourceEnv, name: str, expected: list[str]) -> None:
    reasons = vault_reasons(source_env.dists[name])
    assert len(reasons) == len(expected), reasons
    for reason, start in zip(reasons, expected, strict=True):
        assert reason.startswith(start), reasons


@pytest.mark.slow
def test_vault_reasons_follow_the_index_report(source_env: SourceEnv) -> None:
    local = source_env.dists["localdemo"]
    served = IndexReport(found={"localdemo": []})
    assert vault_reasons(local, served) == []
    missing = IndexReport(missing=["six"])
    assert vault_reasons(source_env.dists["six"], missing) == [
        "six==1.16.0 is on none of the recorded indexes"
    ]


@pytest.mark.slow
def test_installed_facts(source_env: SourceEnv) -> None:
    dists = source_env.dists
    assert dists["editdemo"].editable
    assert not dists["vaultdemo"].editable
    assert dists["six"].installer == "pip"
    assert dists["six"].direct_url is None
    assert dists["localdemo"].version == "1.0+cu130"
    assert console_script_names(dists["vaultdemo"].dist_info) == {"vaultdemo-cli"}


def _rebuild(env: SourceEnv, name: str, out: Path) -> Path:
    return rebuild_wheel(env.dists[name], out, scheme=env.scheme).path


@pytest.mark.slow
def test_rebuilt_wheel_lays_out_data_scripts_and_headers(
    source_env: SourceEnv, tmp_path: Path
) -> None:
    wheel = _rebuild(source_env, "vaultdemo", tmp_path)
    assert wheel.name == "vaultdemo-0.1.0-py3-none-any.whl"
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        tool = archive.read("vaultdemo-0.1.0.data/scripts/vaultdemo-tool")
        mode = archive.getinfo("vaultdemo-0.1.0.data/scripts/vaultdemo-tool").external_attr >> 16
    assert tool.startswith(b"#!python\n")
    assert mode & 0o111
    with zipfile.ZipFile(wheel) as archive:
        binary = archive.read("vaultdemo-0.1.0.data/scripts/vaultdemo-bin")
        bin_mode = archive.getinfo("vaultdemo-0.1.0.data/scripts/vaultdemo-bin").external_attr
    assert binary == (source_env.scheme.scripts / "vaultdemo-bin").read_bytes()
    assert binary.startswith(b"\x7fELF-like") and (bin_mode >> 16) & 0o111
    plan = plan_rebuild(source_env.dists["vaultdemo"], scheme=source_env.scheme)
    by_name = {m.arcname: m for m in plan.zip.members}
    # the #! script is held to be rewritten; the other streams from disk, not kept in memory
    assert by_name["vaultdemo-0.1.0.data/scripts/vaultdemo-tool"].data is not None
    assert by_name["vaultdemo-0.1.0.data/scripts/vaultdemo-bin"].data is None
    assert "vaultdemo-0.1.0.data/headers/vaultdemo.h" in names
    assert "vaultdemo-0.1.0.data/data/share/vaultdemo/demo.txt" in names
    assert not [n for n in names if n.endswith("vaultdemo-cli")], "generated wrapper leaked"
    assert not [n for n in names if "__pycache__" in n]
    for dropped in ("INSTALLER", "REQUESTED", "direct_url.json"):
        assert f"vaultdemo-0.1.0.dist-info/{dropped}" not in names
    assert names[-1] == "vaultdemo-0.1.0.dist-info/RECORD"


@pytest.mark.slow
def test_rebuild_is_byte_identical(source_env: SourceEnv, tmp_path: Path) -> None:
    for name in ("vaultdemo", "six", "wheel"):
        first = _rebuild(source_env, name, tmp_path / "a")
        second = _rebuild(source_env, name, tmp_path / "b")
        assert first.read_bytes() == second.read_bytes(), name


@pytest.mark.slow
def test_rebuilt_six_holds_what_pypi_serves(source_env: SourceEnv, tmp_path: Path) -> None:
    rebuilt = _rebuild(source_env, "six", tmp_path / "rebuilt")
    _isolated([source_env.python, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:",
          "six==1.16.0", "-d", tmp_path / "pypi", "--index-url", PYPI])  # fmt: skip
    original = tmp_path / "pypi" / rebuilt.name
    with zipfile.ZipFile(rebuilt) as ours, zipfile.ZipFile(original) as theirs:
        assert sorted(ours.namelist()) == sorted(theirs.namelist())
        for name in theirs.namelist():
            if not name.endswith("RECORD"):
                assert ours.read(name) == theirs.read(name), name


def test_restore_shebang_reverses_installers(tmp_path: Path) -> None:
    bin_dir = tmp_path / "venv" / "bin"
    body = b"import sys\n"
    simple = f"#!{bin_dir}/python3.11\n".encode() + body
    trampoline = f"#!/bin/sh\n'''exec' \"{bin_dir}/python\" \"$0\" \"$@\"\n' '''\n".encode() + body
    assert restore_shebang(simple, bin_dir) == b"#!python\n" + body
    assert restore_shebang(trampoline, bin_dir) == b"#!python\n" + body
    for untouched in (
        b"#!/usr/bin/env python3\n" + body,
        b"#!/usr/bin/python3\n" + body,
        f"#!{bin_dir}/bash\n".encode() + body,
        body,
    ):
        assert restore_shebang(untouched, bin_dir) == untouched


@pytest.fixture(scope="session")
def vault(source_env: SourceEnv, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The vault of every dist, built offline (no download): rebuilt or original."""
    out = tmp_path_factory.mktemp("vault-all")
    report = build_vault(
        list(source_env.dists.values()),
        mode="all",
        out_dir=out,
        python=source_env.python,
        scheme=source_env.scheme,
        find_links=[source_env.find_links],
        pip_cache=out / "no-cache",
        download=False,
    )
    sources = {w.name: w.source for w in report.wheels}
    assert sources["vaultdemo"] == "rebuilt"
    assert sources["localdemo"] == "original"
    assert sources["editdemo"] == "built-from-source"
    assert sources["six"] == "rebuilt"
    return out


def _record_hashes(dist: InstalledDist) -> dict[str, str | None]:
    skip = {"INSTALLER", "REQUESTED", "direct_url.json", "RECORD"}
    return {
        e.path: e.sha256
        for e in read_dist_record(dist.dist_info)
        if "__pycache__" not in e.path and e.path.rsplit("/", 1)[-1] not in skip
    }


@pytest.fixture(scope="session")
def fresh_env(vault: Path, tmp_path_factory: pytest.TempPathFactory) -> SourceEnv:
    base = tmp_path_factory.mktemp("vault-fresh")
    python = _make_venv(base / "venv")
    names = ["vaultdemo", "editdemo", "localdemo", "six", "idna", "wheel"]
    _isolated([python, "-m", "pip", "install", "-q", "--no-index", "--find-links", vault, *names])
    scheme = scheme_paths(python)
    dists = {d.canonical_name: d for d in list_installed(scheme.purelib)}
    return SourceEnv(python, scheme, dists, vault, base)


@pytest.mark.slow
@pytest.mark.parametrize("name", ["vaultdemo", "localdemo", "six", "idna", "wheel"])
def test_vault_wheels_reinstall_the_same_files(
    source_env: SourceEnv, fresh_env: SourceEnv, name: str
) -> None:
    before = _record_hashes(source_env.dists[name])
    after = _record_hashes(fresh_env.dists[name])
    generated = console_script_names(source_env.dists[name].dist_info)
    scripts = {p for p in before if p.startswith("../../../bin/")}
    assert before.keys() == after.keys()
    for path, digest in before.items():
        if path in scripts:
            continue  # shebangs point at each venv's own interpreter
        assert after[path] == digest, path
    for path in scripts:
        script = path.rsplit("/", 1)[-1]
        old = (source_env.scheme.scripts / script).read_bytes()
        new = (fresh_env.scheme.scripts / script).read_bytes()
        if script in generated:
            assert new.startswith(f"#!{fresh_env.scheme.scripts}/python".encode())
        else:
            assert restore_shebang(old, source_env.scheme.scripts) == restore_shebang(
                new, fresh_env.scheme.scripts
            )


@pytest.mark.slow
def test_reinstalled_scripts_headers_and_data(fresh_env: SourceEnv) -> None:
    bin_dir = fresh_env.scheme.scripts
    assert _isolated([bin_dir / "vaultdemo-tool"]).strip() == "tool vaultdemo-0.1.0"
    assert _isolated([bin_dir / "vaultdemo-cli"]).strip() == "main vaultdemo-0.1.0"
    assert "0.43.0" in _isolated([bin_dir / "wheel", "version"])
    prefix = fresh_env.scheme.data
    headers = list((prefix / "include" / "site").glob("python*/vaultdemo/vaultdemo.h"))
    assert len(headers) == 1
    assert (prefix / "share" / "vaultdemo" / "demo.txt").read_text() == "demo data\n"
    code = "import editdemo, localdemo; print(editdemo.VALUE, localdemo.VALUE)"
    assert _isolated([fresh_env.python, "-c", code]).split() == [
        "editdemo-0.2.0",
        "localdemo-1.0+cu130",
    ]
    assert not fresh_env.dists["editdemo"].editable


@pytest.mark.slow
def test_patched_file_is_refused_unless_pristine_given(
    source_env: SourceEnv, tmp_path: Path
) -> None:
    dist, scheme = source_env.dists["vaultdemo"], source_env.scheme
    reference = _rebuild(source_env, "vaultdemo", tmp_path / "ref")
    # Edited in place and restored, not in a copy: a copied venv's shebangs name the old place.
    target = scheme.purelib / "vaultdemo" / "__init__.py"
    original = target.read_bytes()
    target.write_bytes(original + b"PATCHED = True\n")
    try:
        with pytest.raises(PatchedFilesError) as caught:
            rebuild_wheel(dist, tmp_path / "out", scheme=scheme)
        assert caught.value.files == ("vaultdemo/__init__.py",)
        assert "vaultdemo/__init__.py" in str(caught.value)
        assert not list((tmp_path / "out").glob("*")), "no partial wheel left behind"

        def pristine(path: str) -> bytes | None:
            return original if path == "vaultdemo/__init__.py" else None

        rebuilt = rebuild_wheel(dist, tmp_path / "out", scheme=scheme, pristine=pristine)
        assert rebuilt.path.read_bytes() == reference.read_bytes()
        with pytest.raises(PatchedFilesError):
            rebuild_wheel(dist, tmp_path / "bad", scheme=scheme, pristine=lambda _p: b"nope")

        # No pristine copy anywhere (an air-gapped source): the wheel carries the patched
        # bytes under a fresh RECORD hash, and says which files it carried.
        carrier = CarryPatched()
        carried = rebuild_wheel(dist, tmp_path / "carry", scheme=scheme, pristine=carrier)
        assert carrier.carried == ["vaultdemo/__init__.py"]
        with zipfile.ZipFile(carried.path) as wheel:
            assert wheel.read("vaultdemo/__init__.py") == original + b"PATCHED = True\n"
            record = wheel.read(next(n for n in wheel.namelist() if n.endswith("RECORD")))
        digest = hashlib.sha256(original + b"PATCHED = True\n").digest()
        fresh = base64.urlsafe_b64encode(digest).rstrip(b"=")
        assert b"vaultdemo/__init__.py,sha256=" + fresh in record
    finally:
        target.write_bytes(original)


@pytest.mark.slow
def test_build_vault_auto_none_and_determinism(source_env: SourceEnv, tmp_path: Path) -> None:
    dists = list(source_env.dists.values())

    def auto(out: Path) -> dict[str, tuple[str, str]]:
        report = build_vault(
            dists,
            mode="auto",
            out_dir=out,
            python=source_env.python,
            scheme=source_env.scheme,
            pip_cache=tmp_path / "no-cache",
            download=False,
        )
        return {w.name: (w.filename, w.sha256) for w in report.wheels}

    first = auto(tmp_path / "a")
    assert sorted(first) == ["editdemo", "localdemo", "vaultdemo"]
    assert first == auto(tmp_path / "b")
    for filename, sha in first.values():
        digest = hashlib.sha256((tmp_path / "a" / filename).read_bytes()).hexdigest()
        assert digest == sha

    none = build_vault(dists, mode="none", out_dir=tmp_path / "none", download=False)
    assert none.wheels == []
    assert len(none.warnings) == 3
    for name in ("vaultdemo", "editdemo", "localdemo"):
        assert any(w.startswith(f"{name} ") for w in none.warnings), none.warnings
    assert not (tmp_path / "none").exists()


@pytest.mark.slow
def test_a_wheel_lacking_installed_files_is_not_the_original(
    source_env: SourceEnv, tmp_path: Path
) -> None:
    """A wheel of the same name and version whose files all agree with the install, but
    which lacks some (here the console script's entry_points.txt and the scripts), was
    built from another source: taking it would install a venv without `vaultdemo-cli`.
    It happened in CI, where pip's cache held such a wheel from another test."""
    from repro.snapshot.vault.original import wheel_matches_install

    project = _make_project(tmp_path / "proj" / "vaultdemo", "vaultdemo", "0.1.0", extras=False)
    find_links = tmp_path / "fl"
    _isolated([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", find_links, project])
    (lacking,) = find_links.glob("vaultdemo-0.1.0-*.whl")
    dist = source_env.dists["vaultdemo"]
    assert not wheel_matches_install(lacking, dist)
    report = build_vault(
        [dist],
        mode="auto",
        out_dir=tmp_path / "vault",
        python=source_env.python,
        scheme=source_env.scheme,
        find_links=[find_links],
        pip_cache=tmp_path / "no-cache",
        download=False,
    )
    (wheel,) = report.wheels
    assert wheel.source == "rebuilt"
    with zipfile.ZipFile(tmp_path / "vault" / wheel.filename) as archive:
        assert "vaultdemo-0.1.0.dist-info/entry_points.txt" in archive.namelist()
    # the wheel the install came from still matches (localdemo, from its find-links dir)
    (original,) = source_env.find_links.glob("localdemo-*.whl")
    assert wheel_matches_install(original, source_env.dists["localdemo"])


@pytest.mark.slow
def test_check_index_on_pypi(source_env: SourceEnv) -> None:
    tags = target_tags(source_env.python)
    report = check_index([("six", "1.16.0"), ("localdemo", "1.0+cu130")], [PYPI], tags=tags)
    assert report.errors == []
    assert report.missing == ["localdemo"]
    files = report.found["six"]
    wheel = next(f for f in files if f.filename == "six-1.16.0-py2.py3-none-any.whl")
    assert any(f.filename == "six-1.16.0.tar.gz" for f in files)
    body = requests.get(wheel.url, timeout=60).content
    assert wheel.sha256 == hashlib.sha256(body).hexdigest()


def _simple_tree(root: Path, wheels: list[Path], *, json_pages: bool) -> str:
    """A PEP 503 (or PEP 691 JSON) file tree serving the given wheels."""
    (root / "files").mkdir(parents=True)
    for wheel in wheels:
        shutil.copy(wheel, root / "files" / wheel.name)
        project = wheel.name.split("-", 1)[0].replace("_", "-").lower()
        page = root / "simple" / project
        page.mkdir(parents=True)
        sha = hashlib.sha256(wheel.read_bytes()).hexdigest()
        href = f"../../files/{wheel.name}"
        if json_pages:
            (page / "index.json").write_text(
                f'{{"meta": {{"api-version": "1.0"}}, "name": "{project}", "files": '
                f'[{{"filename": "{wheel.name}", "url": "{href}", '
                f'"hashes": {{"sha256": "{sha}"}}}}]}}'
            )
        else:
            (page / "index.html").write_text(
                f'<!DOCTYPE html><html><body><a href="{href}#sha256={sha}">{wheel.name}</a>'
                "</body></html>\n"
            )
    return (root / "simple").as_uri()


@pytest.mark.slow
@pytest.mark.parametrize("json_pages", [False, True])
def test_file_index_serves_the_local_version(
    source_env: SourceEnv, tmp_path: Path, json_pages: bool
) -> None:
    wheel = next(source_env.find_links.glob("localdemo-*.whl"))
    index = _simple_tree(tmp_path / "index", [wheel], json_pages=json_pages)
    tags = target_tags(source_env.python)
    report = check_index([("localdemo", "1.0+cu130"), ("six", "1.16.0")], [index], tags=tags)
    assert report.missing == ["six"]
    [found] = report.found["localdemo"]
    assert found.sha256 == hashlib.sha256(wheel.read_bytes()).hexdigest()
    assert vault_reasons(source_env.dists["localdemo"], report) == []

    vaulted = build_vault(
        [source_env.dists["localdemo"], source_env.dists["six"]],
        mode="all",
        out_dir=tmp_path / "vault",
        indexes=[index],
        check_index=True,
        python=source_env.python,
        pip_cache=tmp_path / "no-cache",
    )
    sources = {w.name: (w.source, w.sha256) for w in vaulted.wheels}
    assert sources["localdemo"] == ("downloaded", found.sha256)
    assert sources["six"][0] == "rebuilt"  # not on this index, and pip is pointed at it only


@pytest.mark.slow
def test_wheels_all_downloads_originals_from_pypi(source_env: SourceEnv, tmp_path: Path) -> None:
    dists = [source_env.dists[n] for n in ("six", "idna", "wheel")]
    report = build_vault(
        dists,
        mode="all",
        out_dir=tmp_path / "vault",
        indexes=[PYPI],
        check_index=True,
        python=source_env.python,
        pip_cache=tmp_path / "no-cache",
    )
    assert report.index is not None
    for wheel in report.wheels:
        assert wheel.source == "downloaded", wheel
        published = {f.sha256 for f in report.index.found[wheel.name]}
        assert wheel.sha256 in published


@pytest.mark.slow
def test_vcs_install_takes_the_original_wheel_from_pips_cache(tmp_path: Path) -> None:
    repo = _make_project(tmp_path / "vcsdemo", "vcsdemo", "0.3.0", extras=False)
    git = ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@example.invalid"]
    _isolated([*git, "init", "-q"])
    _isolated([*git, "add", "-A"])
    _isolated([*git, "commit", "-q", "-m", "demo"])
    commit = _isolated([*git, "rev-parse", "HEAD"]).strip()
    python = _make_venv(tmp_path / "venv")
    cache = tmp_path / "pip-cache"
    url = f"git+{repo.as_uri()}@{commit}"
    _isolated([python, "-m", "pip", "install", "-q", "--cache-dir", cache, f"{url}#egg=vcsdemo"])
    cached = list((cache / "wheels").rglob("vcsdemo-*.whl"))
    assert len(cached) == 1, "pip caches wheels it built from a pinned VCS commit"

    scheme = scheme_paths(python)
    [dist] = [d for d in list_installed(scheme.purelib) if d.name == "vcsdemo"]
    assert vault_reasons(dist) == [f"installed from git URL {repo.as_uri()}@{commit}"]
    report = build_vault(
        [dist], mode="auto", out_dir=tmp_path / "vault", pip_cache=cache, download=False
    )
    [wheel] = report.wheels
    assert wheel.source == "original"
    assert (tmp_path / "vault" / wheel.filename).read_bytes() == cached[0].read_bytes()

    rebuilt = build_vault(
        [dist], mode="auto", out_dir=tmp_path / "rebuilt", pip_cache=tmp_path / "none"
    )
    assert rebuilt.wheels[0].source == "rebuilt"


@pytest.mark.slow
def test_planning_can_take_the_scans_results_it_replaces(source_env: SourceEnv) -> None:
    """With `consume`, the plan removes from the scan's table each file it planned a member
    from (pack then holds a file once); the plan itself is the same as without."""
    from repro.snapshot.facts.environment import probe_environment
    from repro.snapshot.scan.compare import scan_environment
    from repro.wheel.rebuild import plan_rebuild

    scan = scan_environment(probe_environment(source_env.python), crc_for=["six", "idna"])
    table = dict(scan.digests)
    six = source_env.dists["six"]
    kept = plan_rebuild(six, scheme=source_env.scheme, digests=table)
    assert table == scan.digests
    taken = plan_rebuild(six, scheme=source_env.scheme, digests=table, consume=True)
    assert taken == kept
    sources = {m.source for m in taken.zip.members if m.source is not None}
    assert sources and not sources & set(table)  # six's files: taken
    assert set(scan.digests) - set(table) == sources
    idna_core = str(source_env.scheme.purelib / "idna" / "core.py")
    assert idna_core in table  # another distribution's: kept
