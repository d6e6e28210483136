"""Pack side: environment facts, pinned stack, patch discovery."""
