"""Pack side: everything that reads a source workspace and environment."""
