"""`repro smoke --bundle` given an archive or an http(s) URL: extracted with unpack's safe
reader into a temporary directory, verified, used for its ladder settings, removed.

Real bundle (a venv with six; `[ladder] rungs = ["python", "torch"]`), served by
http.server on 127.0.0.1, through the real CLI.
"""

from __future__ import annotations

import functools
import http.server
import json
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.bundles import tamper
from tests.support.run import run_repro
from tests.support.venvs import find_python

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path, Path]]:
    """(base URL, directory served, the workspace's venv)."""
    root = tmp_path_factory.mktemp("smoke-bundle")
    ws = root / "ws"
    ws.mkdir()
    venv = ws / ".venv"
    for argv in (
        [str(find_python("3.11")), "-m", "venv", str(venv)],
        [str(venv / "bin" / "python"), "-m", "pip", "install", "-q", "six==1.16.0"],
    ):
        subprocess.run(argv, check=True, capture_output=True, timeout=600)
    (ws / "repro.toml").write_text('[ladder]\nrungs = ["python", "torch"]\n')
    site = root / "site"
    site.mkdir()
    packed = run_repro("pack", str(ws), "-o", str(site / "demo-1.tar"), "--name", "demo")
    assert packed.returncode == 0, packed.stderr.decode()
    tamper(site / "demo-1.tar", site / "tampered.tar", "bundle.toml", b"name = 'x'\n")
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(site))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", site, venv
    finally:
        server.shutdown()
        server.server_close()


def _smoke(bundle: str, venv: Path, tmp: Path) -> tuple[int, str, str]:
    result = run_repro(
        "smoke", "--bundle", bundle, "--python", str(venv), "--cpu", "--json",
        env={"TMPDIR": str(tmp)},
    )  # fmt: skip
    return result.returncode, result.stdout.decode(), result.stderr.decode()


@pytest.mark.parametrize("where", ["url", "archive"])
def test_a_bundle_archive_or_url_gives_its_ladder_settings(
    served: tuple[str, Path, Path], tmp_path: Path, where: str
) -> None:
    base, site, venv = served
    bundle = f"{base}/demo-1.tar" if where == "url" else str(site / "demo-1.tar")
    status, stdout, stderr = _smoke(bundle, venv, tmp_path)
    assert status == 0, stderr
    report = json.loads(stdout)
    assert report["ok"] is True
    # the bundle's own selection, not the default ladder of six rungs
    assert [rung["name"] for rung in report["rungs"]] == ["python", "torch"]
    assert report["rungs"][0]["status"] == "pass"
    assert list(tmp_path.iterdir()) == []  # the extracted bundle is gone


def test_a_bundle_that_does_not_verify_runs_nothing(
    served: tuple[str, Path, Path], tmp_path: Path
) -> None:
    base, _site, venv = served
    status, stdout, stderr = _smoke(f"{base}/tampered.tar", venv, tmp_path)
    assert status == 1, stderr
    assert stdout == ""
    assert "bundle.toml" in stderr and "does not verify" in stderr
    assert list(tmp_path.iterdir()) == []


def test_a_url_that_is_not_there_is_unreadable_input(
    served: tuple[str, Path, Path], tmp_path: Path
) -> None:
    base, _site, venv = served
    status, stdout, stderr = _smoke(f"{base}/no-such.tar", venv, tmp_path)
    assert status == 2, stderr
    assert "404" in stderr
    assert stdout == ""
    assert list(tmp_path.iterdir()) == []
