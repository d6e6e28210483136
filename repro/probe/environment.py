"""Report facts about the interpreter that runs this script, as one JSON document on stdout.

One self-contained file of over 400 lines for a reason: the target's own interpreter
runs it as a script, and that interpreter has neither repro nor its dependencies, so it
can import nothing from repro and nothing outside the standard library.

Run by the TARGET environment's own python (`python -I environment.py`); repro imports it
only for its constants (KEY_MODULES). Standard library only; must work on any Python >= 3.8.
Every section is gathered on its own, so one failure is reported in "errors" instead of
losing the whole document. Key modules (torch, sglang, ...) are imported in child processes
with a timeout, so a broken or slow import cannot hang or kill the probe; `--no-imports`
leaves them out (repro then reads them from files: repro/snapshot/facts/modulefiles.py).
"""

from __future__ import annotations

import email.parser
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import sysconfig
from typing import Any, Dict

Json = Dict[str, Any]

SCHEMA = 1

# import name -> distribution names it can come from
KEY_MODULES = (
    ("torch", ("torch",)),
    ("triton", ("triton", "pytorch-triton")),
    ("sglang", ("sglang",)),
    ("sgl_kernel", ("sgl-kernel", "sgl_kernel")),
    ("sglang_kernel", ("sglang-kernel", "sglang_kernel")),
    ("flashinfer", ("flashinfer-python", "flashinfer")),
    ("vllm", ("vllm",)),
    ("transformers", ("transformers",)),
)

ENV_PREFIXES = ("CUDA_", "NCCL_", "SGLANG_", "VLLM_", "HF_", "TORCH_", "PIP_", "UV_")
ENV_NAMES = ("LD_LIBRARY_PATH", "CUDA_HOME", "CUDA_PATH")
SECRET_WORDS = ("TOKEN", "KEY", "SECRET", "PASSWORD", "PASSWD", "CREDENTIAL", "AUTH")
REDACTED = "<redacted>"
# the probe's own directory is sys.path[0]; it is not part of the target environment
PROBE_DIR = os.path.dirname(os.path.abspath(__file__))
URL_CREDENTIALS = re.compile(r"([A-Za-z][A-Za-z0-9+.-]*://)[^/@\s]+@")

IMPORT_SNIPPET = r"""
import json, sys
name = sys.argv[1]
out = {"module": name}
mod = __import__(name)
out["version"] = str(getattr(mod, "__version__", "")) or None
out["file"] = getattr(mod, "__file__", None)
if name == "torch":
    t = {}
    t["cuda"] = getattr(mod.version, "cuda", None)
    t["hip"] = getattr(mod.version, "hip", None)
    t["git_version"] = getattr(mod.version, "git_version", None)
    try:
        t["arch_list"] = list(mod.cuda.get_arch_list())
    except Exception as e:
        t["arch_list"] = []
        t["arch_list_error"] = repr(e)
    try:
        t["cuda_available"] = bool(mod.cuda.is_available())
        t["device_count"] = int(mod.cuda.device_count()) if t["cuda_available"] else 0
    except Exception as e:
        t["cuda_available"] = False
        t["device_count"] = 0
        t["cuda_error"] = repr(e)
    devices = []
    for i in range(t["device_count"]):
        p = mod.cuda.get_device_properties(i)
        devices.append({"index": i, "name": p.name,
                        "capability": "%d.%d" % (p.major, p.minor),
                        "memory_bytes": int(p.total_memory)})
    t["devices"] = devices
    out["torch"] = t
sys.stdout.write(json.dumps(out))
"""


