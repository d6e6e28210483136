"""The PEP 508 marker variables of this interpreter, as JSON on stdout.

`packaging.markers.default_environment()`, computed by the TARGET interpreter itself
(`python -I -S markers.py`), which may have no `packaging`.
"""

import json
import os
import platform
import sys
from typing import Any


def version(info: Any) -> str:
    text = f"{info.major}.{info.minor}.{info.micro}"
    if info.releaselevel != "final":
        text += info.releaselevel[0] + str(info.serial)
    return text


if __name__ == "__main__":
    print(
        json.dumps(
            {
                "implementation_name": sys.implementation.name,
                "implementation_version": version(sys.implementation.version),
                "os_name": os.name,
                "platform_machine": platform.machine(),
                "platform_release": platform.release(),
                "platform_system": platform.system(),
                "platform_version": platform.version(),
                "python_full_version": platform.python_version(),
                "platform_python_implementation": platform.python_implementation(),
                "python_version": ".".join(platform.python_version_tuple()[:2]),
                "sys_platform": sys.platform,
            }
        )
    )
