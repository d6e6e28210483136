"""The test suite's own set-up: where its venv cache lives, what scripts/test.sh checks."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests._venvs import cache_root


@pytest.mark.parametrize(
    ("environ", "expected"),
    [
        ({"REPRO_TEST_CACHE": "{t}/mine", "XDG_CACHE_HOME": "{t}/xdg"}, "{t}/mine"),
        ({"XDG_CACHE_HOME": "{t}/xdg"}, "{t}/xdg/repro-tests"),
        ({"REPRO_TEST_CACHE": "", "XDG_CACHE_HOME": "{t}/xdg"}, "{t}/xdg/repro-tests"),
    ],
)
def test_the_venv_cache_honours_its_variables(
    tmp_path: Path, environ: dict[str, str], expected: str
) -> None:
    filled = {key: value.format(t=tmp_path) for key, value in environ.items()}
    root = cache_root(filled)
    assert root == Path(expected.format(t=tmp_path))
    assert root.is_dir()


def test_without_variables_the_cache_is_in_the_home_cache() -> None:
    assert cache_root({}) == Path.home() / ".cache" / "repro-tests"
