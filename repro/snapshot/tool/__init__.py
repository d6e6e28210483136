"""repro's own wheels (and its dependencies') for a bundle's setup_env.sh, for the
packing Python or the bundle's."""
