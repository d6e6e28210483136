"""Changes made as one transaction: atomic file replacement, the target's lock, and the
patch set applied all or nothing."""
