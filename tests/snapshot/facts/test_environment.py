from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from repro.bundle.environment import facts_from_dict
from repro.errors import ProbeError, UsageError
from repro.snapshot.facts.environment import find_interpreter, probe_environment
from tests.snapshot.conftest import PatchedEnv, Venv


@pytest.mark.slow
def test_probe_of_a_312_venv_from_311(probe_env_312: Venv) -> None:
    assert sys.version_info[:2] == (3, 11)
    env = dict(os.environ, REPRO_PROBE_IMPORT_TIMEOUT="3")
    facts = probe_environment(probe_env_312.python, env=env)
    assert facts.python.version.startswith("3.12.")
    assert facts.python.is_venv
    assert facts.python.prefix == str(probe_env_312.root)
    assert Path(facts.python.include, "Python.h").is_file()
    six = facts.distribution("six")
    assert six is not None and six.requested and six.installer == "pip"
    modules = {m.module: m for m in facts.modules}
    assert set(modules) == {"transformers", "vllm", "triton"}
    transformers = modules["transformers"]
    assert (transformers.distribution_version, transformers.version) == (
        "4.0.0",
        "4.0.0.dev-custom",
    )
    assert transformers.error is None
    assert modules["vllm"].error is not None and "CUDA driver missing" in modules["vllm"].error
    assert modules["triton"].error == "import timed out after 3.0s"
    assert facts.platform.libc == "glibc" and facts.platform.libc_version


@pytest.mark.slow
def test_probe_reports_installers_editables_and_direct_urls(patched_env: PatchedEnv) -> None:
    facts = probe_environment(patched_env.venv.python)
    editable = facts.distribution("repro-demo-editable")
    assert editable is not None and editable.editable
    wheel = facts.distribution("repro-demo-wheel")
    assert wheel is not None and not wheel.editable
    assert wheel.version == "1.0+local"
    assert wheel.direct_url is not None and str(wheel.direct_url["url"]).startswith("file://")
    idna = facts.distribution("IDNA")
    assert idna is not None and idna.direct_url is None and idna.has_record
    # round trip through environment.json
    again = facts_from_dict(json.loads(facts.to_json()))
    assert again == facts


@pytest.mark.slow
def test_secrets_are_redacted(patched_env: PatchedEnv) -> None:
    env = dict(os.environ)
    env.update(
        HF_TOKEN="hf_supersecretvalue",
        PIP_INDEX_URL="https://alice:s3cretpw@pypi.example.com/simple",
        UV_EXTRA_INDEX_URL="https://tok3nvalue@download.example.com/whl",
        NCCL_DEBUG="INFO",
        SGLANG_API_KEY="abc-key-value",
    )
    facts = probe_environment(patched_env.venv.python, env=env)
    text = facts.to_json()
    for secret in ("hf_supersecretvalue", "s3cretpw", "alice", "tok3nvalue", "abc-key-value"):
        assert secret not in text
    assert facts.env["HF_TOKEN"] == "<redacted>"
    assert facts.env["SGLANG_API_KEY"] == "<redacted>"
    assert facts.env["PIP_INDEX_URL"] == "https://<redacted>@pypi.example.com/simple"
    assert facts.env["NCCL_DEBUG"] == "INFO"


def test_probe_errors_name_the_interpreter(tmp_path: Path) -> None:
    missing = tmp_path / "nope" / "python"
    with pytest.raises(ProbeError, match=str(missing)):
        probe_environment(missing)
    not_python = tmp_path / "false-python"
    not_python.write_text("#!/bin/sh\necho not json\n")
    not_python.chmod(not_python.stat().st_mode | stat.S_IXUSR)
    with pytest.raises(ProbeError, match="no valid JSON"):
        probe_environment(not_python)
    failing = tmp_path / "failing-python"
    failing.write_text("#!/bin/sh\necho boom >&2\nexit 3\n")
    failing.chmod(failing.stat().st_mode | stat.S_IXUSR)
    with pytest.raises(ProbeError, match=r"exit 3\): boom"):
        probe_environment(failing)
    slow = tmp_path / "slow-python"
    slow.write_text("#!/bin/sh\nexec sleep 30\n")
    slow.chmod(slow.stat().st_mode | stat.S_IXUSR)
    with pytest.raises(ProbeError, match="did not finish within 1s"):
        probe_environment(slow, timeout=1)


