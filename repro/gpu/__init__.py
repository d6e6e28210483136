"""GPU facts: architecture rules, cubin reading, and what nvidia-smi says of this box."""
