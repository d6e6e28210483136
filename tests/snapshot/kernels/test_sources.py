"""The source trees pack carries for a rebuild (repro.snapshot.kernels.sources), on real
trees and a real git checkout."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from repro.config import Config, KernelRecipe
from repro.errors import ConfigError
from repro.snapshot.facts.installed import InstalledDist
from repro.snapshot.kernels.sources import carry_source, find_sources, source_root


def _dist(tmp_path: Path, name: str, url: str | None, *, editable: bool = False) -> InstalledDist:
    direct = None if url is None else {"url": url, "dir_info": {"editable": editable}}
    return InstalledDist(
        name, "1.0", tmp_path / f"{name}-1.0.dist-info", tmp_path, direct, editable, "pip"
    )


def _tree(root: Path) -> Path:
    (root / "csrc").mkdir(parents=True)
    (root / "csrc" / "kernel.cu").write_text("__global__ void k() {}\n")
    (root / "setup.py").write_text("from setuptools import setup\nsetup()\n")
    (root / "build.sh").write_text("#!/bin/sh\n")
    (root / "build.sh").chmod(0o755)
    return root


def _rels(carried: object) -> list[str]:
    return [rel for rel, _ in carried.files]  # type: ignore[attr-defined]


def test_a_plain_tree_leaves_its_build_outputs_out(tmp_path: Path) -> None:
    root = _tree(tmp_path / "src")
    for junk in (
        "build/lib/x.py",
        "dist/x.whl",
        "x.egg-info/PKG-INFO",
        "csrc/__pycache__/a.pyc",
        ".git/HEAD",
        "csrc/kernel.o",
        "pkg/lib.so",
        "cmake-build-release/CMakeCache.txt",
        "venv/pyvenv.cfg",
    ):
        (root / junk).parent.mkdir(parents=True, exist_ok=True)
        (root / junk).write_text("x")
    carried = carry_source(_dist(tmp_path, "k", None), root, KernelRecipe())
    assert carried.source.kind == "tree"
    assert _rels(carried) == ["build.sh", "csrc/kernel.cu", "setup.py"]
    assert carried.source.files == 3
    assert carried.source.size == sum((root / r).stat().st_size for r in _rels(carried))
    members = carried.members()
    assert sorted(members) == [f"kernels/k/{r}" for r in _rels(carried)]


@pytest.mark.skipif(shutil.which("git") is None, reason="needs git")
def test_a_git_checkout_carries_its_tracked_files_only(tmp_path: Path) -> None:
    root = _tree(tmp_path / "src")
    (root / ".gitignore").write_text("ignored.txt\n")
    env = {
        **os.environ,
        "GIT_AUTHOR_NAME": "t",
        "GIT_AUTHOR_EMAIL": "t@t",
        "GIT_COMMITTER_NAME": "t",
        "GIT_COMMITTER_EMAIL": "t@t",
    }
    for argv in (["git", "init", "-q"], ["git", "add", "."], ["git", "commit", "-qm", "x"]):
        subprocess.run(argv, cwd=root, check=True, env=env, capture_output=True)
    (root / "ignored.txt").write_text("ignored")
    (root / "untracked.cu").write_text("untracked")
    (root / "csrc" / "kernel.cu").write_text("// edited after the commit: what was built\n")
    carried = carry_source(_dist(tmp_path, "k", None), root, KernelRecipe())
    assert carried.source.kind == "git"
    assert _rels(carried) == [".gitignore", "build.sh", "csrc/kernel.cu", "setup.py"]
    assert dict(carried.files)["csrc/kernel.cu"].read_text().startswith("// edited")


def test_secrets_are_left_out_with_why(tmp_path: Path) -> None:
    root = _tree(tmp_path / "src")
    (root / ".env").write_text("A=1\n")
    (root / "config.py").write_text("HF_TOKEN = 'hf_abcdefghijklmnopqrstuvwxyz0123'\n")
    carried = carry_source(_dist(tmp_path, "k", None), root, KernelRecipe())
    assert ".env" not in _rels(carried) and "config.py" not in _rels(carried)
    text = "\n".join(carried.warnings)
    assert "looks like a credential" in text and "hf_abc" not in text


def test_a_link_out_of_the_tree_is_not_followed(tmp_path: Path) -> None:
    root = _tree(tmp_path / "src")
    outside = tmp_path / "secret.h"
    outside.write_text("outside")
    (root / "csrc" / "out.h").symlink_to(outside)
    (root / "csrc" / "in.h").symlink_to(root / "csrc" / "kernel.cu")
    (root / "linked-dir").symlink_to(tmp_path)
    carried = carry_source(_dist(tmp_path, "k", None), root, KernelRecipe())
    assert "csrc/out.h" not in _rels(carried) and "linked-dir" not in _rels(carried)
    assert "csrc/in.h" in _rels(carried)  # inside the tree: carried as the file it names
    assert any("outside the source tree of k" in w for w in carried.warnings)


def test_found_from_direct_url_and_from_repro_toml(tmp_path: Path) -> None:
    local = _tree(tmp_path / "local")
    named = _tree(tmp_path / "named")
    dists = [
        _dist(tmp_path, "from-dir", local.as_uri(), editable=True),
        _dist(tmp_path, "from-toml", None),
        _dist(tmp_path, "from-index", None),
    ]
    dists.append(
        InstalledDist(
            "wheel-file",
            "1",
            tmp_path,
            tmp_path,
            {"url": (tmp_path / "x.whl").as_uri(), "archive_info": {}},
            False,
            None,
        )
    )
    config = Config(
        tmp_path,
        tmp_path / "repro.toml",
        kernels={"from-toml": KernelRecipe(source=named, arch_env=("MY_ARCHS",))},
    )
    found = {c.source.name: c.source for c in find_sources(dists, config)}
    assert sorted(found) == ["from-dir", "from-toml"]
    assert found["from-dir"].editable and found["from-dir"].origin == str(local)
    assert found["from-toml"].arch_env[-1] == "MY_ARCHS"
    assert source_root(dists[3]) is None


def test_a_recipe_for_nothing_installed_is_refused(tmp_path: Path) -> None:
    config = Config(tmp_path, tmp_path / "repro.toml", kernels={"ghost": KernelRecipe()})
    with pytest.raises(ConfigError, match=r"repro.toml: kernels.ghost: no distribution"):
        find_sources([_dist(tmp_path, "other", None)], config)
    config = Config(tmp_path, tmp_path / "repro.toml", kernels={"other": KernelRecipe()})
    with pytest.raises(ConfigError, match=r"kernels.other: .* give its tree as source"):
        find_sources([_dist(tmp_path, "other", None)], config)
