"""Rung scripts: run by the *target* interpreter, never imported by the tool.

Each script uses only the standard library and the library it checks, prints
whatever it likes, and ends with one line ``@@repro-rung-result@@ {json}``.
They must run on any Python >= 3.8.
"""
