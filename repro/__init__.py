"""repro: pack a working GPU model-serving environment and rebuild it, verified."""

__version__ = "0.2.0"
