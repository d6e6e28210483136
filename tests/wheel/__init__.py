"""Tests of repro.wheel, one module each: tests/wheel/test_<module>.py."""
