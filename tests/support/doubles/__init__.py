"""Test doubles, named as such: stand-ins for what cannot run on the test machine."""