def normalize(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def redact_value(name: str, value: str) -> str:
    upper = name.upper()
    if any(word in upper for word in SECRET_WORDS):
        return REDACTED
    return URL_CREDENTIALS.sub(lambda m: m.group(1) + REDACTED + "@", value)


def gather_env() -> dict[str, str]:
    result: dict[str, str] = {}
    for name, value in os.environ.items():
        if name.startswith(ENV_PREFIXES) or name in ENV_NAMES:
            result[name] = redact_value(name, value)
    return dict(sorted(result.items()))


def target_sys_path() -> list[str]:
    return [p for p in sys.path if p and os.path.abspath(p) != PROBE_DIR]


def gather_python() -> Json:
    paths = sysconfig.get_paths()
    base_prefix = getattr(sys, "base_prefix", sys.prefix)
    return {
        "version": platform.python_version(),
        "version_info": list(sys.version_info[:3]),
        "implementation": sys.implementation.name,
        "executable": sys.executable,
        "prefix": sys.prefix,
        "base_prefix": base_prefix,
        "is_venv": sys.prefix != base_prefix,
        "purelib": paths.get("purelib"),
        "platlib": paths.get("platlib"),
        "include": paths.get("include"),
        "scripts": paths.get("scripts"),
        "sys_path": target_sys_path(),
        "abiflags": getattr(sys, "abiflags", ""),
        "soabi": sysconfig.get_config_var("SOABI"),
    }


def gather_platform() -> Json:
    libc_name, libc_version = platform.libc_ver()
    if not libc_version:
        try:
            confstr = os.confstr("CS_GNU_LIBC_VERSION") or ""
        except (AttributeError, ValueError, OSError):
            confstr = ""
        if confstr:
            libc_name, _, libc_version = confstr.partition(" ")
    return {
        "system": platform.system(),
        "machine": platform.machine(),
        "release": platform.release(),
        "platform": platform.platform(),
        "libc": libc_name or None,
        "libc_version": libc_version or None,
    }


def read_text(path: str) -> str | None:
    try:
        with open(path, encoding="utf-8", errors="replace") as handle:
            return handle.read()
    except OSError:
        return None


def editable_markers(site_dir: str) -> set[str]:
    """Names (normalised) that a .pth / .egg-link in site_dir installs as editable."""
    names: set[str] = set()
    try:
        entries = os.listdir(site_dir)
    except OSError:
        return names
    for entry in entries:
        if entry.endswith(".egg-link"):
            names.add(normalize(entry[: -len(".egg-link")]))
        elif entry.startswith("__editable__.") and entry.endswith(".pth"):
            stem = entry[len("__editable__.") : -len(".pth")]
            names.add(normalize(stem.split("-")[0]))
    return names


def read_distribution(site_dir: str, entry: str, editable_names: set[str]) -> Json | None:
    path = os.path.join(site_dir, entry)
    is_dist_info = entry.endswith(".dist-info")
    if os.path.isdir(path):
        meta_path = os.path.join(path, "METADATA" if is_dist_info else "PKG-INFO")
    else:  # a bare .egg-info file
        meta_path = path
    text = read_text(meta_path)
    if text is None:
        return None
    headers = email.parser.Parser().parsestr(text, headersonly=True)
    name = headers.get("Name")
    version = headers.get("Version")
    if not name or not version:
        return None
    direct_url = None
    direct_text = read_text(os.path.join(path, "direct_url.json")) if is_dist_info else None
    if direct_text:
        try:
            direct_url = json.loads(direct_text)
        except ValueError:
            direct_url = {"error": "unparseable direct_url.json"}
    installer = read_text(os.path.join(path, "INSTALLER")) if is_dist_info else None
    editable = False
    if isinstance(direct_url, dict):
        editable = bool((direct_url.get("dir_info") or {}).get("editable"))
    if normalize(name) in editable_names:
        editable = True
    top_level_text = read_text(os.path.join(path, "top_level.txt"))
    return {
        "name": name,
        "normalized_name": normalize(name),
        "version": version,
        "installer": installer.strip() if installer else None,
        "direct_url": direct_url,
        "editable": editable,
        "requested": os.path.exists(os.path.join(path, "REQUESTED")),
        "metadata_dir": path,
        "metadata_kind": "dist-info" if is_dist_info else "egg-info",
        "site_dir": site_dir,
        "has_record": os.path.isfile(os.path.join(path, "RECORD")),
        "top_level": [line.strip() for line in (top_level_text or "").splitlines() if line.strip()],
    }


def gather_distributions() -> list[Json]:
    seen: set[str] = set()
    dists: list[Json] = []
    for site_dir in target_sys_path():
        if not os.path.isdir(site_dir):
            continue
        editable_names = editable_markers(site_dir)
        try:
            entries = sorted(os.listdir(site_dir))
        except OSError:
            continue
        for entry in entries:
            if not entry.endswith((".dist-info", ".egg-info")):
                continue
            dist = read_distribution(site_dir, entry, editable_names)
            if dist is None or dist["normalized_name"] in seen:
                continue
            if dist["metadata_kind"] == "egg-info" and dist["normalized_name"] in editable_names:
                dist["editable"] = True
            seen.add(dist["normalized_name"])
            dists.append(dist)
    dists.sort(key=lambda d: d["normalized_name"])
    return dists


def find_spec_safely(name: str) -> bool:
    try:
        import importlib.util

        return importlib.util.find_spec(name) is not None
    except Exception:
        return False


def import_module_report(
    name: str, dist_names: tuple[str, ...], dists_by_name: dict[str, Json]
) -> Json:
    dist = None
    for dist_name in dist_names:
        dist = dists_by_name.get(normalize(dist_name))
        if dist is not None:
            break
    report = {
        "module": name,
        "distribution": dist["name"] if dist else None,
        "distribution_version": dist["version"] if dist else None,
        "version": None,
        "file": None,
        "error": None,
    }
    return report


def start_import(name: str) -> subprocess.Popen[bytes]:
    argv = [sys.executable, "-I", "-c", IMPORT_SNIPPET, name]
    # cwd: a directory holding nothing importable, so a `torch/` in the caller's working
    # directory cannot shadow the installed one (before 3.11, -I still puts cwd on sys.path)
    return subprocess.Popen(
        argv,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
        cwd=PROBE_DIR,
    )


def communicate(proc: subprocess.Popen[bytes], timeout: float) -> tuple[bytes, bytes] | None:
    """The output of `proc` once it ends; None, the process killed and reaped, after
    `timeout` seconds."""
    try:
        return proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        return None


def finish_import(proc: subprocess.Popen[bytes], report: Json, timeout: float) -> Json:
    output = communicate(proc, timeout)
    if output is None:
        report["error"] = f"import timed out after {timeout}s"
        return report
    out, err = output
    if proc.returncode != 0:
        lines = err.decode("utf-8", "replace").strip().splitlines()
        report["error"] = lines[-1] if lines else f"exit status {proc.returncode}"
        return report
    try:
        data = json.loads(out.decode("utf-8", "replace"))
    except ValueError:
        report["error"] = "import printed no JSON"
        return report
    report["version"] = data.get("version")
    report["file"] = data.get("file")
    if "torch" in data:
        report["torch"] = data["torch"]
    return report


def gather_modules(dists: list[Json]) -> list[Json]:
    timeout = float(os.environ.get("REPRO_PROBE_IMPORT_TIMEOUT", "90"))
    dists_by_name = dict((d["normalized_name"], d) for d in dists)
    running: list[tuple[subprocess.Popen[bytes], Json]] = []
    reports: list[Json] = []
    for name, dist_names in KEY_MODULES:
        report = import_module_report(name, dist_names, dists_by_name)
        if not find_spec_safely(name):
            if report["distribution"] is not None:
                report["error"] = "distribution installed but module not found"
                reports.append(report)
            continue
        try:
            running.append((start_import(name), report))
        except OSError as exc:
            report["error"] = f"cannot start import: {exc}"
            reports.append(report)
    for proc, report in running:
        reports.append(finish_import(proc, report, timeout))
    reports.sort(key=lambda r: r["module"])
    return reports


class Tool:
    """A tool started at once and its output read when needed: the probe starts its tools
    first and gathers the interpreter's own facts meanwhile (a plain `nvidia-smi` is a
    large part of a probe's time)."""

    def __init__(self, argv: list[str], timeout: float = 30) -> None:
        self.argv = argv
        self.timeout = timeout
        self.error: str | None = None
        self.proc: subprocess.Popen[bytes] | None = None
        try:
            self.proc = subprocess.Popen(
                argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL
            )
        except (OSError, subprocess.SubprocessError) as exc:
            self.error = str(exc)

    def result(self) -> tuple[str | None, str | None]:
        """(stdout, None) when the tool succeeded, else (None, why)."""
        if self.proc is None:
            return None, self.error
        output = communicate(self.proc, self.timeout)
        if output is None:
            return None, str(subprocess.TimeoutExpired(self.argv, self.timeout))
        out, err = output
        if self.proc.returncode != 0:
            return None, err.decode("utf-8", "replace").strip() or f"exit {self.proc.returncode}"
        return out.decode("utf-8", "replace"), None


def start_nvidia_smi() -> tuple[Tool, Tool] | None:
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return None
    query = "--query-gpu=name,compute_cap,driver_version,memory.total"
    return Tool([smi, query, "--format=csv,noheader"]), Tool([smi])


def gather_nvidia_smi(started: tuple[Tool, Tool] | None) -> Json:
    result: Json = {
        "present": started is not None,
        "gpus": [],
        "driver_cuda_version": None,
        "error": None,
    }
    if started is None:
        return result
    query, plain = started
    out, err = query.result()
    header, _ = plain.result()
    if out is None:
        result["error"] = err
        return result
    for index, line in enumerate(line for line in out.splitlines() if line.strip()):
        fields = [field.strip() for field in line.split(",")]
        while len(fields) < 4:
            fields.append("")
        result["gpus"].append(
            {
                "index": index,
                "name": fields[0],
                "compute_cap": fields[1] or None,
                "driver_version": fields[2] or None,
                "memory_total": fields[3] or None,
            }
        )
    match = re.search(r"CUDA Version:\s*([0-9.]+)", header or "")
    result["driver_cuda_version"] = match.group(1) if match else None
    return result


def find_nvcc() -> tuple[str | None, str | None]:
    """(CUDA_HOME or CUDA_PATH, the nvcc found on PATH or under it)."""
    cuda_home = os.environ.get("CUDA_HOME") or os.environ.get("CUDA_PATH")
    nvcc = shutil.which("nvcc")
    if nvcc is None and cuda_home:
        candidate = os.path.join(cuda_home, "bin", "nvcc")
        if os.access(candidate, os.X_OK):
            nvcc = candidate
    return cuda_home, nvcc


def gather_cuda_toolkit(cuda_home: str | None, nvcc: str | None, version: Tool | None) -> Json:
    result = {"cuda_home": cuda_home, "nvcc": nvcc, "nvcc_version": None, "nvcc_output": None}
    if nvcc is None or version is None:
        return result
    out, err = version.result()
    result["nvcc_output"] = (out or err or "").strip()
    match = re.search(r"release\s+([0-9.]+)", out or "")
    result["nvcc_version"] = match.group(1) if match else None
    return result


def main() -> int:
    errors: dict[str, str] = {}
    document: Json = {"schema": SCHEMA, "errors": errors}
    # the tools run while the interpreter's own facts are gathered
    smi = start_nvidia_smi()
    cuda_home, nvcc = find_nvcc()
    nvcc_version = Tool([nvcc, "--version"]) if nvcc is not None else None
    sections = (
        ("python", gather_python),
        ("platform", gather_platform),
        ("distributions", gather_distributions),
        ("nvidia_smi", lambda: gather_nvidia_smi(smi)),
        ("cuda_toolkit", lambda: gather_cuda_toolkit(cuda_home, nvcc, nvcc_version)),
        ("env", gather_env),
    )
    for key, gather in sections:
        try:
            document[key] = gather()
        except Exception as exc:  # report, keep going
            document[key] = None
            errors[key] = f"{type(exc).__name__}: {exc}"
    try:
        # --no-imports: the caller needs files, not what importing torch says (importing
        # torch with its CUDA libraries takes seconds and hundreds of MB; `repro scan` needs
        # neither)
        if "--no-imports" in sys.argv[1:]:
            document["modules"] = []
        else:
            document["modules"] = gather_modules(document["distributions"] or [])
    except Exception as exc:
        document["modules"] = []
        errors["modules"] = f"{type(exc).__name__}: {exc}"
    sys.stdout.write(json.dumps(document, sort_keys=True))
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
