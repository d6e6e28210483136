"""Secrets never enter a bundle: a token planted in the environment, in a .netrc and in a
file that holds HF_TOKEN, all three named by repro.toml's [files] include."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from repro.snapshot.workspace.files import secret_in_file
from tests.support.run import run, run_repro

TOKEN = "hf_hardenTestPlantedSecret0123456789abcd"
QUIET_TOKEN = "s3cr3t-v4lue-without-shape-42"  # only the environment says it is secret


@pytest.mark.slow
def test_bundle_bytes_hold_no_planted_token(tmp_path: Path) -> None:
    from tests.snapshot.conftest import PYTHON_311, make_venv

    root = tmp_path / "ws"
    root.mkdir()
    make_venv(PYTHON_311, root / "venv")
    (root / ".netrc").write_text(f"machine huggingface.co login me password {TOKEN}\n")
    bench = root / "bench"
    bench.mkdir()
    (bench / "serve.sh").write_text(f"#!/bin/sh\nexport HF_TOKEN={TOKEN}\nexec serve\n")
    (bench / "notes.txt").write_text(f"the key is {QUIET_TOKEN}\n")
    (bench / "run.sh").write_text("#!/bin/sh\nTOKENIZER_PATH=/models/tok python bench.py\n")
    (root / "repro.toml").write_text('[files]\ninclude = [".netrc", "bench/*"]\n')
    # a drafter whose card and config hold the tokens: models/ is a member like files/
    drafter = root / "drafter"
    drafter.mkdir()
    (drafter / "README.md").write_text(f"# drafter\nDownload with HF_TOKEN={TOKEN}\n")
    (drafter / "config.json").write_text(f'{{"note": "{QUIET_TOKEN}"}}\n')
    (drafter / "tokenizer_config.json").write_text('{"model_max_length": 4096}\n')
    env = {k: v for k, v in os.environ.items() if k != "VIRTUAL_ENV"}
    env.update(HF_TOKEN=TOKEN, WANDB_API_KEY=QUIET_TOKEN)
    out = tmp_path / "ws-1.0.tar"
    proc = run_repro(
        "pack", str(root), "-o", str(out), "--version", "1.0", "--offline", "--json", env=env
    )
    assert proc.returncode == 0, proc.stderr.decode()
    summary = json.loads(proc.stdout)
    data = out.read_bytes()
    assert TOKEN.encode() not in data
    assert QUIET_TOKEN.encode() not in data
    assert summary["files"] == ["bench/run.sh"]  # the harmless one still travels
    warnings = "\n".join(summary["warnings"])
    for name in (".netrc", "serve.sh", "notes.txt", "drafter/README.md", "drafter/config.json"):
        assert name in warnings, warnings
    listing = run(["tar", "-tf", str(out)]).split()
    assert "ws-1.0/models/drafter/tokenizer_config.json" in listing  # the harmless one travels
    assert not [m for m in listing if m.endswith(("drafter/README.md", "drafter/config.json"))]


@pytest.mark.parametrize(
    ("text", "flagged"),
    [
        (f"HF_TOKEN={TOKEN}\n", True),
        ("export API_KEY='abcdefgh12345'\n", True),
        ("db_password: hunter2hunter2\n", True),
        (f"token is {TOKEN} here\n", True),
        ("machine example.com login me password pw\n", True),
        ("-----BEGIN OPENSSH PRIVATE KEY-----\nb3Blbn\n", True),
        ("TOKENIZER_PATH=/models/tokenizer\nMAX_TOKENS=4096\n", False),
        ('{"tokens_per_s": 1234.5}\n', False),
    ],
)
def test_secret_in_file(tmp_path: Path, text: str, flagged: bool) -> None:
    path = tmp_path / "f"
    path.write_text(text)
    assert (secret_in_file(path) is not None) is flagged


def test_secret_value_found_past_the_scanned_head(tmp_path: Path) -> None:
    path = tmp_path / "big.bin"
    with path.open("wb") as stream:
        stream.truncate(20 << 20)
        stream.seek((16 << 20) - 5)
        stream.write(QUIET_TOKEN.encode())  # across the first chunk boundary
    assert secret_in_file(path, [QUIET_TOKEN]) is not None
    assert secret_in_file(path, ["other-value-123"]) is None
