"""Fixtures of the fault suite (helpers live in faultkit.py)."""
import os
import sys

sys.path.insert(0, os.path.dirname(__file__))

from faultkit import fault_env  # noqa: E402,F401
