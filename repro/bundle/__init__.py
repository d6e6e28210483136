"""The bundle format: its layout, and one module per section with its dump and load."""
