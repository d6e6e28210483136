"""Pack side: environment, lock and wheel vault, patch discovery, services, models, files."""
