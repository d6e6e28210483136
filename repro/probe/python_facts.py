"""This interpreter's version, include directory and real executable, as JSON on stdout.

Run by the preflight with a candidate interpreter (`python -I -S python_facts.py`): the
executable is the interpreter itself, not a launcher (a pyenv shim) in front of it.
"""

import json
import sys
import sysconfig

if __name__ == "__main__":
    print(
        json.dumps(
            {
                "version": ".".join(str(part) for part in sys.version_info[:3]),
                "include": sysconfig.get_paths()["include"],
                "executable": sys.executable,
            }
        )
    )
