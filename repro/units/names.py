"""The names a bundle's systemd unit carries: its file name, and the ${REPRO_*} variables
that stand for the target's paths in its text.

Pack captures units under these names (repro.snapshot.workspace.unitcapture) and
unpack installs them (repro.install.deploy.services); both judge a name by `validate_unit_name`.
"""

from __future__ import annotations

import re

from repro.errors import InputError

UNIT_SUFFIXES = (".service", ".socket", ".timer", ".path", ".target", ".mount")
# The target's paths, filled in by the unpacker: the venv, the workspace, the models.
VARIABLES = ("REPRO_VENV", "REPRO_HOME", "REPRO_MODELS")
# systemd's unit name grammar (systemd.unit(5), unit_name_is_valid): PREFIX[@INSTANCE]
# .TYPE of [A-Za-z0-9:_.\-], at most 255 characters, and one rule of repro's own: the
# name starts with a letter or digit. A leading '-' is systemd's escape of '/' (-.mount
# is the root file system, -.slice the root slice), never a bundle's own unit.
_UNIT_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9:_.\\-]*(@[A-Za-z0-9:_.\\-]*)?")
UNIT_NAME_MAX = 255


def validate_unit_name(name: str, *, source: str) -> None:
    """A unit's name must be a plain systemd name; it is installed under it."""
    stem, dot, suffix = name.rpartition(".")
    if (
        not dot
        or f".{suffix}" not in UNIT_SUFFIXES
        or len(name) > UNIT_NAME_MAX
        or not _UNIT_NAME.fullmatch(stem)
    ):
        raise InputError(
            f"{source}: {name!r} is not a systemd unit name repro installs",
            hint=f"a unit file is named PREFIX[@INSTANCE] plus one of {', '.join(UNIT_SUFFIXES)}"
            f" (at most {UNIT_NAME_MAX} characters of A-Z a-z 0-9 : _ . \\ -, starting "
            "with a letter or digit); rename it in the workspace and pack again",
        )
