"""Facts about the venv this interpreter belongs to, read without site processing.

Run by the unpack side with the TARGET venv's python (`python -I -S venv_site.py WHAT`):
nothing of site-packages runs. Without `site`, `sys.prefix` is not yet the venv's
(site.py sets it from pyvenv.cfg), so the venv is found from the interpreter's own
location. WHAT, answered as JSON on stdout:
  dirs              its purelib and platlib directories (one when they are the same)
  distributions     name -> version of each distribution installed there
  scheme [PREFIX]   its install scheme, version and implementation; with PREFIX, those
                    of a venv it would make at PREFIX
"""

import json
import os
import sys
import sysconfig
from typing import Dict, List


def venv_prefix() -> str:
    here = os.path.dirname(os.path.dirname(os.path.abspath(sys.executable)))
    return here if os.path.isfile(os.path.join(here, "pyvenv.cfg")) else sys.prefix


def scheme_paths(prefix: str) -> Dict[str, str]:
    scheme = "venv" if "venv" in sysconfig.get_scheme_names() else "posix_prefix"
    return sysconfig.get_paths(scheme, vars={"base": prefix, "platbase": prefix})


def site_dirs() -> List[str]:
    paths = scheme_paths(venv_prefix())
    return list(dict.fromkeys([paths["purelib"], paths["platlib"]]))


def distributions() -> Dict[str, str]:
    import importlib.metadata as m

    out: Dict[str, str] = {}
    for d in m.distributions(path=site_dirs()):
        name = d.metadata["Name"]
        if name:
            out.setdefault(name, d.version)
    return out


def scheme(prefix: str) -> Dict[str, str]:
    paths = scheme_paths(prefix)
    return {
        "purelib": paths["purelib"],
        "platlib": paths["platlib"],
        "scripts": paths["scripts"],
        "prefix": prefix,
        "version": f"{sys.version_info[0]}.{sys.version_info[1]}",
        "implementation": sys.implementation.name,
    }


def main(argv: List[str]) -> int:
    what = argv[0] if argv else ""
    if what == "dirs":
        print(json.dumps(site_dirs()))
    elif what == "distributions":
        print(json.dumps(distributions()))
    elif what == "scheme" and len(argv) <= 2:
        print(json.dumps(scheme(argv[1] if len(argv) == 2 else venv_prefix())))
    else:
        sys.stderr.write("usage: venv_site.py dirs | distributions | scheme [PREFIX]\n")
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
