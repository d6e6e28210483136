"""`pip freeze --all` of this interpreter, as `python -m pip freeze --all` prints it.

Run by repro with the TARGET environment's python (`python -I freeze.py`, site on: pip
and the distributions it lists are the target's own). Without pip it says
"No module named pip" on stderr and exits 1, as `python -m pip` does.
"""

import importlib.util
import runpy
import sys

ARGV = ["pip", "freeze", "--all", "--disable-pip-version-check"]


def main() -> int:
    if importlib.util.find_spec("pip") is None:
        sys.stderr.write(f"{sys.executable}: No module named pip\n")
        return 1
    sys.argv = list(ARGV)
    runpy.run_module("pip", run_name="__main__", alter_sys=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
