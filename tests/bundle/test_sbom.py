"""Tests of repro.bundle.sbom: a bundle's CycloneDX SBOM from its members."""

from __future__ import annotations

import json
import re
import uuid
from typing import Any

import pytest
from cyclonedx.schema import SchemaVersion
from cyclonedx.validation.json import JsonStrictValidator

from repro.bundle.lock import DistFile, IndexConfig, Pin, render_pylock, render_requirements_lock
from repro.bundle.manifest import format_manifest
from repro.bundle.patchset import PatchEntry, dump_patchset
from repro.bundle.sbom import manifest_sha256, render_sbom, serial_number
from repro.bundle.vault import VaultEntry, dump_vault
from repro.errors import BundleFormatError
from repro.hashing import sha256_bytes
from tests.support.bundles import MINIMAL_BUNDLE_TOML

BUNDLE_TOML = MINIMAL_BUNDLE_TOML
W, N1, N2, P, Q = "1" * 64, "2" * 64, "3" * 64, "4" * 64, "5" * 64
PINS = (Pin("flash-attn", "2.8.3+cu130"), Pin("numpy", "2.1.0"), Pin("torch", "2.9.0"))
INDEXES = IndexConfig(index_url="https://pypi.org/simple")
DIFF = b"--- a\n+++ b\n@@ -1 +1 @@\n-x\n+y\n"


def _contents() -> dict[str, bytes]:
    files = {
        "numpy": [
            DistFile(
                "numpy-2.1.0-cp311-cp311-manylinux_2_17_x86_64.whl", N1, url="https://f/a.whl"
            ),
            DistFile("numpy-2.1.0-cp311-cp311-macosx_14_0_arm64.whl", N2, url="https://f/b.whl"),
        ],
        "torch": [
            DistFile("torch-2.9.0-cp311-cp311-manylinux_2_28_x86_64.whl", W, url="https://dl/t.whl")
        ],
    }
    return {
        "bundle.toml": BUNDLE_TOML,
        "env/requirements.lock": render_requirements_lock(PINS, INDEXES).encode(),
        "env/pylock.toml": render_pylock(
            PINS,
            INDEXES,
            requires_python=">=3.10",
            files=files,
            index_of={"torch": "https://download.pytorch.org/whl/cu130"},
        ).encode(),
        "env/vault.toml": dump_vault(
            [
                VaultEntry(
                    "flash_attn",
                    "2.8.3+cu130",
                    "flash_attn-2.8.3+cu130-cp311-linux_x86_64.whl",
                    W,
                    "local version",
                    "original",
                )
            ]
        ),
        "patches/patches.toml": dump_patchset(
            [PatchEntry("torch", "2.9.0", "torch/x.py", "modified", P, Q, has_diff=True)]
        ),
        "patches/diffs/torch/torch/x.py.diff": DIFF,
    }


def _digests(contents: dict[str, bytes]) -> dict[str, str]:
    return {rel: sha256_bytes(data) for rel, data in contents.items()}


def _document() -> dict[str, Any]:
    contents = _contents()
    data: dict[str, Any] = json.loads(render_sbom(contents, _digests(contents)))
    return data


def test_the_cyclonedx_library_validates_it() -> None:
    contents = _contents()
    text = render_sbom(contents, _digests(contents)).decode()
    assert JsonStrictValidator(SchemaVersion.V1_6).validate_str(text) is None


def test_one_component_per_pin_with_purl() -> None:
    components = {c["name"]: c for c in _document()["components"]}
    assert sorted(components) == ["flash-attn", "numpy", "torch"]
    assert components["numpy"]["purl"] == "pkg:pypi/numpy@2.1.0"
    assert components["torch"]["purl"] == (
        "pkg:pypi/torch@2.9.0?repository_url=https://download.pytorch.org/whl/cu130"
    )


def test_hashes_of_the_vault_and_of_the_index_files() -> None:
    components = {c["name"]: c for c in _document()["components"]}
    flash = components["flash-attn"]
    assert flash["hashes"] == [{"alg": "SHA-256", "content": W}]
    assert {
        "name": "repro:vault-wheel",
        "value": "flash_attn-2.8.3+cu130-cp311-linux_x86_64.whl",
    } in flash["properties"]
    numpy = components["numpy"]
    assert "hashes" not in numpy  # two files (one per platform): each on its reference
    assert components["torch"]["hashes"] == [{"alg": "SHA-256", "content": W}]  # its one file
    assert sorted(r["url"] for r in numpy["externalReferences"]) == [
        "https://f/a.whl",
        "https://f/b.whl",
    ]


