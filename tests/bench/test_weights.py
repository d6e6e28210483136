"""bench.weights: its shards are real safetensors files, and a small run agrees with
sha256sum and writes its results."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from bench.weights import drop_cached, main, write_shard
from repro.safetensors_header import read_header


def test_a_shard_is_a_whole_safetensors_file(tmp_path: Path) -> None:
    path = tmp_path / "model-00001-of-00001.safetensors"
    write_shard(path, 3_000_000, seed=1)
    header = read_header(path)
    assert (header.tensor_count, header.dtypes) == (2, ("F32",))
    assert abs(path.stat().st_size - 3_000_000) < 200
    drop_cached([str(path)])  # no error for a file of its own


@pytest.mark.skipif(shutil.which("sha256sum") is None, reason="needs sha256sum")
def test_a_small_run_writes_its_results(tmp_path: Path) -> None:
    out = tmp_path / "results" / "w"
    code = main(
        [
            "--shards",
            "2",
            "--shard-mb",
            "2",
            "--runs",
            "1",
            "--dir",
            str(tmp_path / "s"),
            "--out",
            str(out),
            "--cache",
            "cold",
        ]
    )
    assert code == 0
    result = json.loads(out.with_suffix(".json").read_text())
    assert result["digests_agree"] is True
    assert [s["name"] for s in result["settings"]["cold"]["series"]] == [
        "repro",
        "sha256sum",
        "cat",
    ]
    assert "sha256sum / repro" in out.with_suffix(".md").read_text()
    assert not list((tmp_path / "s").iterdir())  # the shards are removed
