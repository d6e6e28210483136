"""Bundle metadata that points outside the bundle, or that no parser should choke on.

A real `repro pack --wheels all` bundle, one metadata file edited and the bundle
re-manifested (so `repro check` passes), then the real `repro unpack`, `inspect` and
`diff`: each must end in a clear error naming the file and what is wrong (exit 1, an
invalid bundle), never a traceback, with nothing created at the target.
"""

from __future__ import annotations

import json
import re
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest
import tomli_w

from repro._toml import loads as toml_loads
from repro.bundle.manifesttree import write_manifest
from tests.e2e.test_hostile_sources import packed  # noqa: F401 - the shared packed bundle
from tests.support.run import run_repro

pytestmark = pytest.mark.slow

DEEP_TOML = "x = " + "[" * 50_000 + "]" * 50_000 + "\n"
DEEP_JSON = "[" * 50_000 + "]" * 50_000


def _edited(source: Path, into: Path, member: str, edit: Callable[[str], str]) -> Path:
    bundle = into / source.name
    shutil.copytree(source, bundle)
    path = bundle / member
    path.write_text(edit(path.read_text() if path.exists() else ""))
    write_manifest(bundle)
    checked = run_repro("check", str(bundle / "MANIFEST.sha256"))
    assert checked.returncode == 0, checked.stderr.decode()
    return bundle


def _first_vault_filename(value: str) -> Callable[[str], str]:
    def edit(text: str) -> str:
        assert 'filename = "' in text
        return re.sub(r'filename = "[^"]*"', f"filename = {json.dumps(value)}", text, count=1)

    return edit


def _with_model(**files: object) -> Callable[[str], str]:
    def edit(text: str) -> str:
        document = toml_loads(text)
        model = {"name": "drafter", "role": "drafter", "total_bytes": 1, "file_count": 1}
        document["models"] = [{**model, **files}]
        return tomli_w.dumps(document)

    return edit


def _unpack(bundle: Path, target: Path) -> tuple[int, str]:
    result = run_repro(
        "unpack", str(bundle), "--target", str(target), "--cpu", "--no-smoke", "--offline"
    )
    return result.returncode, result.stdout.decode() + result.stderr.decode()


PATH_CASES = [
    ("env/vault.toml", _first_vault_filename("/etc/hostname"), "'/etc/hostname'"),
    ("env/vault.toml", _first_vault_filename("../../../etc/x.whl"), "'../../../etc/x.whl'"),
    ("env/vault.toml", _first_vault_filename("sub/x.whl"), "'sub/x.whl'"),
    (
        "bundle.toml",
        _with_model(small_files={"../../etc/passwd": "a" * 64}),
        "small_files.../../etc/passwd",
    ),
    (
        "bundle.toml",
        _with_model(small_files={"/etc/passwd": "a" * 64}),
        "small_files./etc/passwd",
    ),
    ("bundle.toml", _with_model(large_files={"../w.bin": 5}), "large_files.../w.bin"),
    (
        "bundle.toml",
        _with_model(local_path="../../outside", small_files={}),
        "local_path",
    ),
    (
        "patches/patches.toml",
        lambda text: text.replace('path = "six.py"', 'path = "/etc/hostname"', 1),
        "'/etc/hostname' is not a plain path",
    ),
]


@pytest.mark.parametrize(
    ("member", "edit", "expected"),
    PATH_CASES,
    ids=[
        "vault-absolute",
        "vault-dotdot",
        "vault-subdir",
        "model-small-dotdot",
        "model-small-absolute",
        "model-large-dotdot",
        "model-local-path-dotdot",
        "patch-absolute",
    ],
)
def test_metadata_names_outside_their_section_are_refused(
    packed: Path,  # noqa: F811
    tmp_path: Path,
    member: str,
    edit: Callable[[str], str],
    expected: str,
) -> None:
    assert_unpack_refuses(packed, tmp_path, member, edit, expected)


def assert_unpack_refuses(
    bundle_in: Path, tmp_path: Path, member: str, edit: Callable[[str], str], expected: str
) -> None:
    """The bundle with `member` edited (and re-manifested): unpack exits 1 naming the file
    and `expected`, with no traceback and no target."""
    bundle = _edited(bundle_in, tmp_path, member, edit)
    code, output = _unpack(bundle, tmp_path / "target")
    assert code == 1, output
    assert member.rsplit("/", 1)[-1] in output and expected in output
    assert "Traceback" not in output
    assert not (tmp_path / "target").exists()


MALFORMED = [
    ("bundle.toml", lambda _: DEEP_TOML, "not valid TOML"),
    ("patches/patches.toml", lambda _: DEEP_TOML, "not valid TOML"),
    ("env/vault.toml", lambda _: DEEP_TOML, "not valid TOML"),
    ("env/vault.toml", lambda _: "wheels = 1\n", "'wheels' must be an array"),
    ("env/vault.toml", lambda _: "[[wheels]]\nfilename = 3\n", "wheels[0] needs string keys"),
    ("env/pack-report.json", lambda _: "[]", "must be a JSON object, not list"),
    ("env/pack-report.json", lambda _: "null", "must be a JSON object, not NoneType"),
    ("env/pack-report.json", lambda _: '{"installed_bytes": 1e999}', "'installed_bytes'"),
    ("env/pack-report.json", lambda _: '{"installed_bytes": "12"}', "'installed_bytes'"),
    ("env/pack-report.json", lambda _: '{"unmet_requirements": 3}', "'unmet_requirements'"),
    ("env/pack-report.json", lambda _: DEEP_JSON, "nested too deeply"),
]


@pytest.mark.parametrize(
    ("member", "edit", "expected"),
    MALFORMED,
    ids=[
        "deep-bundle-toml",
        "deep-patches-toml",
        "deep-vault-toml",
        "vault-wheels-not-array",
        "vault-wrong-type",
        "report-list",
        "report-null",
        "report-infinite-size",
        "report-size-string",
        "report-unmet-not-list",
        "report-deep",
    ],
)
def test_malformed_metadata_is_an_error_not_a_traceback(
    packed: Path,  # noqa: F811
    tmp_path: Path,
    member: str,
    edit: Callable[[str], str],
    expected: str,
) -> None:
    assert_unpack_refuses(packed, tmp_path, member, edit, expected)


@pytest.mark.parametrize("member", ["bundle.toml", "patches/patches.toml", "env/vault.toml"])
def test_deep_toml_in_inspect_and_diff_is_an_error(
    packed: Path,  # noqa: F811
    tmp_path: Path,
    member: str,
) -> None:
    bundle = _edited(packed, tmp_path, member, lambda _: DEEP_TOML)
    for args in (("inspect", str(bundle)), ("diff", str(packed), str(bundle))):
        result = run_repro(*args)
        output = result.stdout.decode() + result.stderr.decode()
        assert result.returncode in (1, 2), output
        assert "Traceback" not in output and "RecursionError" not in output
        assert "nested too deeply" in output, output
