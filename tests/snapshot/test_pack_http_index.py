"""A plain-http index found at pack time is named in a warning: unpack refuses it online."""

from __future__ import annotations

from pathlib import Path

from tests.support.run import run_repro


def test_pack_warns_about_a_plain_http_index(tmp_path: Path) -> None:
    from tests.snapshot.conftest import PYTHON_311, make_venv

    root = tmp_path / "ws"
    root.mkdir()
    make_venv(PYTHON_311, root / "venv")
    env = {
        "VIRTUAL_ENV": None,
        "PIP_EXTRA_INDEX_URL": "http://mirror.example/simple https://ok.example/simple",
    }
    out = tmp_path / "b.tar"
    proc = run_repro("pack", str(root), "-o", str(out), "--offline", env=env)
    assert proc.returncode == 0, proc.stderr.decode()
    err = proc.stderr.decode()
    warned = [line for line in err.splitlines() if "is plain http" in line]
    assert len(warned) == 1, err
    assert "index http://mirror.example/simple ($PIP_EXTRA_INDEX_URL)" in warned[0]
    assert "refuses it online" in warned[0]
