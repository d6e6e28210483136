"""repro/probe/bytecode.py: a directory compiled by the target's interpreter (3.10,
3.11, 3.12), every level of it, into checked-hash bytecode of that interpreter's own
magic; a file in another grammar left without bytecode and named."""

from __future__ import annotations

import json
from pathlib import Path

from repro.interpreter import run_target_script
from tests.probe.conftest import asked_natively


def test_every_module_compiled_into_checked_hash_bytecode(python: Path, tmp_path: Path) -> None:
    site = tmp_path / "site-packages"
    deep = site.joinpath("pkg", *(f"l{i}" for i in range(12)))
    deep.mkdir(parents=True)
    (site / "pkg" / "__init__.py").write_text("x = 1\n")
    (deep / "leaf.py").write_text("def f():\n    return 2\n")
    (site / "py2_fixture.py").write_text("print 'hello'\n")  # not this Python's grammar
    (site / "data.txt").write_text("not python\n")

    proc = run_target_script(python, "bytecode.py", ["0", str(site)], timeout=120)
    assert proc.returncode == 0, proc.stderr
    answer = json.loads(proc.stdout)
    assert answer == {"files": 3, "compiled": 2, "left": [str(site / "py2_fixture.py")]}

    tag, magic = asked_natively(
        python,
        "import importlib.util, json, sys; "
        "print(json.dumps([sys.implementation.cache_tag, importlib.util.MAGIC_NUMBER.hex()]))",
    )
    for source in (site / "pkg" / "__init__.py", deep / "leaf.py"):
        pyc = source.parent / "__pycache__" / f"{source.stem}.{tag}.pyc"
        header = pyc.read_bytes()[:16]
        assert header[:4].hex() == magic
        # PEP 552 flags: bit 0 hash-based, bit 1 check the source at import
        assert int.from_bytes(header[4:8], "little") == 0b11
    assert not (site / "__pycache__" / f"py2_fixture.{tag}.pyc").exists()
