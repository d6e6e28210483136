"""Compile patched Python files with this interpreter; the errors as JSON on stdout.

stdin is a JSON list of [name, path] pairs (name: the file's path in site-packages,
for the report; path: where its patched content lies). Run by the patch step with the
TARGET venv's python (`python -I -S compile_check.py`): nothing of site-packages runs.
"""

import json
import sys
from typing import Any, Dict, List


def main() -> None:
    errors: List[Dict[str, Any]] = []
    for name, path in json.load(sys.stdin):
        with open(path, "rb") as f:
            source = f.read()
        try:
            compile(source, name, "exec", dont_inherit=True)
        except (SyntaxError, ValueError) as exc:
            line = getattr(exc, "lineno", None)
            errors.append({"path": name, "line": line, "message": str(exc)})
    json.dump(errors, sys.stdout)


if __name__ == "__main__":
    main()
