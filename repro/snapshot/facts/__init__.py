"""Facts of the source environment, each read from disk or by the probe run in its own
interpreter: the probe's environment facts, pip freeze and the pins, installed
distributions, their indexes and what the indexes serve, unmet requirements, the key
modules' files."""
