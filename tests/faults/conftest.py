"""Fixtures of the fault suite (helpers live in fault_testutil.py)."""
import os
import sys

sys.path.insert(0, os.path.dirname(__file__))

from fault_testutil import fault_env  # noqa: E402,F401
