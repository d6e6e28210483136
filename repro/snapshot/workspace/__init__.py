"""What the bundle carries beside the environment: the workspace's discovery and
repro.toml template, its files, model references, systemd units (credentials taken
out), and what is left out and why."""
