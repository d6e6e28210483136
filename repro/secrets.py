"""What counts as a secret, so that none enters a bundle.

The probe script (repro/probe/environment.py) runs inside a foreign interpreter
and cannot import this module; it carries the same rule, and a test keeps the
two in step.
"""

from __future__ import annotations

import re

REDACTED = "<redacted>"

_SECRET_NAME = re.compile(r"TOKEN|KEY|SECRET|PASSWORD|PASSWD|CREDENTIAL|AUTH", re.IGNORECASE)
_URL_CREDENTIALS = re.compile(r"(?P<scheme>[A-Za-z][A-Za-z0-9+.-]*://)[^/@\s]+@")


def is_secret_name(name: str) -> bool:
    """True for variable names such as HF_TOKEN, WANDB_API_KEY, DB_PASSWORD."""
    return _SECRET_NAME.search(name) is not None


def redact_url_credentials(text: str) -> str:
    """https://user:pass@host/simple -> https://<redacted>@host/simple."""
    return _URL_CREDENTIALS.sub(lambda m: f"{m.group('scheme')}{REDACTED}@", text)


def redact_assignment(name: str, value: str) -> str:
    """The value to store for variable `name`: redacted when it looks secret."""
    if is_secret_name(name):
        return REDACTED
    return redact_url_credentials(value)
