"""`repro pack --sbom` and `repro sbom` on real bundles, the SBOM checked by its real
reader: cyclonedx-python-lib's strict JSON validator against the CycloneDX 1.6 schema.

The workspace is the shared one of tests/support/bundles.py (real PyPI packages, a local wheel
only the vault serves, hand patches in idna and six). Its source GPU is the only test
double: this machine has none, so `nvidia-smi` is tests/support/doubles/nvidia_smi.py's script.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
import tarfile
import uuid
from pathlib import Path
from typing import Any

import pytest
from cyclonedx.schema import SchemaVersion
from cyclonedx.validation.json import JsonStrictValidator

from repro import _toml
from repro.bundle.lock import parse_requirements_lock
from repro.bundle.sbom import SBOM_MEMBER, serial_number
from tests.support.bundles import BundlePair, run_cli, tamper
from tests.support.doubles.nvidia_smi import fake_nvidia_smi

pytestmark = pytest.mark.slow


class Packed:
    def __init__(self, archive: Path, tree: Path) -> None:
        self.archive = archive
        self.tree = tree  # extracted with GNU tar
        self.sbom_bytes = (tree / SBOM_MEMBER).read_bytes()
        self.sbom: dict[str, Any] = json.loads(self.sbom_bytes)

    def components(self) -> dict[str, dict[str, Any]]:
        """The distributions (the models are `machine-learning-model` components)."""
        return {c["name"]: c for c in self.sbom["components"] if c["type"] == "library"}

    def models(self) -> dict[str, dict[str, Any]]:
        return {
            c["name"]: c for c in self.sbom["components"] if c["type"] == "machine-learning-model"
        }


def _pack(workspace: Path, out: Path, env: dict[str, str], suffix: str = "") -> Packed:
    out.mkdir()
    target = f"{out}/demo-3.tar{suffix}" if suffix else f"{out}/"
    result = run_cli(
        "pack", str(workspace), "-o", target, "--version", "3", "--sbom", env_extra=env
    )
    assert result.returncode == 0, result.stderr.decode()
    archive = out / f"demo-3.tar{suffix}"
    tree = out / "tree"
    tree.mkdir()
    subprocess.run(["tar", "-xf", str(archive), "-C", str(tree)], check=True, timeout=120)
    return Packed(archive, tree / "demo-3")


@pytest.fixture(scope="module")
def packs(
    bundle_pair: BundlePair, tmp_path_factory: pytest.TempPathFactory
) -> tuple[Packed, Packed, Packed]:
    """B's workspace packed twice to .tar (wheel digests filled in after the writing)
    and once to .tar.gz (digests taken ahead), with a GPU on the source box."""
    base = tmp_path_factory.mktemp("sbom")
    env = fake_nvidia_smi(base / "bin", "9.0", "13.0")
    first = _pack(bundle_pair.workspace, base / "one", env)
    second = _pack(bundle_pair.workspace, base / "two", env)
    gz = _pack(bundle_pair.workspace, base / "gz", env, suffix=".gz")
    return first, second, gz


def test_sbom_validates_against_the_cyclonedx_schema(packs: tuple[Packed, ...]) -> None:
    packed = packs[0]
    assert packed.sbom["specVersion"] == "1.6"
    errors = JsonStrictValidator(SchemaVersion.V1_6).validate_str(
        packed.sbom_bytes.decode(), all_errors=True
    )
    assert errors is None, [str(e) for e in errors]
    # the manifest lists it like every member: sha256sum, the manifest's real reader
    check = subprocess.run(
        ["sha256sum", "-c", "--strict", "MANIFEST.sha256"],
        cwd=packed.tree,
        capture_output=True,
        timeout=120,
    )
    assert check.returncode == 0, check.stdout.decode() + check.stderr.decode()
    assert f"{SBOM_MEMBER}: OK" in check.stdout.decode()


def test_every_pin_is_a_component_with_purl_and_version(packs: tuple[Packed, ...]) -> None:
    packed = packs[0]
    lock = parse_requirements_lock(
        (packed.tree / "env" / "requirements.lock").read_text(), source="lock"
    )
    components = packed.components()
    assert len(lock.pins) >= 5
    assert sorted(components) == sorted(pin.name for pin in lock.pins)
    for pin in lock.pins:
        component = components[pin.name]
        assert component["type"] == "library"
        assert component["version"] == pin.version
        # PyPI is the default index: no repository_url qualifier
        assert component["purl"] == f"pkg:pypi/{pin.name}@{pin.version}".replace("+", "%2B")
        assert component["bom-ref"] == component["purl"]
    root = packed.sbom["metadata"]["component"]
    assert (root["name"], root["version"]) == ("demo", "3")
    (tool,) = packed.sbom["metadata"]["tools"]["components"]
    assert tool["name"] == "repro"
    (dependency,) = [d for d in packed.sbom["dependencies"] if d["ref"] == root["bom-ref"]]
    assert set(c["purl"] for c in components.values()) <= set(dependency["dependsOn"])
    assert sorted(packed.models()) == ["drafter"]  # the workspace's drafter/, a model too


def test_vault_wheels_carry_their_sha256(packs: tuple[Packed, ...]) -> None:
    packed = packs[0]
    vault = _toml.loads((packed.tree / "env" / "vault.toml").read_text())["wheels"]
    assert any(w["name"] == "vaultpkg" for w in vault)
    components = packed.components()
    for wheel in vault:
        digest = hashlib.sha256((packed.tree / "env" / "wheels" / wheel["filename"]).read_bytes())
        component = components[wheel["name"]]
        assert {"alg": "SHA-256", "content": digest.hexdigest()} in component["hashes"]
        assert {"name": "repro:vault-wheel", "value": wheel["filename"]} in component["properties"]


def test_patched_files_are_the_pedigree_of_their_component(packs: tuple[Packed, ...]) -> None:
    components = packs[0].components()
    for name, path, line in (
        ("idna", "idna/core.py", "# local tweak B"),
        ("six", "six.py", "# six tweak"),
    ):
        component = components[name]
        properties = [p["value"] for p in component["properties"]]
        assert any(v.startswith(f"modified {path} sha256:") for v in properties), properties
        (patch,) = component["pedigree"]["patches"]
        assert patch["type"] == "unofficial"
        assert patch["diff"]["url"] == f"patches/diffs/{name}/{path}.diff"
        assert f"+{line}" in patch["diff"]["text"]["content"]
        assert path in component["pedigree"]["notes"]
    assert "pedigree" not in components["attrs"]


def test_source_gpu_driver_and_cuda_are_metadata_properties(packs: tuple[Packed, ...]) -> None:
    packed = packs[0]
    properties = {p["name"]: p["value"] for p in packed.sbom["metadata"]["properties"]}
    # nvidia-smi's "97871 MiB" (the probe asks with units) is 97871 MiB, not 0
    assert properties["repro:gpu"] == "NVIDIA Test Double GPU (sm 9.0, 97871 MiB)"
    assert properties["repro:driver"] == "580.65.06"
    assert properties["repro:cuda-driver"] == "13.0"
    assert properties["repro:python"].startswith("3.11.")
    info = _toml.loads((packed.tree / "bundle.toml").read_text())
    assert [g["memory_mib"] for g in info["source"]["gpus"]] == [97871], info["source"]
    assert packed.sbom["metadata"]["timestamp"].startswith(info["created"].rstrip("Z"))


def test_sbom_describes_the_bundle_without_itself(packs: tuple[Packed, ...]) -> None:
    """The serial number comes from the manifest without the SBOM's own line."""
    packed = packs[0]
    lines = (packed.tree / "MANIFEST.sha256").read_bytes().splitlines(keepends=True)
    without = b"".join(line for line in lines if not line.endswith(f"  {SBOM_MEMBER}\n".encode()))
    assert len(without) < sum(map(len, lines))
    properties = {p["name"]: p["value"] for p in packed.sbom["metadata"]["properties"]}
    assert properties["repro:manifest-sha256"] == hashlib.sha256(without).hexdigest()
    digests = {line.split(b"  ", 1)[1].decode().rstrip("\n"): line[:64].decode() for line in lines}
    assert packed.sbom["serialNumber"] == serial_number(digests).urn
    assert uuid.UUID(packed.sbom["serialNumber"]).version == 5
    # after every other member, before the manifest
    with tarfile.open(packed.archive) as archive:
        files = [m.name.split("/", 1)[1] for m in archive.getmembers() if m.isfile()]
    assert files[-2:] == [SBOM_MEMBER, "MANIFEST.sha256"]


