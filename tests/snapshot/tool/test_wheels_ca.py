"""repro installed in an environment whose certifi carries a company CA packs, online and
`--offline`: its own tool wheels are rebuilt from the files it imports, the modified
cacert.pem carried in them with a warning, and setup_env.sh's tool venv made from them
works on a fresh box.

The company-CA case as it is on many company networks (and on the GPU host): a PEM block
appended to `certifi/cacert.pem` and to pip's vendored copy, in a real venv that has
repro installed non-editable (from the wheels of this checkout and of the dev venv, as
setup_env.sh installs it), whose own `repro` packs a small real workspace.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tarfile
import zipfile
from dataclasses import dataclass
from pathlib import Path

import pytest

from repro.snapshot.tool.wheels import tool_wheels
from tests.snapshot.conftest import Venv, make_venv, pip
from tests.test_setup_env import TOOL_HOME, UNPACK, _box_with, _setup_env
from tests.wheel.test_record_csv import installer_validate

pytestmark = pytest.mark.slow

DEBIAN_311 = Path("/usr/bin/python3.11")  # the fresh box's Python ("debian-3.11")
PACK_TIMEOUT = 600


def _company_ca(directory: Path) -> bytes:
    """A real self-signed CA certificate, PEM, as a company appends to cacert.pem."""
    key, cert = directory / "ca.key", directory / "ca.pem"
    argv = ["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256"]
    argv += ["-nodes", "-days", "30", "-subj", "/O=Example Corp/CN=Example Corp Root CA"]
    argv += ["-keyout", str(key), "-out", str(cert)]
    subprocess.run(argv, capture_output=True, timeout=60, check=True)
    return b"\n# Example Corp Root CA\n" + cert.read_bytes()


@dataclass(frozen=True)
class CompanyVenv:
    venv: Venv
    patched: dict[str, bytes]  # site-packages relative path -> the bytes with the CA
    wheels: tuple[Path, ...]  # what repro was installed from


@pytest.fixture(scope="module")
def company_venv(tmp_path_factory: pytest.TempPathFactory) -> CompanyVenv:
    root = tmp_path_factory.mktemp("company-ca")
    # repro's wheels as setup_env.sh gets them (this checkout, the dev venv's closure)
    wheels = tool_wheels(root / "dev-tool-wheels", source_date_epoch=315532800).wheels
    venv = make_venv(DEBIAN_311, root / "tool-venv")
    pip(venv, "install", "-q", "--no-index", *map(str, wheels))
    ca = _company_ca(root)
    patched: dict[str, bytes] = {}
    for rel in ("certifi/cacert.pem", "pip/_vendor/certifi/cacert.pem"):
        path = venv.site_packages / rel
        assert path.is_file(), rel
        path.write_bytes(path.read_bytes() + ca)
        patched[rel] = path.read_bytes()
    return CompanyVenv(venv, patched, wheels)


def _pack(company: CompanyVenv, workspace: Path, out: Path, cache: Path, *args: str) -> str:
    """The company venv's own `repro pack`: none of this checkout on its path."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "VIRTUAL_ENV"))}
    env["XDG_CACHE_HOME"] = str(cache)
    argv = [str(company.venv.root / "bin" / "repro"), "pack", str(workspace), "-o", str(out)]
    proc = subprocess.run(
        [*argv, *args], capture_output=True, text=True, env=env, timeout=PACK_TIMEOUT
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    return proc.stderr


def _tool_wheel(bundle: Path, name: str, into: Path) -> Path:
    with tarfile.open(bundle) as archive:
        (member,) = [
            m for m in archive.getmembers() if f"/tool/wheels/{name}-" in m.name and m.isfile()
        ]
        archive.extractall(into, members=[member], filter="data")
    return into / member.name


def _assert_carried(company: CompanyVenv, bundle: Path, stderr: str, work: Path) -> None:
    site = company.venv.site_packages
    for rel, dist in (("certifi/cacert.pem", "certifi"), ("pip/_vendor/certifi/cacert.pem", "pip")):
        assert f"carries {site / rel} as it is installed here: modified" in stderr, stderr
        wheel = _tool_wheel(bundle, dist, work / dist)
        with zipfile.ZipFile(wheel) as archive:
            assert archive.read(rel) == company.patched[rel]
        proc = installer_validate(wheel, work / f"{dist}-installed")
        assert proc.returncode == 0, proc.stderr[-2000:]
    assert " 1 installed file(s) do not match" not in stderr


def test_a_company_ca_in_repros_own_certifi_is_carried_online_offline_and_set_up(
    company_venv: CompanyVenv, tmp_path: Path
) -> None:
    source = tmp_path / "src"
    make_venv(DEBIAN_311, source / "ws" / "venv")
    workspace = source / "ws"
    cache = tmp_path / "cache"
    # offline first (a new tool-wheel set is built), then online (the cached set, whose
    # warnings are said again)
    offline = _pack(company_venv, workspace, tmp_path / "offline", cache, "--offline")
    (bundle,) = (tmp_path / "offline").glob("*.tar")
    _assert_carried(company_venv, bundle, offline, tmp_path / "x-offline")
    online = _pack(company_venv, workspace, tmp_path / "online", cache)
    (online_bundle,) = (tmp_path / "online").glob("*.tar")
    _assert_carried(company_venv, online_bundle, online, tmp_path / "x-online")
    # a fresh box bootstraps repro from that bundle's tool wheels: the tool venv holds
    # the company's cacert.pem, and its repro ran the unpack
    box = _box_with(bundle, tmp_path / "box", "debian-3.11")
    code, output = _setup_env(box, *UNPACK)
    assert code == 0, output
    (tool_venv,) = box.host(TOOL_HOME).iterdir()
    (pem,) = tool_venv.glob("lib/python3.11/site-packages/certifi/cacert.pem")
    assert pem.read_bytes() == company_venv.patched["certifi/cacert.pem"]
    inside = f"{box.inside(tool_venv)}/bin/python"
    check = "import certifi, ssl; ssl.create_default_context(cafile=certifi.where()); print('ok')"
    proc = box.run([inside, "-c", check], timeout=120)
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", proc.stderr


def test_the_closure_is_read_where_repro_imports_it(
    company_venv: CompanyVenv, tmp_path: Path
) -> None:
    """A distribution of repro's closure that the interpreter imports from elsewhere (a
    PYTHONPATH entry ahead of site-packages, as a user site or a system-site base is)
    is wheeled from there; the rest from the venv's own site-packages, never the base
    interpreter's nor this test's dev venv."""
    extra = tmp_path / "extra"
    (certifi,) = [w for w in company_venv.wheels if w.name.startswith("certifi-")]
    pip(company_venv.venv, "install", "-q", "--no-index", "--target", str(extra), str(certifi))
    script = (
        "import certifi; from repro.snapshot.tool.wheels import tool_wheel_inputs as t; "
        "print(certifi.__file__); print('\\n'.join(str(d.dist_info) for d in t().wanted))"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "VIRTUAL_ENV"))}
    proc = subprocess.run(
        [str(company_venv.venv.python), "-c", script],
        capture_output=True,
        text=True,
        env={**env, "PYTHONPATH": str(extra)},
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    imported, *dist_infos = proc.stdout.split()
    assert Path(imported).is_relative_to(extra)
    places = {Path(d).name.split("-")[0]: Path(d).parent for d in dist_infos}
    assert places.pop("certifi") == extra
    assert set(places.values()) == {company_venv.venv.site_packages}
    assert Path(sys.prefix) not in {p.parents[2] for p in places.values()}
