"""Read-only verbs over bundles: check, inspection, diff, the demo and the SBOM."""
