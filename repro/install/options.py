"""What a `repro unpack` run is asked to do, and how it tells its caller each step."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from repro.bundle.signing import SignaturePolicy
from repro.install.installer import RequestedInstaller
from repro.install.unitinstall import SYSTEMD_DIR

# (step, status, detail): each step as it starts, finishes, or says something
Events = Callable[[str, str, str], None]


@dataclass(frozen=True)
class UnpackOptions:
    bundle: str
    target: Path | None = None
    python: Path | None = None
    offline: bool = False
    installer: RequestedInstaller = "auto"
    cpu: bool = False
    force: bool = False
    dry_run: bool = False
    replace: bool = False
    models: Path | None = None
    install_units: bool = False
    units_dir: Path = SYSTEMD_DIR  # where --install-units puts them
    smoke: bool = True
    no_exec: bool = False
    signature: SignaturePolicy = field(default_factory=SignaturePolicy)
    jobs: int | None = None  # files hashed in parallel by the verification
    keep_bundle: bool = False  # keep the vault's wheels in TARGET/.repro/bundle too
