"""What a `repro unpack` run is asked to do, and how it tells its caller each step."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from repro.bundle.manifest import ProgressSink
from repro.bundle.signing import SignaturePolicy
from repro.install.deploy.unitinstall import SYSTEMD_DIR
from repro.install.venv.installer import RequestedInstaller
from repro.units.render import check_path_value

# --rebuild-kernels: which carried kernel sources the kernels step builds for this box
RebuildKernels = Literal["auto", "never", "always"]

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
    rebuild_kernels: RebuildKernels = "auto"
    verify_weights: bool = False  # the models step reads every pinned weight file's sha256
    # hears the bytes of --verify-weights (the CLI's bar on stderr); not a setting
    weights_progress: ProgressSink | None = field(default=None, compare=False, repr=False)
    # a delta bundle's base (archive, URL, directory): the full bundle is made in staging
    base: str | None = None
    keep_releases: int = 2  # an upgrade in place keeps this many releases to roll back to
    compile_bytecode: bool = False  # the patch step then compiles site-packages' bytecode

    def __post_init__(self) -> None:
        """--target and --models are written into the bundle's units: a control
        character (a newline starts a new setting) is refused here, before anything is
        read or written (exit 2); repro.units.render escapes everything else."""
        for option, path in (("--target", self.target or Path(".")), ("--models", self.models)):
            if path is None:
                continue
            try:  # as given, absolute and with its links resolved: each lands in a unit
                forms = {str(path), str(path.absolute()), str(path.resolve())}
            except OSError:  # the working directory is gone: unpack says so itself
                forms = {str(path)}
            for form in sorted(forms):
                check_path_value(option, form)
