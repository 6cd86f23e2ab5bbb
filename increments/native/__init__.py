"""Compiled helpers of increments (built by setup.py with the package; see _flatjson.c)."""
