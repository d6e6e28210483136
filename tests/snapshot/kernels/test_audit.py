"""repro.snapshot.kernels.audit on a real venv: wheels holding shared objects that
PyPI's nvcc built (tests/support/nvcc.py) installed by pip, read back from RECORD."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from repro.bundle.environment import EnvironmentFacts
from repro.bundle.kernels import KernelDistribution, KernelObject
from repro.snapshot.facts.environment import probe_environment
from repro.snapshot.kernels.audit import installed_kernels
from tests.snapshot.conftest import PYTHON_311, Venv, make_venv, pip
from tests.support.nvcc import kernel_wheel
from tests.support.wheels import wheel_files, write_wheel

pytestmark = pytest.mark.slow

OBJECTS = {
    "kern/_a.so": ("sm_90a", "sm_100f"),
    "kern/lib/_b.so.1": ("sm_120", "compute_120"),
}


@pytest.fixture(scope="module")
def venv(tmp_path_factory: pytest.TempPathFactory) -> Venv:
    base = tmp_path_factory.mktemp("audit")
    wheels = base / "wheels"
    kern = kernel_wheel(wheels, "kern", "1.0", OBJECTS)
    other = kernel_wheel(wheels, "other-kern", "2.0", {"other_kern/x.so": ("compute_90",)})
    host = base / "libhost.c"
    host.write_text("int host(void) { return 1; }\n")
    library = base / "libhost.so"
    compiler = shutil.which("cc") or "gcc"
    subprocess.run([compiler, "-shared", "-fPIC", "-o", str(library), str(host)], check=True)
    files = {
        "plain/__init__.py": b"",
        "plain/libhost.so": library.read_bytes(),  # an ELF without GPU code
        "plain/fake.so": b"not an elf at all",
    }
    plain = write_wheel(wheels, wheel_files("plain", "3.0", files, purelib=False), "plain", "3.0")
    made = make_venv(PYTHON_311, base / "venv")
    pip(made, "install", "-q", "--no-index", "--no-deps", str(kern), str(other), str(plain))
    return made


@pytest.fixture(scope="module")
def facts(venv: Venv) -> EnvironmentFacts:
    return probe_environment(venv.python, imports=False)


def test_every_distribution_with_gpu_code_and_its_objects(facts: EnvironmentFacts) -> None:
    found = installed_kernels(facts, jobs=4)
    assert found == (
        KernelDistribution(
            "kern",
            "1.0",
            (
                KernelObject("kern/_a.so", ("sm_100f", "sm_90a")),
                KernelObject("kern/lib/_b.so.1", ("compute_120", "sm_120")),
            ),
        ),
        KernelDistribution(
            "other-kern", "2.0", (KernelObject("other_kern/x.so", ("compute_90",)),)
        ),
    )


def test_a_deleted_object_is_left_to_the_scan(venv: Venv, facts: EnvironmentFacts) -> None:
    b = venv.site_packages / "kern" / "lib" / "_b.so.1"
    saved = b.read_bytes()
    told: list[str] = []
    b.unlink()
    try:
        found = installed_kernels(facts, skipped=told.append)
    finally:
        b.write_bytes(saved)
    assert [o.path for o in found[0].objects] == ["kern/_a.so"]
    assert told == []  # the scan reports the file deleted


def test_a_link_is_not_followed(venv: Venv, facts: EnvironmentFacts) -> None:
    a = venv.site_packages / "kern" / "_a.so"
    saved = a.read_bytes()
    target = venv.root.parent / "outside.so"
    target.write_bytes(saved)
    a.unlink()
    a.symlink_to(target)
    try:
        found = installed_kernels(facts)
    finally:
        a.unlink()
        a.write_bytes(saved)
    assert [o.path for o in found[0].objects] == ["kern/lib/_b.so.1"]


def test_a_distribution_whose_record_is_unreadable_is_told(
    venv: Venv, facts: EnvironmentFacts, tmp_path: Path
) -> None:
    (dist,) = [d for d in facts.distributions if d.normalized_name == "other-kern"]
    record = Path(dist.metadata_dir) / "RECORD"
    saved = record.read_bytes()
    record.write_bytes(b"\xff\xfe not utf-8")
    told: list[str] = []
    try:
        found = installed_kernels(facts, skipped=told.append)
    finally:
        record.write_bytes(saved)
    assert [d.name for d in found] == ["kern"]
    assert len(told) == 1 and told[0].startswith("other-kern: cannot read ")
    assert told[0].endswith("its shared objects are not audited")