def test_two_packs_are_byte_identical(packs: tuple[Packed, Packed, Packed]) -> None:
    first, second, gz = packs
    assert first.archive.read_bytes() == second.archive.read_bytes()
    # the wheel digests taken ahead (gzip) or filled in afterwards: the same components
    # (REPRODUCE.md names the .tar.gz, so the manifest and the serial number differ)
    assert gz.sbom["components"] == first.sbom["components"]
    assert gz.sbom["serialNumber"] != first.sbom["serialNumber"]


def test_repro_sbom_of_the_bundle_is_the_packed_document(
    packs: tuple[Packed, ...], tmp_path: Path
) -> None:
    packed = packs[0]
    result = run_cli("sbom", str(packed.archive))
    assert result.returncode == 0, result.stderr.decode()
    assert result.stdout == packed.sbom_bytes
    out = tmp_path / "bom.json"
    result = run_cli("sbom", str(packed.tree), "-o", str(out))
    assert result.returncode == 0, result.stderr.decode()
    assert out.read_bytes() == packed.sbom_bytes
    gz = packs[2]
    result = run_cli("sbom", "-", input=gz.archive.read_bytes())
    assert result.returncode == 0, result.stderr.decode()
    assert result.stdout == gz.sbom_bytes


def test_repro_sbom_of_a_bundle_packed_without_one(bundle_pair: BundlePair) -> None:
    result = run_cli("sbom", str(bundle_pair.b))
    assert result.returncode == 0, result.stderr.decode()
    errors = JsonStrictValidator(SchemaVersion.V1_6).validate_str(result.stdout.decode())
    assert errors is None, str(errors)
    names = {c["name"] for c in json.loads(result.stdout)["components"]}
    assert {"six", "idna", "attrs", "vaultpkg"} <= names


