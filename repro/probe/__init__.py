"""Scripts run inside a target interpreter (stdlib only, Python >= 3.8); never imported by repro."""
