"""Rung 'engine': import each serving engine, compare versions, verify patches.

Input (JSON file given as the only argument):
  {"engines": ["sglang", ...],
   "patched": [{"dist": "sglang", "path": "sglang/srt/x.py", "kind": "modified",
                "sha256": "..."}]}
``path`` is relative to the distribution's site-packages directory.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.metadata as metadata
import importlib.util
import json
import sys
import traceback
from pathlib import Path
from typing import Any

MARKER = "@@repro-rung-result@@"


def sha256_file(path: Any) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def distribution_for(module: str) -> str | None:
    mapping = getattr(metadata, "packages_distributions", None)
    if mapping is not None:
        names = mapping().get(module)
        if names:
            return str(names[0])
    try:
        metadata.distribution(module)
    except metadata.PackageNotFoundError:
        return None
    return module


def module_name(path: str) -> str | None:
    if not path.endswith(".py"):
        return None
    parts = path[: -len(".py")].split("/")
    if parts[-1] == "__init__":
        parts = parts[:-1]
    if not parts or not all(part.isidentifier() for part in parts):
        return None
    return ".".join(parts)


def public(version: str) -> str:
    return version.split("+", 1)[0]


def check_engine(name: str) -> dict[str, Any]:
    report: dict[str, Any] = {"name": name}
    if importlib.util.find_spec(name) is None:
        report["error"] = f"module {name} is not installed"
        return report
    dist = distribution_for(name)
    report["distribution"] = dist
    report["dist_version"] = metadata.version(dist) if dist else None
    try:
        module = importlib.import_module(name)
    except BaseException as exc:
        report["error"] = f"import {name} failed: {type(exc).__name__}: {exc}"
        report["traceback"] = traceback.format_exc()[-4000:]
        return report
    version = getattr(module, "__version__", None)
    report["module_version"] = None if version is None else str(version)
    report["location"] = str(getattr(module, "__file__", None))
    dist_version = report["dist_version"]
    if version is not None and dist_version is not None:
        report["version_match"] = public(str(version)) == public(dist_version)
    return report


def check_patched(entry: dict[str, Any]) -> dict[str, Any]:
    report: dict[str, Any] = dict(entry)
    try:
        dist = metadata.distribution(entry["dist"])
    except metadata.PackageNotFoundError:
        report["error"] = f"distribution {entry['dist']} is not installed"
        return report
    target = Path(str(dist.locate_file(entry["path"])))
    report["file"] = str(target)
    exists = target.exists()
    if entry.get("kind") == "deleted":
        report["ok"] = not exists
        if exists:
            report["error"] = "file should have been deleted by the patch but exists"
        return report
    if not exists:
        report["ok"] = False
        report["error"] = "patched file is missing"
        return report
    actual = sha256_file(target)
    report["actual_sha256"] = actual
    report["ok"] = actual == entry["sha256"]
    if not report["ok"]:
        report["error"] = "sha256 differs from the patched file in the bundle"
    return report


def import_patched(names: list[str]) -> list[dict[str, Any]]:
    results = []
    for name in names:
        try:
            importlib.import_module(name)
            results.append({"module": name, "ok": True})
        except BaseException as exc:
            results.append(
                {
                    "module": name,
                    "ok": False,
                    "error": f"{type(exc).__name__}: {exc}",
                    "traceback": traceback.format_exc()[-3000:],
                }
            )
    return results


def main() -> None:
    with open(sys.argv[1]) as handle:
        request = json.load(handle)
    names = request["engines"]
    if request.get("auto"):
        names = [name for name in names if importlib.util.find_spec(name) is not None]
    engines = [check_engine(name) for name in names]
    patched = [check_patched(entry) for entry in request["patched"]]
    modules = sorted(
        {
            name
            for entry in request["patched"]
            if entry.get("kind") != "deleted"
            for name in [module_name(entry["path"])]
            if name is not None
        }
    )
    facts = {"engines": engines, "patched": patched, "imports": import_patched(modules)}
    print(MARKER, json.dumps({"facts": facts}), flush=True)


if __name__ == "__main__":
    main()
