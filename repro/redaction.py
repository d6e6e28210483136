"""What counts as a secret, so that none enters a bundle.

The probe script (repro/probe/environment.py) runs inside a foreign interpreter
and cannot import this module; it carries the same name rule, and a test keeps the
two in step.

Three rules live here: secret variable *names* (`is_secret_name`, broad, for what
repro only reports; `is_secret_variable`, the narrower one for what a service runs
with), token-shaped *values* whatever they are called (`TOKEN_VALUE`), and
credentials inside *URLs* (`strip_url_credentials`).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

REDACTED = "<redacted>"

_SECRET_NAME = re.compile(r"TOKEN|KEY|SECRET|PASSWORD|PASSWD|CREDENTIAL|AUTH", re.IGNORECASE)
_URL_CREDENTIALS = re.compile(r"(?P<scheme>[A-Za-z][A-Za-z0-9+.-]*://)[^/@\s]+@")
_URL_USERINFO = re.compile(r"(?P<scheme>[A-Za-z][A-Za-z0-9+.-]*://)(?P<userinfo>[^/@\s\"'<>]+)@")
_QUERY_PARAMETER = re.compile(r"(?P<lead>[?&])(?P<name>[A-Za-z0-9_.-]+)=(?P<value>[^&#\s\"'<>]+)")

# Tokens by their shape, whatever the variable holding them is called: Hugging Face,
# GitHub (classic and fine-grained), OpenAI/Anthropic-style, AWS access key ids,
# Slack and GitLab.
TOKEN_VALUE = re.compile(
    r"(?<![A-Za-z0-9_])(?:"
    r"hf_[A-Za-z0-9]{30,}"
    r"|gh[pousr]_[A-Za-z0-9]{36,}"
    r"|github_pat_[A-Za-z0-9_]{40,}"
    r"|sk-[A-Za-z0-9_-]{20,}"
    r"|AKIA[0-9A-Z]{16}"
    r"|xox[abprs]-[A-Za-z0-9-]{10,}"
    r"|glpat-[A-Za-z0-9_-]{20,}"
    r")"
)
TOKEN_VALUE_BYTES = re.compile(TOKEN_VALUE.pattern.encode())

# Last '_'-separated words of a variable that holds a credential (HF_TOKEN, WANDB_API_KEY,
# CLIENT_SECRET); names holding PASSWORD/PASSWD anywhere, and AWS_* as a whole.
_SECRET_LAST_WORDS = frozenset(
    {"TOKEN", "KEY", "SECRET", "SECRETS", "PASSWORD", "PASSWD", "CREDENTIALS", "APIKEY", "PAT"}
)
# Values that are switches, not credentials: HF_HUB_DISABLE_IMPLICIT_TOKEN=1 stays.
_NOT_CREDENTIAL = frozenset({"", "0", "1", "true", "false", "yes", "no", "on", "off"})
_REFERENCE = re.compile(r"\$\{?[A-Za-z_][A-Za-z0-9_]*\}?")


def is_secret_name(name: str) -> bool:
    """True for variable names such as HF_TOKEN, WANDB_API_KEY, DB_PASSWORD."""
    return _SECRET_NAME.search(name) is not None


def is_secret_variable(name: str) -> bool:
    """The rule for what a service runs with: `*_TOKEN`, `*_KEY`, `*_SECRET`,
    `*PASSWORD*`, `AWS_*` (and a few kin). Narrower than `is_secret_name`, so that
    TOKENIZERS_PARALLELISM or HF_TOKEN_PATH stay in a unit."""
    upper = name.upper().replace("-", "_")
    if "PASSWORD" in upper or "PASSWD" in upper or upper.startswith("AWS_"):
        return True
    return upper.rsplit("_", 1)[-1] in _SECRET_LAST_WORDS


def looks_like_token(text: str) -> bool:
    """True when `text` holds a token-shaped string (hf_..., sk-..., ghp_...)."""
    return TOKEN_VALUE.search(text) is not None


def has_url_credentials(text: str) -> bool:
    """True when a URL in `text` carries credentials (see `strip_url_credentials`)."""
    return strip_url_credentials(text) != text


def secret_assignment(name: str, value: str) -> str | None:
    """Why NAME=VALUE is a credential ("its name", ...), or None."""
    if _REFERENCE.fullmatch(value):
        return None  # a reference to another variable holds nothing itself
    if is_secret_variable(name) and value.lower() not in _NOT_CREDENTIAL:
        return "its name"
    if looks_like_token(value):
        return "its value looks like a token"
    if has_url_credentials(value):
        return "its value is a URL with credentials"
    return None


def _userinfo(match: re.Match[str]) -> str:
    scheme, userinfo = match.group("scheme"), match.group("userinfo")
    # `git+ssh://git@host/...`: a user name alone, over ssh, is no credential.
    if "ssh" in scheme.lower() and ":" not in userinfo and not looks_like_token(userinfo):
        return match.group(0)
    return scheme


def _query(match: re.Match[str]) -> str:
    if is_secret_variable(match.group("name")):
        return f"{match.group('lead')}{match.group('name')}="
    return match.group(0)


def strip_url_credentials(text: str) -> str:
    """Credentials out of every URL in `text`: `https://user:token@host/x` and
    `https://x-access-token:ghp_...@github.com/x` become `https://host/x`, and the
    value of a query parameter such as `?access_token=...` is emptied. A plain ssh
    user (`git+ssh://git@github.com/...`) stays."""
    text = _URL_USERINFO.sub(_userinfo, text)
    if "?" in text:
        text = _QUERY_PARAMETER.sub(_query, text)
    return text


def scrub_text(text: str, values: Sequence[str] = ()) -> str:
    """`text` with URL credentials stripped, token-shaped strings and each of
    `values` (known secret values) replaced by <redacted>: for text repro writes
    that may quote what it read (warnings, pip freeze, probe facts)."""
    for value in sorted(values, key=len, reverse=True):
        if value:
            text = text.replace(value, REDACTED)
    return TOKEN_VALUE.sub(REDACTED, strip_url_credentials(text))


def scrub_document(document: Any) -> Any:
    """A JSON-like document with `scrub_text` applied to every string in it."""
    if isinstance(document, str):
        return scrub_text(document)
    if isinstance(document, Mapping):
        return {key: scrub_document(value) for key, value in document.items()}
    if isinstance(document, list | tuple):
        return [scrub_document(value) for value in document]
    return document


def redact_url_credentials(text: str) -> str:
    """https://user:pass@host/simple -> https://<redacted>@host/simple."""
    return _URL_CREDENTIALS.sub(lambda m: f"{m.group('scheme')}{REDACTED}@", text)


def redact_assignment(name: str, value: str) -> str:
    """The value to store for variable `name`: redacted when it looks secret."""
    if is_secret_name(name):
        return REDACTED
    return redact_url_credentials(value)
