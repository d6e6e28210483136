"""Where this interpreter installs: `sysconfig.get_paths()` as JSON on stdout.

Run by repro with the TARGET environment's python (`python -I scheme.py`, site on: the
venv's `sys.prefix` is set by site.py from its pyvenv.cfg).
"""

import json
import sysconfig

if __name__ == "__main__":
    print(json.dumps(sysconfig.get_paths()))