def test_find_interpreter_takes_a_venv_inside_source_unless_python_is_given(
    tmp_path: Path,
) -> None:
    source = tmp_path / "work"
    (source / ".venv" / "bin").mkdir(parents=True)
    (source / ".venv" / "pyvenv.cfg").write_text("home = /usr/bin\n")
    (source / ".venv" / "bin" / "python").symlink_to(sys.executable)
    found = find_interpreter(source, None, environ={"VIRTUAL_ENV": "/elsewhere"})
    assert found == source / ".venv" / "bin" / "python"
    explicit = Path(sys.executable)
    assert find_interpreter(source, explicit) == explicit


def test_find_interpreter_falls_back_to_explicit_then_virtual_env(tmp_path: Path) -> None:
    explicit = Path(sys.executable)
    assert find_interpreter(tmp_path, explicit, environ={}) == explicit
    active = tmp_path / "active"
    (active / "bin").mkdir(parents=True)
    (active / "bin" / "python").symlink_to(sys.executable)
    found = find_interpreter(tmp_path, None, environ={"VIRTUAL_ENV": str(active)})
    assert found == active / "bin" / "python"
    with pytest.raises(UsageError, match=r"no venv/, \.venv/ or env/"):
        find_interpreter(tmp_path, None, environ={})
    with pytest.raises(UsageError, match="no such interpreter"):
        find_interpreter(tmp_path, tmp_path / "missing", environ={})


def test_gpus_and_cuda_toolkit_reported(tmp_path: Path) -> None:
    """nvidia-smi is a test double here (no GPU on this machine); nvcc is the real one when
    installed."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    smi = bin_dir / "nvidia-smi"
    smi.write_text(
        "#!/bin/sh\n"
        'if [ "$#" -gt 0 ]; then\n'
        "  echo 'NVIDIA H200, 9.0, 580.65.06, 143771 MiB'\n"
        "  echo 'NVIDIA RTX PRO 6000 Blackwell, 12.0, 580.65.06, 97887 MiB'\n"
        "else\n"
        "  echo '| NVIDIA-SMI 580.65.06   Driver Version: 580.65.06   CUDA Version: 13.0 |'\n"
        "fi\n"
    )
    smi.chmod(0o755)
    env = dict(os.environ, PATH=f"{bin_dir}{os.pathsep}{os.environ['PATH']}", CUDA_HOME="/opt/cuda")
    facts = probe_environment(Path(sys.executable), env=env)
    smi_facts = facts.nvidia_smi
    assert smi_facts.present and smi_facts.driver_cuda_version == "13.0"
    assert [(g.name, g.compute_cap) for g in smi_facts.gpus] == [
        ("NVIDIA H200", "9.0"),
        ("NVIDIA RTX PRO 6000 Blackwell", "12.0"),
    ]
    assert smi_facts.gpus[0].driver_version == "580.65.06"
    assert facts.cuda_toolkit.cuda_home == "/opt/cuda"
    assert facts.env["CUDA_HOME"] == "/opt/cuda"
    nvcc = shutil.which("nvcc")
    if nvcc is None:
        assert facts.cuda_toolkit.nvcc is None
    else:
        out = subprocess.run([nvcc, "--version"], capture_output=True, text=True, check=True)
        assert facts.cuda_toolkit.nvcc_version is not None
        assert f"release {facts.cuda_toolkit.nvcc_version}" in out.stdout


def test_find_interpreter_for_a_scan_takes_venv_or_virtual_env(tmp_path: Path) -> None:
    """scan passes no source: --venv, else $VIRTUAL_ENV, else a usage error."""
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "python").symlink_to(sys.executable)
    assert find_interpreter(None, None, venv=venv, environ={}) == venv / "bin" / "python"
    found = find_interpreter(None, None, environ={"VIRTUAL_ENV": str(venv)})
    assert found == venv / "bin" / "python"
    with pytest.raises(UsageError, match="not both"):
        find_interpreter(None, Path(sys.executable), venv=venv, environ={})
    with pytest.raises(UsageError, match=r"--venv .*: a directory without bin/python"):
        find_interpreter(None, None, venv=tmp_path, environ={})
    with pytest.raises(UsageError, match=r"VIRTUAL_ENV .*: no such interpreter"):
        find_interpreter(None, None, environ={"VIRTUAL_ENV": str(tmp_path / "gone")})
    with pytest.raises(UsageError, match="no environment to scan"):
        find_interpreter(None, None, environ={})
