"""repro/probe/tag_facts.py: the facts repro computes a target's wheel tags from. The
tags repro derives from them must be the ones (as a set) `packaging.tags.sys_tags()` gives inside
that interpreter."""

from __future__ import annotations

from pathlib import Path

from repro.snapshot.facts.indexcheck import interpreter_facts, target_tags
from tests.probe.conftest import asked_natively


def test_the_facts_name_the_interpreter(python: Path) -> None:
    facts = interpreter_facts(python)
    native = asked_natively(
        python,
        "import json, sys, sysconfig, platform; print(json.dumps([sys.implementation.name, "
        "list(sys.version_info[:2]), platform.machine(), sysconfig.get_platform(), "
        "sysconfig.get_config_var('EXT_SUFFIX')]))",
    )
    assert [
        facts.implementation,
        list(facts.python_version),
        facts.machine,
        facts.platform,
        facts.ext_suffix,
    ] == native
    assert facts.libc == "glibc" and facts.libc_version is not None
    assert facts.libc_version >= (2, 17)


def test_the_tags_derived_from_the_facts_are_packagings(python: Path) -> None:
    ours = [str(tag) for tag in target_tags(python)]
    reference = asked_natively(
        python,
        "import json; from packaging.tags import sys_tags; "
        "print(json.dumps([str(t) for t in sys_tags()]))",
        with_packaging=True,
    )
    # The same tags; the order is repro's preference (packaging 26 puts linux_* first).
    assert sorted(ours) == sorted(reference) and len(ours) == len(set(ours))
