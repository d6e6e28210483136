"""repro/bundle/modelplace.py: the text a unit names a model by, where it expects it,
the fetch command, and the Hugging Face caches, one table of cases."""

from __future__ import annotations

from pathlib import Path

import pytest

from repro.bundle.info import ModelRef
from repro.bundle.modelplace import dir_name, expected_place, fetch_command, hf_caches, unit_token


def ref(**fields: object) -> ModelRef:
    values: dict[str, object] = {"name": "m", "role": "target", "total_bytes": 0, "file_count": 0}
    values.update(fields)
    return ModelRef(**values)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("model", "token", "directory"),
    [
        (ref(local_path="drafter"), "${REPRO_HOME}/drafter", "m"),
        (ref(local_path="models/d/v2"), "${REPRO_HOME}/models/d/v2", "m"),
        (ref(local_path="/models/Kimi-K2.6"), "${REPRO_MODELS}/Kimi-K2.6", "Kimi-K2.6"),
        (ref(local_path="/models/Kimi-K2.6/"), "${REPRO_MODELS}/Kimi-K2.6", "Kimi-K2.6"),
        (ref(name="k", local_path="/"), "${REPRO_MODELS}/k", "k"),
        (ref(local_path="."), None, "m"),
        (ref(repo_id="org/name"), None, "m"),
    ],
)
def test_the_units_text_and_the_directorys_name(
    model: ModelRef, token: str | None, directory: str
) -> None:
    assert unit_token(model) == token
    assert dir_name(model) == directory


def test_where_the_unit_expects_it() -> None:
    inside = expected_place(ref(local_path="drafter"))
    assert inside == "TARGET/drafter (${REPRO_HOME}/drafter)"
    outside = expected_place(ref(local_path="/models/Kimi"))
    assert outside.startswith("${REPRO_MODELS}/Kimi: TARGET/models/Kimi, or DIR/Kimi")
    assert "--models DIR" in outside and "/models/Kimi and the Hugging Face cache" in outside
    hub = expected_place(ref(repo_id="org/name"))
    assert hub == "the Hugging Face cache (the unit names org/name)"


@pytest.mark.parametrize(
    ("model", "command"),
    [
        (
            ref(repo_id="org/name", revision="abc"),
            "hf download org/name --revision abc --local-dir D",
        ),
        (ref(repo_id="org/name"), "hf download org/name --local-dir D"),
        (ref(local_path="/models/x"), None),
    ],
)
def test_the_fetch_command(model: ModelRef, command: str | None) -> None:
    assert fetch_command(model, "D") == command


def test_the_caches_in_order_each_once(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.delenv("HF_HUB_CACHE", raising=False)
    monkeypatch.delenv("HF_HOME", raising=False)
    default = tmp_path / ".cache" / "huggingface" / "hub"
    assert hf_caches() == (default,)
    monkeypatch.setenv("HF_HUB_CACHE", "/data/hub")
    monkeypatch.setenv("HF_HOME", str(tmp_path / ".cache" / "huggingface"))
    assert hf_caches() == (Path("/data/hub"), default)
