"""setup_env.sh on a bare box: a bundle made here is extracted with GNU tar inside a fresh
box (no network, no source paths, no repro, no uv) and bootstrapped with nothing but the
bundle. The box's Python is the bundle's own, not the packing one (3.12 vs 3.11).

The bundle is signed (`repro pack --sign` with an ed25519 key made here by ssh-keygen),
so the same bundle serves the unsigned runs, the signed runs and, changed inside the box,
the hostile ones."""

from __future__ import annotations

import base64
import csv
import hashlib
import io
import re
import shutil
import subprocess
import zipfile
from dataclasses import dataclass
from pathlib import Path

import pytest

from repro import __version__, _toml
from repro.bundle.signing import NAMESPACE
from tests.snapshot.conftest import PYTHON_312
from tests.support.bundles import make_workspace, pack_workspace
from tests.support.freshbox import BoxPython, FreshBox, fresh_box

pytestmark = pytest.mark.slow

TOP = "ws-1"
TOOL_HOME = "/box/home/.local/share/repro"
UNPACK = ["--target", "/box/app", "--offline", "--no-smoke", "--cpu"]
LISTING = f"find {TOP} -printf '%p %y %s %m %T@\\n' | LC_ALL=C sort"
TOOL_VENV = re.compile(rf"tool-{re.escape(__version__)}-py3\.\d+-[0-9a-f]{{16}}")
UNCHECKED = "the bundle's code is trusted without a signature check"
MARKER = "/box/hostile-wheel-ran"
TRUST = ["--allowed-signers", "/box/keys/allowed_signers", "--identity", "alice@example.com"]


@dataclass(frozen=True)
class Keys:
    alice: Path  # signs the bundle; alice.pub beside it
    bob: Path  # a key nobody trusts
    allowed: Path  # alice@example.com may sign repro-bundle


def _keygen(*args: str) -> None:
    subprocess.run(["ssh-keygen", *args], capture_output=True, timeout=60, check=True)


@pytest.fixture(scope="module")
def keys(tmp_path_factory: pytest.TempPathFactory) -> Keys:
    root = tmp_path_factory.mktemp("bootkeys")
    for who in ("alice", "bob"):
        _keygen("-q", "-t", "ed25519", "-N", "", "-C", who, "-f", str(root / who))
    allowed = root / "allowed_signers"
    pub = (root / "alice.pub").read_text().strip()
    allowed.write_text(f'alice@example.com namespaces="{NAMESPACE}" {pub}\n')
    return Keys(root / "alice", root / "bob", allowed)


@pytest.fixture(scope="module")
def bundle_312(tmp_path_factory: pytest.TempPathFactory, keys: Keys) -> Path:
    """A bundle of a Python 3.12 venv (idna, six), packed on 3.11 with every wheel and
    signed by alice."""
    base = tmp_path_factory.mktemp("boot312")
    workspace = make_workspace(base, PYTHON_312)
    result = pack_workspace(
        workspace, base / "out", cache=base / "cache", wheels="all", sign=keys.alice
    )
    assert result.path is not None
    return result.path


def _box_with(bundle: Path, base: Path, python: BoxPython, keys: Keys | None = None) -> FreshBox:
    box = fresh_box(base, python=python)
    shutil.copy(bundle, box.root / bundle.name)
    extracted = box.run(["tar", "xf", bundle.name], timeout=120)
    assert extracted.returncode == 0, extracted.stderr
    if keys is not None:
        (box.root / "keys").mkdir()
        shutil.copy(keys.allowed, box.root / "keys" / "allowed_signers")
    return box


def _setup_env(box: FreshBox, *args: str) -> tuple[int, str]:
    proc = box.run(["bash", f"/box/{TOP}/setup_env.sh", *args], timeout=900)
    return proc.returncode, proc.stdout + proc.stderr


def _target_venv(box: FreshBox) -> Path:
    """The target's venv, wherever unpack puts it inside the target (not under .repro)."""
    app = box.host("/box/app")
    found = [p.parent for p in app.rglob("pyvenv.cfg") if ".repro" not in p.relative_to(app).parts]
    assert len(found) == 1, found
    return found[0]


