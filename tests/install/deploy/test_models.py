"""A bundle's model references name files on the target box: the models step must
read them bounded. A real `repro pack --wheels all` bundle whose bundle.toml is given
models pointing at `/proc/self/pagemap`, at a FIFO and at a link out of the model
directory, re-manifested, then the real `repro unpack`: each is reported as a
differing small file at once (pytest-timeout proves nothing blocks), never read.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from pathlib import Path

import pytest
import tomli_w

from repro._toml import loads as toml_loads
from repro.bundle.manifesttree import write_manifest
from repro.errors import SmallFileRefused
from repro.smallfile import small_file_sha256
from tests.e2e.test_hostile_sources import packed  # noqa: F401 - the shared packed bundle
from tests.support.run import run_repro

DIGEST = "a" * 64


def _fifo_model(root: Path) -> Path:
    """A model directory whose small files are a FIFO (nobody ever writes to it), a link
    to a file outside the directory, and one honest config."""
    model = root / "fifo-model"
    model.mkdir()
    os.mkfifo(model / "config.json")
    outside = root / "outside.txt"
    outside.write_text("not the model's\n")
    (model / "tokenizer_config.json").symlink_to(outside)
    (model / "generation_config.json").write_text("{}\n")
    return model


@pytest.mark.timeout(20)
def test_small_file_reads_refuse_what_is_not_a_small_file(tmp_path: Path) -> None:
    model = _fifo_model(tmp_path)
    with pytest.raises(SmallFileRefused, match="not a regular file"):
        small_file_sha256(model / "config.json", within=[model], limit=1 << 20)
    with pytest.raises(SmallFileRefused, match="outside"):
        small_file_sha256(model / "tokenizer_config.json", within=[model], limit=1 << 20)
    # /proc says 0 bytes and then streams: read past its size is refused
    with pytest.raises(SmallFileRefused):
        small_file_sha256(Path("/proc/self/pagemap"), within=[Path("/")], limit=1 << 20)
    with pytest.raises(SmallFileRefused, match="3 bytes, over 2"):
        small_file_sha256(model / "generation_config.json", within=[model], limit=2)
    honest = model / "generation_config.json"
    expected = hashlib.sha256(honest.read_bytes()).hexdigest()
    assert small_file_sha256(honest, within=[model], limit=1 << 20) == expected


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_unpack_reports_model_files_it_must_not_read(
    packed: Path,  # noqa: F811
    tmp_path: Path,
) -> None:
    model = _fifo_model(tmp_path)
    bundle = tmp_path / packed.name
    shutil.copytree(packed, bundle)
    info = bundle / "bundle.toml"
    document = toml_loads(info.read_text())
    base = {"role": "drafter", "total_bytes": 1, "file_count": 1}
    honest = hashlib.sha256((model / "generation_config.json").read_bytes()).hexdigest()
    document["models"] = [
        {
            **base,
            "name": "pagemap",
            "local_path": "/",
            "small_files": {"proc/self/pagemap": DIGEST},
        },
        {
            **base,
            "name": "fifo",
            "local_path": str(model),
            "small_files": {
                "config.json": DIGEST,
                "tokenizer_config.json": DIGEST,
                "generation_config.json": honest,
            },
        },
    ]
    info.write_text(tomli_w.dumps(document))
    write_manifest(bundle)
    assert run_repro("check", str(bundle / "MANIFEST.sha256")).returncode == 0

    target = tmp_path / "target"
    result = run_repro(
        "unpack", str(bundle), "--target", str(target), "--cpu", "--no-smoke", "--offline",
        "--json", timeout=500,
    )  # fmt: skip
    output = result.stdout.decode() + result.stderr.decode()
    assert result.returncode == 0, output
    assert "Traceback" not in output
    checks = {m["name"]: m for m in json.loads(result.stdout)["models"]}
    assert checks["pagemap"]["status"] == "different"
    assert "proc/self/pagemap (" in checks["pagemap"]["detail"]
    fifo = checks["fifo"]
    assert fifo["status"] == "different"
    assert "config.json (not a regular file" in fifo["detail"]
    assert "tokenizer_config.json (leads to" in fifo["detail"]
    assert "generation_config.json" not in fifo["detail"]
    assert "2 small file(s)" in fifo["detail"]


def test_a_hugging_face_snapshot_links_into_its_blobs(tmp_path: Path) -> None:
    """Within a snapshot of the cache, small files are links into the repository's
    blobs/: followed there, and no further."""
    from repro.bundle.info import ModelRef
    from repro.install.deploy.models import locate_model

    repo = tmp_path / "hub/models--org--m"
    snapshot = repo / "snapshots/0123abcd"
    snapshot.mkdir(parents=True)
    (repo / "blobs").mkdir()
    (repo / "blobs/c1").write_text('{"model_type": "x"}')
    (snapshot / "config.json").symlink_to("../../blobs/c1")
    digest = hashlib.sha256((repo / "blobs/c1").read_bytes()).hexdigest()
    ref = ModelRef(
        name="m",
        role="drafter",
        total_bytes=1,
        file_count=1,
        local_path=str(snapshot),
        small_files={"config.json": digest},
    )
    assert locate_model(ref, None).status == "found"
    (tmp_path / "elsewhere").write_text('{"model_type": "x"}')
    (snapshot / "config.json").unlink()
    (snapshot / "config.json").symlink_to(tmp_path / "elsewhere")
    check = locate_model(ref, None)
    assert check.status == "different" and "config.json (leads to" in check.detail