def test_tampered_bundle_gives_no_sbom(packs: tuple[Packed, ...], tmp_path: Path) -> None:
    packed = packs[0]
    lock = (packed.tree / "env" / "requirements.lock").read_bytes()
    bad = tamper(packed.archive, tmp_path / "bad.tar", "env/requirements.lock", lock + b"evil==1\n")
    out = tmp_path / "bom.json"
    for args in (("sbom", str(bad)), ("sbom", str(bad), "-o", str(out))):
        result = run_cli(*args)
        assert result.returncode == 1, result.stderr.decode()
        assert result.stdout == b""
        stderr = result.stderr.decode()
        assert "env/requirements.lock does not match" in stderr, stderr
        assert "no SBOM made" in stderr
    assert not out.exists()


def test_cyclonedx_is_imported_only_to_make_an_sbom() -> None:
    """repro's start-up stays fast: `repro --help` (which loads every command) and `repro
    pack --help` never import cyclonedx-python-lib."""
    code = (
        "import sys\n"
        "from repro.cli import cli\n"
        "for args in (['--help'], ['pack', '--help'], ['sbom', '--help']):\n"
        "    cli.main(args, standalone_mode=False)\n"
        "sbom = ('cyclonedx', 'repro.bundle.sbom', 'repro.verbs.sbom')\n"
        "loaded = [m for m in sys.modules if m.startswith(sbom)]\n"
        "print('LOADED', sorted(loaded))\n"
    )
    completed = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True
    )
    assert "sbom [OPTIONS] BUNDLE" in completed.stdout
    assert "LOADED []" in completed.stdout
