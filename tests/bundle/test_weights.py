"""[[models.weights]] of bundle.toml: the pins, their round trip, bad input named."""

from __future__ import annotations

import pytest

from repro.bundle.info import dump_bundle_info, load_bundle_info
from repro.bundle.weights import SafetensorsFacts, WeightPin
from repro.errors import BundleFormatError
from tests.support.bundles import MINIMAL_BUNDLE_TOML

BASE = MINIMAL_BUNDLE_TOML.replace(b"format_version = 1", b"format_version = 2") + (
    b'[workspace]\nvenv = ".venv"\n'
    b'[[models]]\nname = "m"\nrole = "target"\ntotal_bytes = 30\nfile_count = 2\n'
    b'local_path = "models/m"\nweights_hashed = true\n'
)
SHA = "ab" * 32
PIN = (
    b'[[models.weights]]\npath = "model-00001.safetensors"\nsize = 20\n'
    b'source = "hashed"\nsha256 = "' + SHA.encode() + b'"\n'
    b'[models.weights.safetensors]\ntensor_count = 2\ndtypes = ["BF16", "F32"]\n'
    b'data_length = 4\nheader_sha256 = "' + SHA.encode() + b'"\n'
)


def _error(data: bytes) -> str:
    with pytest.raises(BundleFormatError) as caught:
        load_bundle_info(data, source="bundle.toml")
    return caught.value.message


def test_pins_load_and_round_trip() -> None:
    blob = (
        b'[[models.weights]]\npath = "sub/w.bin"\nsize = 10\nsource = "hf-blob"\nsha256 = "'
        + ("cd" * 32).encode()
        + b'"\n'
    )
    info = load_bundle_info(BASE + PIN + blob, source="bundle.toml")
    (model,) = info.models
    assert model.weights_hashed
    assert model.weights == (
        WeightPin(
            "model-00001.safetensors",
            20,
            SHA,
            "hashed",
            SafetensorsFacts(2, ("BF16", "F32"), 4, SHA),
        ),
        WeightPin("sub/w.bin", 10, "cd" * 32, "hf-blob"),
    )
    # large_files follows from the pins: what older code of unpack reads
    assert model.large_files == {"model-00001.safetensors": 20, "sub/w.bin": 10}
    dumped = dump_bundle_info(info)
    assert b"large_files" not in dumped
    assert load_bundle_info(dumped, source="again") == info


def test_not_hashed_pins_have_no_sha256() -> None:
    data = BASE.replace(b"weights_hashed = true", b"weights_hashed = false") + (
        b'[[models.weights]]\npath = "w.bin"\nsize = 10\nsource = "not-hashed"\n'
    )
    (model,) = load_bundle_info(data, source="bundle.toml").models
    assert not model.weights_hashed
    assert model.weights == (WeightPin("w.bin", 10, None, "not-hashed"),)


def test_an_older_bundle_with_large_files_only_still_loads() -> None:
    data = BASE.replace(b"weights_hashed = true\n", b"") + b'[models.large_files]\n"w.bin" = 10\n'
    (model,) = load_bundle_info(data, source="bundle.toml").models
    assert model.large_files == {"w.bin": 10}
    assert model.weights == () and not model.weights_hashed


@pytest.mark.parametrize(
    ("old", "new", "expected"),
    [
        (b'path = "model-00001.safetensors"', b'path = "../x"', "models[0].weights[0].path"),
        (b'path = "model-00001.safetensors"', b'path = "/abs"', "inside the model directory"),
        (b"size = 20", b"size = -1", "key 'models[0].weights[0].size' must not be negative"),
        (b"size = 20", b'size = "20"', "key 'models[0].weights[0].size' must be an integer"),
        (b'source = "hashed"', b'source = "guessed"', "must be one of hf-blob, hashed"),
        (b'sha256 = "' + SHA.encode() + b'"\n[', b'sha256 = "ABC"\n[', "weights[0].sha256"),
        (b'source = "hashed"', b'source = "not-hashed"', 'absent when source is "not-hashed"'),
        (b"tensor_count = 2", b"tensor_count = -2", "safetensors.tensor_count"),
        (b'["BF16", "F32"]', b'["F32", "BF16"]', "dtypes' must be sorted"),
        (b'["BF16", "F32"]', b"3", "dtypes' must be a list of strings"),
        (b"data_length = 4", b"data_length = 4\ncolour = 1", "unknown key 'colour'"),
        (
            b"weights_hashed = true",
            b'weights_hashed = "yes"',
            "weights_hashed' must be true or false",
        ),
    ],
)
def test_bad_pins_name_the_key(old: bytes, new: bytes, expected: str) -> None:
    data = BASE + PIN
    assert old in data
    assert expected in _error(data.replace(old, new, 1))


def test_a_hashed_pin_needs_its_sha256_and_a_path_is_pinned_once() -> None:
    no_sha = PIN.replace(b'sha256 = "' + SHA.encode() + b'"\n[', b"[")
    assert 'required when source is "hashed"' in _error(BASE + no_sha)
    assert "a second time" in _error(BASE + PIN + PIN)


def test_large_files_beside_pins_must_agree() -> None:
    data = BASE + b'[models.large_files]\n"other.bin" = 3\n' + PIN
    assert "large_files' must name the files and sizes of weights" in _error(data)
