"""Tests of repro.snapshot.write.reproduce: REPRODUCE.md and setup_env.sh rendered."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from repro.bundle.signing import FAILURES, NAMESPACE
from repro.snapshot.write.reproduce import (
    PatchSummary,
    ReproduceFacts,
    render_reproduce,
    render_setup_env,
)

PLACEHOLDERS = [
    "name",
    "version",
    "top",
    "bundle_file",
    "created",
    "tool_version",
    "python_version",
    "torch_cuda",
    "hardware",
    "environment",
    "vault",
    "patches",
    "services",
    "launch",
    "models",
]


def _facts(**changes: object) -> ReproduceFacts:
    base: dict[str, object] = {
        "name": "demo-serve",
        "version": "1.2.0",
        "top": "demo-serve-1.2.0",
        "bundle_file": "demo-serve-1.2.0.tar",
        "created": "2024-05-01T00:00:00Z",
        "tool_version": "0.9.1",
        "python_version": "3.12.1",
    }
    base.update(changes)
    return ReproduceFacts(**base)  # type: ignore[arg-type]


def test_every_placeholder_is_filled() -> None:
    text = render_reproduce(_facts(torch_cuda="12.8"))
    for name in PLACEHOLDERS:
        assert f"${name}" not in text, name
    assert text.startswith("# Reproducing demo-serve 1.2.0\n")
    assert "    repro check demo-serve-1.2.0.tar\n" in text
    assert "    repro unpack demo-serve-1.2.0.tar --target /srv/demo-serve\n" in text
    assert "    tar xf demo-serve-1.2.0.tar && cd demo-serve-1.2.0\n" in text
    assert "written by repro 0.9.1 on 2024-05-01T00:00:00Z." in text
    assert "at least torch's (12.8)" in text
    assert "2. Python 3.12.1 with its headers" in text


@pytest.mark.parametrize(
    "fallback",
    [
        "_No GPU was visible on the source._",
        "_No facts._",
        "_No wheels: every distribution comes from the recorded indexes._",
        "_No installed file differs from its RECORD._",
        "_No systemd units._",
        "_No launch command recorded._",
        "_No model references._",
    ],
)
def test_an_empty_section_says_so(fallback: str) -> None:
    assert f"\n{fallback}\n" in render_reproduce(_facts())


def test_lists_and_tables_are_rendered_as_markdown() -> None:
    text = render_reproduce(
        _facts(
            hardware=["NVIDIA H200 (SM90), driver 570.86"],
            services=["sglang.service"],
            models=["drafter: org/eagle@abc123 (1.2 GiB, referenced)"],
            vault=[("kern-0.1+cu130-cp312-cp312-linux_x86_64.whl", "local version", "built")],
            patches=[PatchSummary("sglang", "0.5.0", "sglang/srt/server.py", "modified", 7, 2)],
            launch=[("unit sglang.service", "python -m sglang.launch_server --port 30000")],
        )
    )
    assert "\n- NVIDIA H200 (SM90), driver 570.86\n" in text
    assert "\n- sglang.service\n" in text
    assert "\n- drafter: org/eagle@abc123 (1.2 GiB, referenced)\n" in text
    assert (
        "| wheel | why | obtained |\n| --- | --- | --- |\n"
        "| `kern-0.1+cu130-cp312-cp312-linux_x86_64.whl` | local version | built |\n"
    ) in text
    assert (
        "| distribution | file | kind | lines |\n| --- | --- | --- | --- |\n"
        "| sglang 0.5.0 | `sglang/srt/server.py` | modified | +7 -2 |\n"
    ) in text
    assert "- unit sglang.service:\n\n      python -m sglang.launch_server --port 30000" in text


def test_dollar_signs_in_values_are_kept_as_written() -> None:
    text = render_reproduce(_facts(launch=[("script", "CUDA_HOME=$CUDA_HOME ./serve ${PORT}")]))
    assert "      CUDA_HOME=$CUDA_HOME ./serve ${PORT}" in text


def _setup_env(tmp_path: Path, **changes: object) -> tuple[Path, str]:
    arguments: dict[str, object] = {
        "tool_version": "0.9.1",
        "tool_python": "3.11",
        "source_python": "3.12",
        "wheel_pythons": ["3.11", "3.12"],
    }
    arguments.update(changes)
    text = render_setup_env(**arguments)  # type: ignore[arg-type]
    script = tmp_path / "setup_env.sh"
    script.write_text(text)
    return script, text


@pytest.mark.parametrize(
    ("wheel_pythons", "said"), [(["3.11", "3.12"], "3.11, 3.12"), ([], "none")]
)
def test_setup_env_is_filled_in_and_parses(
    tmp_path: Path, wheel_pythons: list[str], said: str
) -> None:
    script, text = _setup_env(tmp_path, wheel_pythons=wheel_pythons)
    assert "@@" not in text
    assert 'tool_version="0.9.1"\n' in text
    assert f'wheel_pythons="{said}"\n' in text
    assert f'namespace="{NAMESPACE}"' in text
    assert "candidates=(python3.12 python3.11 python3)\n" in text
    proc = subprocess.run(["bash", "-n", str(script)], capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stderr


def test_setup_env_names_each_signature_failure_as_repro_does(tmp_path: Path) -> None:
    _, text = _setup_env(tmp_path)
    arms = re.findall(r"^        \*(.+)\*\) why=(.+) ;;$", text, flags=re.MULTILINE)
    assert len(arms) == len(FAILURES)
    for needle, why in FAILURES:
        # the needle and the reason are bash words: run them through bash to read them
        words = subprocess.run(
            [
                "bash",
                "-c",
                f"printf '%s\\n' {arms[FAILURES.index((needle, why))][0]} "
                f"{arms[FAILURES.index((needle, why))][1]}",
            ],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        assert words == f"{needle.lower()}\n{why}\n"


def test_setup_env_outside_a_bundle_refuses_naming_the_manifest(tmp_path: Path) -> None:
    script, _ = _setup_env(tmp_path)
    proc = subprocess.run(
        ["/bin/bash", str(script), "--target", str(tmp_path / "target")],
        capture_output=True,
        text=True,
        env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)},
        cwd=tmp_path,
        check=False,
        timeout=60,
    )
    assert proc.returncode == 1
    assert f"{tmp_path}/MANIFEST.sha256: missing; this is not a whole bundle" in proc.stderr
    assert not (tmp_path / "target").exists()


def test_every_model_is_listed_with_its_identity_place_and_fetch_command() -> None:
    from repro.bundle.info import ModelRef
    from repro.snapshot.write.reproduce import model_entry

    absent = ModelRef(
        "Kimi-K2.6",
        "target",
        0,
        0,
        repo_id="moonshotai/Kimi-K2.6",
        local_path="/models/Kimi-K2.6",
        present=False,
    )
    text = model_entry(absent)
    assert "**Kimi-K2.6** (target): moonshotai/Kimi-K2.6 (no revision recorded)" in text
    assert "not present when packed" in text and "not pinned" in text
    assert "${REPRO_MODELS}/Kimi-K2.6: TARGET/models/Kimi-K2.6" in text
    assert "`hf download moonshotai/Kimi-K2.6 --local-dir TARGET/models/Kimi-K2.6`" in text
    drafter = ModelRef("drafter", "drafter", 3 << 30, 4, local_path="models/drafter")
    text = model_entry(drafter)
    assert "3.00 GiB in 4 files" in text and "TARGET/models/drafter (${REPRO_HOME}" in text
    assert "identity unknown" in text