def _assert_bootstrapped(box: FreshBox, python_version: str) -> None:
    state = _toml.loads(box.host("/box/app/.repro/state.toml").read_text())
    assert "install" in state["done"], state
    venv = box.inside(_target_venv(box))
    proc = box.run(
        [f"{venv}/bin/python", "-c", "import idna, six, sys; print(sys.version.split()[0])"],
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == python_version
    tool = [p.name for p in box.host(TOOL_HOME).iterdir()]
    assert len(tool) == 1 and TOOL_VENV.fullmatch(tool[0]), tool
    assert tool[0].startswith(f"tool-{__version__}-py{python_version.rsplit('.', 1)[0]}-")


def test_setup_env_bootstraps_a_312_bundle_on_a_312_box_offline(
    bundle_312: Path, tmp_path: Path
) -> None:
    box = _box_with(bundle_312, tmp_path, "3.12")
    before = box.run(LISTING, timeout=60).stdout
    code, output = _setup_env(box, *UNPACK)
    assert code == 0, output
    assert f"into {TOOL_HOME}/tool-{__version__}-py3.12-" in output
    assert f"setup_env.sh: no --allowed-signers: {UNCHECKED}" in output
    assert box.run(LISTING, timeout=60).stdout == before  # nothing written in the bundle
    assert box.run("command -v repro", timeout=60).returncode != 0
    _assert_bootstrapped(box, "3.12.1")
    # a second run reuses the working tool venv, built from the same wheels
    code, output = _setup_env(box, *UNPACK)
    assert code == 0, output
    assert f"using repro {__version__} in {TOOL_HOME}/tool-{__version__}-py3.12-" in output
    assert "(built from these tool wheels)" in output
    assert "installing repro" not in output
    assert box.run(LISTING, timeout=60).stdout == before


@pytest.mark.parametrize(
    ("damage", "named"),
    [
        ("printf 'x' >> ws-1/env/pip-freeze.txt", "env/pip-freeze.txt: FAILED"),
        ("echo stray > ws-1/env/stray.txt", "env/stray.txt: present but not listed"),
        ("rm ws-1/env/environment.json", "env/environment.json"),
    ],
    ids=["changed", "unlisted", "missing"],
)
def test_a_damaged_bundle_is_refused_before_anything_is_created(
    bundle_312: Path, tmp_path: Path, damage: str, named: str
) -> None:
    box = _box_with(bundle_312, tmp_path, "3.12")
    assert box.run(damage, timeout=60).returncode == 0
    code, output = _setup_env(box, *UNPACK)
    assert code == 1, output
    assert named in output
    assert "nothing was installed" in output
    assert not box.host(TOOL_HOME).exists()
    assert not box.host("/box/app").exists()


def test_a_tool_venv_inside_the_bundle_is_refused(bundle_312: Path, tmp_path: Path) -> None:
    box = _box_with(bundle_312, tmp_path, "3.12")
    before = box.run(LISTING, timeout=60).stdout
    for args, env in (
        (["--tool-venv", f"/box/{TOP}/.repro-tool"], {}),
        ([], {"REPRO_TOOL_VENV": f"{TOP}/tool"}),  # relative, from /box
    ):
        proc = box.run(["bash", f"{TOP}/setup_env.sh", *args, *UNPACK], env=env, timeout=120)
        assert proc.returncode == 2, proc.stdout + proc.stderr
        assert "is inside the bundle directory" in proc.stderr
    assert box.run(LISTING, timeout=60).stdout == before
    assert not box.host("/box/app").exists()


def test_the_tool_venv_goes_where_asked_and_a_missing_python_is_named(
    bundle_312: Path, tmp_path: Path
) -> None:
    box = _box_with(bundle_312, tmp_path, "3.12")
    proc = box.run(
        ["bash", f"{TOP}/setup_env.sh", *UNPACK],
        env={"REPRO_BOOTSTRAP_PYTHON": "/box/nope/python3"},
        timeout=60,
    )
    assert proc.returncode == 2
    assert "REPRO_BOOTSTRAP_PYTHON=/box/nope/python3: no such interpreter" in proc.stderr
    box.host("/box/tools/repro").mkdir(parents=True)  # an empty directory is used as it is
    code, output = _setup_env(box, "--tool-venv", "/box/tools/repro", *UNPACK)
    assert code == 0, output
    assert box.run(["/box/tools/repro/bin/repro", "--version"], timeout=60).stdout == (
        f"repro, version {__version__}\n"
    )
    assert not box.host(TOOL_HOME).exists()
    assert box.host("/box/app/.repro/state.toml").is_file()


def test_setup_env_bootstraps_a_debian_311_bundle_on_a_debian_only_box(tmp_path: Path) -> None:
    """A minimal Debian root: its own Python 3.11.2 only, and a bundle of a venv of it."""
    workspace = make_workspace(tmp_path / "src", Path("/usr/bin/python3.11"))
    result = pack_workspace(workspace, tmp_path / "out", cache=tmp_path / "cache", wheels="all")
    assert result.path is not None
    box = _box_with(result.path, tmp_path, "debian-3.11")
    assert box.run("python3.12 --version", timeout=60).returncode != 0
    before = box.run(LISTING, timeout=60).stdout
    code, output = _setup_env(box, *UNPACK)
    assert code == 0, output
    assert "with /usr/bin/python3.11 (Python 3.11)" in output
    assert box.run(LISTING, timeout=60).stdout == before
    _assert_bootstrapped(box, "3.11.2")


ESCAPED = r"""
set -e
printf 'odd name\n' > 'ws-1/files-a\b.txt'
digest=$(sha256sum < 'ws-1/files-a\b.txt' | cut -c1-64)
printf '\\%s  files-a\\\\b.txt\n' "$digest" >> ws-1/MANIFEST.sha256
"""


def test_escaped_manifest_names_are_checked_by_pythons_hashlib(
    bundle_312: Path, tmp_path: Path
) -> None:
    """sha256sum's escaped names (a backslash in the name) go to the Python verifier: it
    accepts a listed file whose name needs escaping and names a changed one."""
    box = _box_with(bundle_312, tmp_path, "3.12")
    made = box.run(ESCAPED, timeout=60)
    assert made.returncode == 0, made.stderr
    check = box.run(f"cd {TOP} && sha256sum -c --strict --quiet MANIFEST.sha256", timeout=60)
    assert check.returncode == 0, check.stdout  # the real reader agrees with the edit
    inside = ["--tool-venv", f"/box/{TOP}/tool"]
    proc = box.run(["bash", f"{TOP}/setup_env.sh", *inside, *UNPACK], timeout=120)
    assert proc.returncode == 2, proc.stderr  # verified, then the tool venv is refused
    assert "is inside the bundle directory" in proc.stderr
    assert box.run(f"printf x >> {TOP}/bundle.toml", timeout=60).returncode == 0
    proc = box.run(["bash", f"{TOP}/setup_env.sh", *UNPACK], timeout=120)
    assert proc.returncode == 1
    assert "bundle.toml: FAILED (its sha256 is not the manifest's)" in proc.stderr
    assert not box.host(TOOL_HOME).exists() and not box.host("/box/app").exists()


def test_offline_on_a_python_the_tool_wheels_do_not_cover_says_what_to_do(tmp_path: Path) -> None:
    """A 3.12 bundle packed offline on 3.11 with a cold cache carries only cp311 tool
    wheels; on a box whose only Python is 3.12, setup_env.sh --offline cannot install
    repro: exit 3, naming the Python and what to do, and nothing left behind."""
    from tests.support.bundles import member_names, read_member

    workspace = make_workspace(tmp_path / "src", PYTHON_312)
    packed = pack_workspace(workspace, tmp_path / "out", cache=tmp_path / "cold", download=False)
    assert packed.path is not None
    wheels = [n for n in member_names(packed.path) if n.startswith(f"{TOP}/tool/wheels/")]
    assert any("-cp311-" in w for w in wheels) and not any("-cp312-" in w for w in wheels)
    assert 'wheel_pythons="3.11"' in read_member(packed.path, f"{TOP}/setup_env.sh").decode()
    box = _box_with(packed.path, tmp_path, "3.12")
    before = box.run(LISTING, timeout=60).stdout
    code, output = _setup_env(box, *UNPACK)
    assert code == 3, output
    assert (
        "the wheels under tool/wheels cover Python 3.11; "
        "/usr/local/bin/python3.12 is Python 3.12" in output
    )
    assert "cannot bootstrap repro on Python 3.12 offline: not trying the network" in output
    assert "run this with Python 3.11 (REPRO_BOOTSTRAP_PYTHON=/path/to/python)" in output
    assert "or without --offline to download what Python 3.12 lacks" in output
    assert f"removed {TOOL_HOME}/tool-{__version__}-py3.12-" in output
    assert "(made by this run); nothing was installed" in output
    assert box.run(LISTING, timeout=60).stdout == before
    assert list(box.host(TOOL_HOME).iterdir()) == []
    assert not box.host("/box/app").exists()
    # without --offline it tries the network, which the box does not have: the same end
    online = [arg for arg in UNPACK if arg != "--offline"]
    code, output = _setup_env(box, *online)
    assert code == 3, output
    assert "trying the network for what is missing" in output
    assert (
        f"cannot install repro {__version__} on Python 3.12, from tool/wheels nor the network"
        in output
    )
    assert list(box.host(TOOL_HOME).iterdir()) == []
    assert not box.host("/box/app").exists()


# --- signatures: ssh-keygen in setup_env.sh, before any code of the bundle runs ------------


def _record_hash(data: bytes) -> str:
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def _swap_tool_wheel(tree: Path) -> str:
    """Replace repro's own wheel under `tree`/tool/wheels by one of the same name whose
    `.pth` writes MARKER whenever the tool venv's Python starts (its RECORD lists it), and
    write the new digest into MANIFEST.sha256: the manifest checks, its signature does not.
    Returns the wheel's name."""
    (wheel,) = (tree / "tool" / "wheels").glob(f"repro-{__version__}-*.whl")
    pth = f"import pathlib; pathlib.Path({MARKER!r}).write_text('ran\\n')\n".encode()
    with zipfile.ZipFile(wheel) as original:
        members = [(info, original.read(info)) for info in original.infolist()]
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as hostile:
        for info, data in members:
            if info.filename.endswith(".dist-info/RECORD"):
                rows = list(csv.reader(io.StringIO(data.decode())))
                rows.insert(0, ["repro_hostile.pth", _record_hash(pth), str(len(pth))])
                text = io.StringIO()
                csv.writer(text, lineterminator="\n").writerows(rows)
                hostile.writestr("repro_hostile.pth", pth)
                data = text.getvalue().encode()
            hostile.writestr(info, data)
    wheel.write_bytes(out.getvalue())
    name = wheel.relative_to(tree).as_posix()
    digest = hashlib.sha256(wheel.read_bytes()).hexdigest()
    manifest = tree / "MANIFEST.sha256"
    lines = manifest.read_text().splitlines(keepends=True)
    changed = [f"{digest}  {name}\n" if line.endswith(f"  {name}\n") else line for line in lines]
    assert changed != lines
    manifest.write_text("".join(changed))
    return name


def _tool_venvs(box: FreshBox) -> list[str]:
    home = box.host(TOOL_HOME)
    return sorted(p.name for p in home.iterdir()) if home.exists() else []


def test_a_signed_bundle_is_checked_by_ssh_keygen_then_unpacked(
    bundle_312: Path, tmp_path: Path, keys: Keys
) -> None:
    box = _box_with(bundle_312, tmp_path, "3.12", keys)
    code, output = _setup_env(box, *TRUST, *UNPACK)
    assert code == 0, output
    assert 'signature: Good "repro-bundle" signature for alice@example.com' in output
    assert UNCHECKED not in output
    _assert_bootstrapped(box, "3.12.1")
    (venv,) = _tool_venvs(box)
    key = box.host(f"{TOOL_HOME}/{venv}/repro-tool-wheels.sha256").read_text()
    wheels = sorted(box.host(f"/box/{TOP}/tool/wheels").iterdir())
    assert [line.split("  ", 1)[1] for line in key.splitlines()] == [
        f"tool/wheels/{w.name}" for w in wheels
    ]
    whole = hashlib.sha256(key.encode()).hexdigest()
    assert venv.endswith(f"-{whole[:16]}")


def test_a_bundle_signed_by_an_unknown_key_is_refused_before_anything_is_made(
    bundle_312: Path, tmp_path: Path, keys: Keys
) -> None:
    box = _box_with(bundle_312, tmp_path, "3.12", keys)
    manifest = box.host(f"/box/{TOP}/MANIFEST.sha256")
    signature = subprocess.run(
        ["ssh-keygen", "-Y", "sign", "-f", str(keys.bob), "-n", NAMESPACE],
        input=manifest.read_bytes(), capture_output=True, timeout=60, check=True,
    ).stdout  # fmt: skip
    box.host(f"/box/{TOP}/MANIFEST.sha256.sig").write_bytes(signature)
    code, output = _setup_env(box, *TRUST, *UNPACK)
    assert code == 1, output
    assert "MANIFEST.sha256.sig does not verify: it was not made by a key that" in output
    assert "(unknown signer)" in output and "nothing was installed" in output
    assert not box.host(TOOL_HOME).exists() and not box.host("/box/app").exists()


def test_a_swapped_tool_wheel_never_runs_under_a_signature_check_nor_persists(
    bundle_312: Path, tmp_path: Path, keys: Keys
) -> None:
    """The hostile bundle: repro's tool wheel swapped for one whose `.pth` writes MARKER,
    re-manifested, the signature left as it was."""
    box = _box_with(bundle_312, tmp_path, "3.12", keys)
    hostile = box.host("/box/hostile")
    hostile.mkdir()
    assert box.run(["tar", "xf", bundle_312.name, "-C", "hostile"], timeout=120).returncode == 0
    _swap_tool_wheel(hostile / TOP)
    check = box.run(f"cd hostile/{TOP} && sha256sum -c --strict --quiet MANIFEST.sha256")
    assert check.returncode == 0, check.stdout  # the manifest alone vouches for the swap
    hostile_script = ["bash", f"/box/hostile/{TOP}/setup_env.sh"]

    # with --allowed-signers: refused by ssh-keygen, nothing of the bundle ran or was made
    proc = box.run([*hostile_script, *TRUST, *UNPACK], timeout=300)
    assert not box.host(MARKER).exists(), proc.stderr
    assert not box.host(TOOL_HOME).exists() and not box.host("/box/app").exists()
    assert proc.returncode == 1, proc.stderr
    assert "MANIFEST.sha256.sig does not verify: the signature does not match" in proc.stderr
    assert "nothing was installed" in proc.stderr

    # without it: the warning, and the swapped wheel's code runs (the marker is real);
    # the venv goes where an older setup_env.sh kept its tool venv, as an old one would
    old_layout = f"{TOOL_HOME}/tool-{__version__}-py3.12"
    proc = box.run(
        [*hostile_script, "--bootstrap-only", "--tool-venv", old_layout, "--offline"],
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr
    assert f"setup_env.sh: no --allowed-signers: {UNCHECKED}" in proc.stderr
    assert box.run([f"{old_layout}/bin/repro", "--version"], timeout=60).returncode == 0
    assert box.host(MARKER).is_file()
    box.host(MARKER).unlink()
    # an older setup_env.sh's tool venv: no key file
    box.host(f"{old_layout}/repro-tool-wheels.sha256").unlink()

    # the good, signed bundle afterwards: its own fresh venv, the hostile one never started
    code, output = _setup_env(box, *TRUST, *UNPACK)
    assert not box.host(MARKER).exists(), output
    assert code == 0, output
    assert f"into {TOOL_HOME}/tool-{__version__}-py3.12-" in output
    assert "using repro" not in output
    venvs = _tool_venvs(box)
    assert len(venvs) == 2 and venvs[0] == f"tool-{__version__}-py3.12", venvs
    assert TOOL_VENV.fullmatch(venvs[1]), venvs
    assert box.host("/box/app/.repro/state.toml").is_file()

    # asked for the hostile venv's own path: rebuilt there from the good wheels, not reused
    proc = box.run(
        ["bash", f"/box/{TOP}/setup_env.sh", *TRUST, "--bootstrap-only", "--offline",
         "--tool-venv", old_layout],
        timeout=600,
    )  # fmt: skip
    assert box.run([f"{old_layout}/bin/repro", "--version"], timeout=60).returncode == 0
    assert not box.host(MARKER).exists(), proc.stderr
    assert proc.returncode == 0, proc.stderr
    assert f"{old_layout} was not built from these tool wheels: building it anew" in proc.stderr
    assert proc.stdout.strip() == f"{old_layout}/bin/repro"
    assert _tool_venvs(box) == venvs  # the hostile venv set aside is gone
    assert not list(box.host(f"{old_layout}").glob("**/repro_hostile.pth"))
