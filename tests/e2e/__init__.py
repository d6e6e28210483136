"""End-to-end suites: fresh-box round trips, hostile batteries, kills, concurrency."""
