"""systemd units as systemd reads them: their lines, the command a service runs, the
names a unit carries, the target's paths rendered into them, the secrets drop-in."""
