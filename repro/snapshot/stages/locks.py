"""Stage `locks`: the members that pin the stack (env/pip-freeze.txt,
env/requirements.lock) and those that list the vault wheels' sha256 (env/pylock.toml,
env/vault.toml).

The wheels' sha256 are taken as the wheels are written, so pylock.toml and vault.toml
are `Generated` members: trailing members in canonical order (format 5), rendered from
the digests of env/wheels/ once the wheels are in the archive (or, for a delta's wheels
its base holds, from the digests its manifest lists).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace

from packaging.utils import canonicalize_name

from repro.bundle import layout
from repro.bundle.lock import DistFile, IndexConfig, Pin, render_pylock, render_requirements_lock
from repro.bundle.vault import VaultEntry, dump_vault
from repro.snapshot.facts.freeze import freeze_from, requires_python_of
from repro.snapshot.facts.indexcheck import IndexReport
from repro.snapshot.stages.probe import Environment, Probed, Start
from repro.snapshot.stages.vaulting import Selected, Vaulted
from repro.snapshot.vault.build import VaultReport, VaultWheel
from repro.snapshot.write.bundle import Generated


@dataclass(frozen=True)
class Locks:
    members: Mapping[str, bytes | Generated]
    warnings: tuple[str, ...]


def locks(
    start: Start,
    probed: Probed,
    env: Environment,
    selected: Selected,
    vaulted: Vaulted,
) -> Locks:
    """The four lock members, with the target's pip freeze (stage `probe`'s job)."""
    facts = probed.facts
    vault = vaulted.report
    warnings = _plain_http_warnings(env.indexes)
    hashes: dict[str, list[str]] = {}
    if vault.index is not None:
        for dist_name, files in vault.index.found.items():
            hashes[dist_name] = sorted({f.sha256 for f in files if f.sha256})
    members: dict[str, bytes | Generated] = {
        layout.PIP_FREEZE: freeze_from(probed.freeze.result(), start.python, facts).text.encode(),
        layout.REQUIREMENTS_LOCK: render_requirements_lock(
            env.pins, env.indexes, hashes=hashes or None
        ).encode(),
    }
    index_files = selected.index_files.result()
    if index_files is not None and index_files is not vault.index:
        warnings += index_files.errors
    listing = _VaultLocks(vault, index_files, env.pins, env.indexes, requires_python_of(facts))
    unlisted = listing.unlisted()
    if unlisted:
        pins = env.pins
        warnings.append(
            f"{layout.PYLOCK} lists {len(pins) - len(unlisted)} of {len(pins)} pins: no "
            f"index or vault file is known for {', '.join(unlisted)} (requirements.lock "
            "pins them; pack online, with --check-index or --wheels all for all of them)"
        )
    # made once the wheels are written; rendered now with a stand-in for each digest, so
    # that a lock that does not validate (render_pylock) stops the pack before a byte
    # is written rather than after the wheels
    listing.render([_STAND_IN] * len(vault.wheels))
    for rel in (layout.PYLOCK, layout.VAULT_TOML):
        members[rel] = Generated(listing.renderer(rel))
    return Locks(members, tuple(warnings))


_STAND_IN = "0" * 64  # a sha256's length and form, never written


@dataclass(frozen=True)
class _VaultLocks:
    """The members that list the vault wheels' sha256: pylock.toml and vault.toml."""

    vault: VaultReport
    index: IndexReport | None  # the files the indexes serve for pins not in the vault
    pins: Sequence[Pin]
    indexes: IndexConfig
    requires_python: str
    # both files, by the digests they were rendered with: one rendering serves both members
    _rendered: dict[tuple[str, ...], dict[str, bytes]] = field(default_factory=dict)

    def renderer(self, member: str) -> Callable[[Mapping[str, str], Mapping[str, bytes]], bytes]:
        """`member`'s `Generated.render`: the file, from the digests of the wheels written."""

        def render(digests: Mapping[str, str], _made: Mapping[str, bytes]) -> bytes:
            taken = tuple(digests[layout.wheel(w.filename)] for w in self.vault.wheels)
            if taken not in self._rendered:
                self._rendered[taken] = self.render(taken)
            return self._rendered[taken][member]

        return render

    def render(self, digests: Sequence[str]) -> dict[str, bytes]:
        """Both files with `digests` (one per vault wheel, in order) as the wheels' sha256.
        A vaulted pin is listed with its vault wheels only, so that an offline install
        takes those."""
        wheels = [replace(w, sha256=d) for w, d in zip(self.vault.wheels, digests, strict=True)]
        files, index_of = self._files(wheels)
        pylock = render_pylock(
            self.pins,
            self.indexes,
            requires_python=self.requires_python,
            files=files,
            index_of=index_of,
        )
        entries = [
            VaultEntry(w.name, w.version, w.filename, w.sha256, w.reason, w.source) for w in wheels
        ]
        return {layout.PYLOCK: pylock.encode(), layout.VAULT_TOML: dump_vault(entries)}

    def unlisted(self) -> list[str]:
        """Pins pylock.toml leaves out: neither the vault nor an index file is known."""
        files, _ = self._files(self.vault.wheels)
        return [pin.name for pin in self.pins if pin.name not in files]

    def _files(
        self, wheels: Sequence[VaultWheel]
    ) -> tuple[dict[str, list[DistFile]], dict[str, str]]:
        """Each listed pin's files (its vault wheels, else the index's files that have a
        sha256, which PEP 751 requires) and the index those came from."""
        files: dict[str, list[DistFile]] = {}
        for wheel in wheels:
            files.setdefault(canonicalize_name(wheel.name), []).append(
                DistFile(wheel.filename, wheel.sha256, path=layout.wheel_from_env(wheel.filename))
            )
        index_of: dict[str, str] = {}
        report = self.index or IndexReport()
        for name, found in report.found.items():
            hashed = [DistFile(f.filename, f.sha256, url=f.url) for f in found if f.sha256]
            if name not in files and hashed:
                files[name] = hashed
                index_of[name] = report.index_of[name]
        return files, index_of


def _plain_http_warnings(indexes: IndexConfig) -> list[str]:
    """An http:// index is recorded as found, but `repro unpack` installs online from
    https indexes only (anyone on the path could choose the packages): say so now."""
    urls = [indexes.index_url, *indexes.extra_index_urls, *indexes.find_links]
    return [
        f"index {url} ({indexes.origins.get(url, 'pip/uv config')}) is plain http: "
        "`repro unpack` refuses it online; use its https URL, or pack --wheels all and "
        "unpack --offline"
        for url in urls
        if url is not None and url.lower().startswith("http://")
    ]
