from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import requests
from packaging.pylock import Pylock

from repro import _toml
from repro.bundle.lock import (
    DistFile,
    IndexConfig,
    Pin,
    check_pylock,
    read_requirements_lock,
    render_pylock,
    render_requirements_lock,
)
from repro.errors import InputError, PylockError
from repro.snapshot.facts.environment import probe_environment
from repro.snapshot.facts.freeze import pins_from_facts, pip_freeze, requires_python_of
from tests.snapshot.conftest import PYTHON_311, LockTools, Venv, make_venv
from tests.support.run import run

PINS = (Pin("six", "1.17.0"), Pin("idna", "3.10"), Pin("attrs", "25.1.0"))


def freeze_of(python: Path) -> set[str]:
    out = run([str(python), "-m", "pip", "freeze", "--all"])
    return {line.lower() for line in out.splitlines() if line}


def test_render_and_read_round_trip(tmp_path: Path) -> None:
    indexes = IndexConfig(
        index_url="https://pypi.org/simple",
        extra_index_urls=("https://download.pytorch.org/whl/cu130",),
        find_links=("https://example.com/wheels/",),
        local=("/opt/wheels",),
    )
    hashes = {"six": ["a" * 64], "IDNA": ["b" * 64, "c" * 64], "attrs": ["d" * 64]}
    text = render_requirements_lock(PINS, indexes, hashes=hashes, source="/srv/venv")
    assert "file://" not in text and "-e " not in text
    assert "# source-only location, not portable: /opt/wheels" in text
    path = tmp_path / "requirements.lock"
    path.write_text(text)
    lock = read_requirements_lock(path)
    assert lock.pins == tuple(sorted(PINS, key=lambda p: p.name))
    assert lock.indexes.index_url == "https://pypi.org/simple"
    assert lock.indexes.extra_index_urls == indexes.extra_index_urls
    assert lock.indexes.find_links == indexes.find_links
    assert lock.hashes == {"six": ("a" * 64,), "idna": ("b" * 64, "c" * 64), "attrs": ("d" * 64,)}


def test_hashes_are_all_or_nothing() -> None:
    text = render_requirements_lock(PINS, IndexConfig(), hashes={"six": ["a" * 64]})
    assert "--hash" not in text
    assert "six==1.17.0\n" in text


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ("six==1.17.0\nidna>=3\n", r":2: 'idna>=3' is not an exact pin"),
        ("-e ./src\n", r":1: unsupported option -e"),
        ("six @ file:///tmp/six.whl\n", r":1: 'six' is not an exact pin"),
        ("six==1.0\nSix==1.0\n", r":2: six is pinned twice \(first on line 1\)"),
        ("# c\n\nsix==1.0 \\\n    --hash=md5:abc\n", r":3: '--hash=md5:abc' is not"),
        ("six==1.0 --hash=sha256:" + "a" * 64 + "\nidna==3\n", "some pins have --hash"),
        ("--index-url\n", r":1: option --index-url needs exactly one value"),
    ],
)
def test_malformed_locks_name_the_line(tmp_path: Path, body: str, message: str) -> None:
    path = tmp_path / "requirements.lock"
    path.write_text(body)
    with pytest.raises(InputError, match=message):
        read_requirements_lock(path)


@pytest.mark.slow
def test_freeze_and_lock_of_a_real_venv(clean_env: Venv) -> None:
    facts = probe_environment(clean_env.python)
    freeze = pip_freeze(clean_env.python, facts)
    assert not freeze.derived
    assert "-e " in freeze.text  # pip freeze shows the editable verbatim
    assert "repro-demo-wheel @ file://" in freeze.text
    pins = pins_from_facts(facts)
    names = [p.name for p in pins]
    assert names == sorted(names)
    assert {"six", "idna", "packaging", "attrs", "pip", "repro-demo-wheel"} <= set(names)
    text = render_requirements_lock(pins, IndexConfig())
    assert "repro-demo-wheel==1.0+local" in text and "repro-demo-editable==0.3" in text
    assert "file:" not in text and "-e " not in text


@pytest.mark.slow
def test_freeze_without_pip_is_derived(tmp_path: Path) -> None:
    root = tmp_path / "nopip"
    run([str(PYTHON_311), "-m", "venv", "--without-pip", str(root)])
    run(
        [
            sys.executable,
            "-m",
            "pip",
            "--python",
            str(root / "bin" / "python"),
            "install",
            "-q",
            "six",
        ]
    )
    facts = probe_environment(root / "bin" / "python")
    freeze = pip_freeze(root / "bin" / "python", facts)
    assert freeze.derived
    assert freeze.text.startswith("# ")
    assert "has no pip" in freeze.text
    assert "six==1.17.0" in freeze.text.splitlines()


def _fresh_venv(tmp_path: Path, name: str) -> Venv:
    return make_venv(PYTHON_311, tmp_path / name)