def test_patches_are_pedigree() -> None:
    torch = {c["name"]: c for c in _document()["components"]}["torch"]
    (patch,) = torch["pedigree"]["patches"]
    assert patch["type"] == "unofficial"
    assert patch["diff"]["url"] == "patches/diffs/torch/torch/x.py.diff"
    assert patch["diff"]["text"]["content"] == DIFF.decode()
    assert "torch/x.py (modified)" in torch["pedigree"]["notes"]
    assert {"name": "repro:patched-file", "value": f"modified torch/x.py sha256:{Q}"} in torch[
        "properties"
    ]


def test_serial_number_and_same_bytes_whatever_the_sbom_and_manifest() -> None:
    contents = _contents()
    digests = _digests(contents)
    first = render_sbom(contents, digests)
    with_closers = {**digests, "env/sbom.cdx.json": "9" * 64, "MANIFEST.sha256": "8" * 64}
    assert render_sbom(contents, with_closers) == first
    expected = sha256_bytes(format_manifest(digests.items()))
    assert manifest_sha256(with_closers) == expected
    document = json.loads(first)
    assert document["serialNumber"] == serial_number(digests).urn
    assert serial_number(digests).version == 5
    assert serial_number({**digests, "x": "0" * 64}) != serial_number(digests)
    assert isinstance(serial_number(digests), uuid.UUID)


@pytest.mark.parametrize(
    ("drop", "change", "message"),
    [
        ("bundle.toml", None, "bundle.toml: missing; not a bundle made by `repro pack`"),
        ("env/requirements.lock", None, "env/requirements.lock: missing"),
        (None, ("env/requirements.lock", b"\xff"), "env/requirements.lock: not UTF-8"),
        (None, ("env/pylock.toml", b"x = "), "env/pylock.toml: not valid TOML"),
        (
            None,
            ("env/pylock.toml", b'lock-version = "1.0"\npackages = "x"\n'),
            "env/pylock.toml: not a PEP 751 lock",
        ),
        (None, ("env/vault.toml", b"wheels = 1"), "env/vault.toml: 'wheels' must be an array"),
    ],
)
def test_bad_members_are_named(
    drop: str | None, change: tuple[str, bytes] | None, message: str
) -> None:
    contents = _contents()
    if drop is not None:
        del contents[drop]
    if change is not None:
        contents[change[0]] = change[1]
    with pytest.raises(BundleFormatError, match=re.escape(message)):
        render_sbom(contents, _digests(contents))


def test_each_model_is_a_machine_learning_model_component() -> None:
    from cyclonedx.model.component import ComponentType

    from tests.support.bundles import MINIMAL_BUNDLE_TOML as toml

    digest = "6" * 64
    models = (
        b'\n[[models]]\nname = "drafter"\nrole = "drafter"\nrepo_id = "org/eagle"\n'
        b'revision = "abc1234"\nlocal_path = "models/drafter"\ntotal_bytes = 10\n'
        b'file_count = 1\nsmall_files = { "config.json" = "' + digest.encode() + b'" }\n'
        b'\n[[models]]\nname = "Kimi-K2.6"\nrole = "target"\nlocal_path = "/models/Kimi-K2.6"\n'
        b"total_bytes = 0\nfile_count = 0\npresent = false\n"
    )
    contents = {**_contents(), "bundle.toml": toml + models}
    text = render_sbom(contents, _digests(contents)).decode()
    assert JsonStrictValidator(SchemaVersion.V1_6).validate_str(text) is None
    found = {c["name"]: c for c in json.loads(text)["components"]}
    drafter, kimi = found["drafter"], found["Kimi-K2.6"]
    assert drafter["type"] == kimi["type"] == ComponentType.MACHINE_LEARNING_MODEL.value
    (config,) = drafter["components"]
    assert config["name"] == "config.json"
    assert config["hashes"] == [{"alg": "SHA-256", "content": digest}]
    assert (
        drafter["externalReferences"][0]["url"] == "https://huggingface.co/org/eagle/tree/abc1234"
    )
    props = {p["name"]: p["value"] for p in drafter["properties"]}
    assert props["repro:repo-id"] == "org/eagle" and props["repro:revision"] == "abc1234"
    assert props["repro:weights"] == "not pinned"
    kimi_props = {p["name"]: p["value"] for p in kimi["properties"]}
    assert kimi_props["repro:present-when-packed"] == "false"
