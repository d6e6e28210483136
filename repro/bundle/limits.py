"""How much of a bundle a reader holds in memory, whatever the bundle.

A 6 MB bundle of highly compressed members once held 548 MiB. `repro inspect`, `diff`
and `sbom` (repro.verbs.view) keep the members they parse, each at most PARSED_LIMIT (a
larger one is an error naming it), and the members they only show (patch texts, units,
model and workspace files), each at most KEEP_LIMIT and at most SHOWN_BUDGET bytes of
each kind in all (patches, and the rest); the others are only hashed. The SBOM
(repro.bundle.sbom) reads no member larger than KEEP_LIMIT either, so that pack, which
has every member, makes the bytes `repro sbom` makes from the finished bundle.
"""

from __future__ import annotations

KEEP_LIMIT = 2 << 20  # a shown member larger than this is hashed but not kept
PARSED_LIMIT = 16 << 20
MANIFEST_LIMIT = 64 << 20  # about 600,000 lines
SHOWN_BUDGET = 32 << 20
