"""torch/version.py parsed as torch writes it, odd and hostile files, and never executed."""

from __future__ import annotations

from pathlib import Path

import pytest

from repro.gpu.torchversion import TorchVersionFile, read_torch_version_file
from tests.snapshot.facts.test_modulefiles import GIT_VERSION, TORCH_VERSION, VERSION_PY


def test_parses_torch_version_file_as_torch_writes_it(tmp_path: Path) -> None:
    path = tmp_path / "version.py"
    path.write_text(VERSION_PY)
    assert read_torch_version_file(path) == TorchVersionFile(
        version=TORCH_VERSION, cuda="13.0", hip=None, git_version=GIT_VERSION
    )


ODD_FILES: list[tuple[str, bytes, TorchVersionFile]] = [
    ("empty", b"", TorchVersionFile()),
    (
        "non-string values",
        b"__version__ = 2.1\ncuda = None\nhip = ['6.0']\ngit_version = b'x'\n",
        TorchVersionFile(),
    ),
    ("computed values", b"__version__ = '2.' + '1'\ncuda = str(13)\n", TorchVersionFile()),
    ("last assignment wins", b"__version__ = '1'\n__version__ = '2'\n", TorchVersionFile("2")),
    (
        "chained and annotated",
        b"__version__ = cuda = '12.8'\nhip: str = '6.2'\n",
        TorchVersionFile("12.8", "12.8", "6.2"),
    ),
    (
        "annotation without value",
        b"cuda: Optional[str]\n__version__ = '3'\n",
        TorchVersionFile("3"),
    ),
    (
        "assignments inside blocks are not module level",
        b"if True:\n    __version__ = '9'\ndef f():\n    cuda = '1'\n",
        TorchVersionFile(),
    ),
    ("other targets", b"x.__version__ = '1'\n(a, cuda) = ('1', '2')\n", TorchVersionFile()),
    ("utf-8 text", "__version__ = 'ünïcode'\n".encode(), TorchVersionFile("ünïcode")),
]


@pytest.mark.parametrize(
    "content,expected", [c[1:] for c in ODD_FILES], ids=[c[0] for c in ODD_FILES]
)
def test_odd_version_files(tmp_path: Path, content: bytes, expected: TorchVersionFile) -> None:
    path = tmp_path / "version.py"
    path.write_bytes(content)
    assert read_torch_version_file(path) == expected


HOSTILE_FILES: list[tuple[str, bytes, str]] = [
    ("syntax error", b"__version__ = '2.1\n", "not valid Python"),
    ("null byte", b"__version__ = '2.1'\x00\n", "not valid Python"),
    ("not utf-8", b"__version__ = '\xff\xfe'\n", "not valid Python"),
    ("deep nesting", b"x = " + b"(" * 100_000 + b")" * 100_000 + b"\n", "not valid Python"),
    ("too large", b"#" * (1 << 20) + b"\n__version__ = '1'\n", "larger than"),
]


@pytest.mark.parametrize(
    "content,error", [c[1:] for c in HOSTILE_FILES], ids=[c[0] for c in HOSTILE_FILES]
)
def test_hostile_version_files_give_an_error_not_a_crash(
    tmp_path: Path, content: bytes, error: str
) -> None:
    path = tmp_path / "version.py"
    path.write_bytes(content)
    result = read_torch_version_file(path)
    assert result.version is None and result.cuda is None
    assert result.error is not None and str(path) in result.error and error in result.error


def test_missing_or_unreadable_version_file(tmp_path: Path) -> None:
    missing = read_torch_version_file(tmp_path / "version.py")
    assert missing.version is None and missing.error is not None
    assert "cannot read" in missing.error and str(tmp_path / "version.py") in missing.error
    (tmp_path / "dir.py").mkdir()
    assert read_torch_version_file(tmp_path / "dir.py").error is not None


def test_version_file_is_never_executed(tmp_path: Path) -> None:
    marker = tmp_path / "executed"
    path = tmp_path / "version.py"
    path.write_text(
        f"open({str(marker)!r}, 'w').close()\n"
        f"__version__ = open({str(marker)!r}).read() or '1'\n"
        "cuda = '13.0'\n"
    )
    assert read_torch_version_file(path) == TorchVersionFile(cuda="13.0")
    assert not marker.exists()
