"""Rung 'python': the interpreter starts; report what it is."""

from __future__ import annotations

import json
import platform
import sys
import sysconfig

MARKER = "@@repro-rung-result@@"


def main() -> None:
    facts = {
        "version": platform.python_version(),
        "implementation": platform.python_implementation(),
        "executable": sys.executable,
        "prefix": sys.prefix,
        "base_prefix": sys.base_prefix,
        "in_venv": sys.prefix != sys.base_prefix,
        "platform": sysconfig.get_platform(),
    }
    print(MARKER, json.dumps({"facts": facts}), flush=True)


if __name__ == "__main__":
    main()
