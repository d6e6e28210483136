"""What decides which wheel tags this interpreter accepts, as JSON on stdout:
implementation, version, system, machine, `sysconfig.get_platform()`, glibc and macOS
versions, and the extension suffix that names the interpreter's ABI. repro computes the
tags from these with `packaging.tags`, so the TARGET interpreter (`python -I -S
tag_facts.py`) needs no `packaging`.
"""

import json
import os
import platform
import sys
import sysconfig
from typing import Any


def main() -> None:
    libc: Any = None
    libc_version: Any = None
    try:
        value = os.confstr("CS_GNU_LIBC_VERSION")
        if value:
            libc, libc_version = "glibc", [int(p) for p in value.split()[1].split(".")[:2]]
    except (AttributeError, ValueError, OSError, IndexError):
        pass
    mac = platform.mac_ver()[0]
    print(
        json.dumps(
            {
                "implementation": sys.implementation.name,
                "python_version": list(sys.version_info[:2]),
                "system": platform.system().lower(),
                "machine": platform.machine(),
                "platform": sysconfig.get_platform(),
                "libc": libc,
                "libc_version": libc_version,
                "mac_version": [int(p) for p in mac.split(".")[:2]] if mac else None,
                "ext_suffix": sysconfig.get_config_var("EXT_SUFFIX"),
            }
        )
    )


if __name__ == "__main__":
    main()
