"""Helpers of the tests, by what they make (CONTRIBUTING.md has the table)."""
