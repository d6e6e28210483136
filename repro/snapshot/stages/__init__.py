"""The stages of `repro pack`, in the order `repro.snapshot.pack` runs them.

Each stage is a function from frozen inputs to a frozen result; the speed tricks stay
inside the stage that owns them (background jobs started by `probe`, the scan cache in
`scanning`, the vault wheels' digests taken as they are written in `locks`).

    options    PackOptions, PackResult, where the cache lives
    probe      the workspace's config and interpreter, the probe's facts, background jobs
    output     the bundle's name, version, compression and path
    vaulting   which wheels the bundle carries, and how each is made
    scanning   installed files against RECORD (scan cache), hand patches
    locks      pip-freeze.txt, requirements.lock, pylock.toml and vault.toml
    workspace  units, models, carried files and what was left out
    info       bundle.toml and REPRODUCE.md's facts
    members    every member, then the archive written in one pass
    report     env/pack-report.json and the PackResult
"""