@pytest.mark.slow
def test_pip_sync_and_uv_install_the_lock(
    tmp_path: Path, clean_env: Venv, lock_tools: LockTools, vault_dir: Path
) -> None:
    facts = probe_environment(clean_env.python)
    pins = pins_from_facts(facts)
    lock = tmp_path / "requirements.lock"
    lock.write_text(
        render_requirements_lock(pins, IndexConfig(index_url="https://pypi.org/simple"))
    )
    expected = {f"{p.name}=={p.version}" for p in pins}

    target = _fresh_venv(tmp_path, "pip-sync-target")
    run(
        [
            str(lock_tools.pip_sync),
            "--python-executable",
            str(target.python),
            "--find-links",
            str(vault_dir),
            str(lock),
        ]
    )
    assert freeze_of(target.python) == expected

    uv_target = tmp_path / "uv-target"
    run([str(lock_tools.uv), "venv", "-q", "-p", str(PYTHON_311), str(uv_target)])
    run(
        [
            str(lock_tools.uv),
            "pip",
            "sync",
            "-q",
            "--python",
            str(uv_target / "bin" / "python"),
            "--find-links",
            str(vault_dir),
            str(lock),
        ]
    )
    uv_pins = {f"{p.name}=={p.version}" for p in pins if p.name not in ("pip", "setuptools")}
    installed = run(
        [str(lock_tools.uv), "pip", "freeze", "--python", str(uv_target / "bin" / "python")]
    )
    assert {line.lower() for line in installed.splitlines()} >= uv_pins


@pytest.mark.slow
def test_hashed_lock_and_pylock_install_for_real(
    tmp_path: Path, lock_tools: LockTools, vault_dir: Path
) -> None:
    """Hashes as the vault/index code would supply them: from the real wheel files."""
    downloads = tmp_path / "wheels"
    run(
        [
            sys.executable,
            "-m",
            "pip",
            "download",
            "-q",
            "--no-deps",
            "-d",
            str(downloads),
            "six==1.17.0",
            "idna==3.10",
        ]
    )
    for wheel in vault_dir.glob("repro_demo_wheel-*.whl"):
        (downloads / wheel.name).write_bytes(wheel.read_bytes())
    files = sorted(downloads.glob("*.whl"))
    digests = {f.name: hashlib.sha256(f.read_bytes()).hexdigest() for f in files}
    pins = (Pin("six", "1.17.0"), Pin("idna", "3.10"), Pin("repro-demo-wheel", "1.0+local"))
    by_pin = {
        "six": [f for f in files if f.name.startswith("six-")],
        "idna": [f for f in files if f.name.startswith("idna-")],
        "repro-demo-wheel": [f for f in files if f.name.startswith("repro_demo_wheel-")],
    }
    hashes = {name: [digests[f.name] for f in fs] for name, fs in by_pin.items()}
    lock = tmp_path / "requirements.lock"
    lock.write_text(render_requirements_lock(pins, IndexConfig(), hashes=hashes))
    assert lock.read_text().count("--hash=sha256:") == 3
    target = _fresh_venv(tmp_path, "hashed")
    run(
        [
            str(lock_tools.pip_sync),
            "--python-executable",
            str(target.python),
            "--find-links",
            str(downloads),
            str(lock),
        ]
    )
    assert {"six==1.17.0", "idna==3.10", "repro-demo-wheel==1.0+local"} <= freeze_of(target.python)

    # pylock.toml: six from its PyPI URL, the others from files beside the lock (the vault case)
    meta = requests.get(
        "https://pypi.org/simple/six/",
        headers={"Accept": "application/vnd.pypi.simple.v1+json"},
        timeout=60,
    ).json()
    (six_file,) = [f for f in meta["files"] if f["filename"] == "six-1.17.0-py2.py3-none-any.whl"]
    wheels = {
        "six": [
            DistFile(
                six_file["filename"],
                six_file["hashes"]["sha256"],
                url=six_file["url"],
                size=six_file["size"],
            )
        ],
        "idna": [
            DistFile(f.name, digests[f.name], path=f"wheels/{f.name}") for f in by_pin["idna"]
        ],
        "repro-demo-wheel": [
            DistFile(f.name, digests[f.name], path=f"wheels/{f.name}")
            for f in by_pin["repro-demo-wheel"]
        ],
    }
    pylock = tmp_path / "pylock.toml"
    pylock.write_text(
        render_pylock(
            pins,
            IndexConfig(index_url="https://pypi.org/simple"),
            requires_python="==3.11.*",
            files=wheels,
        )
    )
    document = _toml.loads(pylock.read_text())
    assert document["lock-version"] == "1.0" and document["created-by"] == "repro"
    assert "unlisted" not in document["tool"]["repro"]
    uv_target = tmp_path / "uv-pylock"
    run([str(lock_tools.uv), "venv", "-q", "-p", str(PYTHON_311), str(uv_target)])
    env = dict(os.environ, UV_PREVIEW_FEATURES="pylock")
    proc = subprocess.run(
        [
            str(lock_tools.uv),
            "pip",
            "sync",
            "--python",
            str(uv_target / "bin" / "python"),
            str(pylock),
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    installed = run(
        [str(lock_tools.uv), "pip", "freeze", "--python", str(uv_target / "bin" / "python")]
    )
    assert {line.lower() for line in installed.splitlines()} == {
        "six==1.17.0",
        "idna==3.10",
        "repro-demo-wheel==1.0+local",
    }


def test_pylock_leaves_out_pins_without_files_and_names_them() -> None:
    text = render_pylock(
        PINS, IndexConfig(index_url="https://pypi.org/simple"), requires_python="==3.11.*"
    )
    document = _toml.loads(text)
    assert document["packages"] == []
    assert document["tool"]["repro"]["unlisted"] == ["attrs", "idna", "six"]
    Pylock.from_dict(document).validate()


_SHA = "ab" * 32
_URL = "https://files.example/"
_PYLOCK_CASES: list[tuple[str, list[DistFile], dict[str, Any]]] = [
    (
        "wheel by url",
        [DistFile("six-1.17.0-py2.py3-none-any.whl", _SHA, url=_URL + "six.whl")],
        {"wheels": 1},
    ),
    (
        "wheel by path",
        [DistFile("six-1.17.0-py2.py3-none-any.whl", _SHA, path="wheels/six.whl", size=9)],
        {"wheels": 1},
    ),
    ("sdist only", [DistFile("six-1.17.0.tar.gz", _SHA, url=_URL + "six.tgz")], {"sdist": 1}),
    (
        "sdist and wheel",
        [
            DistFile("six-1.17.0.tar.gz", _SHA, url=_URL + "six.tgz"),
            DistFile("six-1.17.0-py2.py3-none-any.whl", _SHA, url=_URL + "six.whl"),
        ],
        {"wheels": 1, "sdist": 1},
    ),
    (
        "two sdists: the .tar.gz",
        [
            DistFile("six-1.17.0.zip", _SHA, url=_URL + "six.zip"),
            DistFile("six-1.17.0.tar.gz", _SHA, url=_URL + "six.tgz"),
        ],
        {"sdist": 1},
    ),
    (
        "wheels of two platforms",
        [
            DistFile("six-1.17.0-cp311-cp311-manylinux_2_28_x86_64.whl", _SHA, url=_URL + "a"),
            DistFile("six-1.17.0-cp311-cp311-manylinux_2_28_aarch64.whl", _SHA, url=_URL + "b"),
        ],
        {"wheels": 2},
    ),
]


@pytest.mark.parametrize(("case", "files", "expected"), _PYLOCK_CASES, ids=lambda c: str(c))
def test_pylock_shapes_pass_packaging(
    case: str, files: list[DistFile], expected: dict[str, Any]
) -> None:
    text = render_pylock(
        [Pin("six", "1.17.0")],
        IndexConfig(),
        requires_python="==3.11.*",
        files={"six": files},
        index_of={"six": "https://pypi.org/simple"},
    )
    lock = Pylock.from_dict(_toml.loads(text))
    lock.validate()
    (package,) = lock.packages
    assert package.index == "https://pypi.org/simple", case
    assert len(package.wheels or ()) == expected.get("wheels", 0), case
    if expected.get("sdist"):
        assert package.sdist is not None and package.sdist.filename == "six-1.17.0.tar.gz"
    else:
        assert package.sdist is None
    assert all(w.filename.endswith(".whl") for w in package.wheels or ())


@pytest.mark.parametrize(
    ("document", "reason"),
    [
        ('lock-version = "1.0"\ncreated-by = "x"\npackages = [{name = "six"}]\n', "vcs"),
        ('lock-version = "1.0"\npackages = []\n', "created-by"),
        ('lock-version = "1.0"\ncreated-by = "x"\npackages = [{name = "Six"}]\n', "normal"),
        ("lock-version = ", "not a valid"),
    ],
)
def test_check_pylock_names_the_file_and_the_fault(document: str, reason: str) -> None:
    with pytest.raises(PylockError) as caught:
        check_pylock(document, "env/pylock.toml")
    assert str(caught.value).startswith("env/pylock.toml: not a valid PEP 751 lock")
    assert reason in str(caught.value) and caught.value.hint


def test_a_wheel_of_another_name_is_refused_before_it_is_written() -> None:
    with pytest.raises(PylockError, match="not consistent with package name"):
        render_pylock(
            [Pin("six", "1.17.0")],
            IndexConfig(),
            requires_python="==3.11.*",
            files={"six": [DistFile("idna-3.10-py3-none-any.whl", _SHA, path="wheels/x.whl")]},
        )


@pytest.mark.slow
def test_requires_python_of_a_real_env(clean_env: Venv) -> None:
    facts = probe_environment(clean_env.python)
    assert requires_python_of(facts) == "==3.11.*"
