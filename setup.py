"""The compiled part of increments (everything else is in pyproject.toml): the flat JSON-lines
decoder increments/native/_flatjson.c (plain C99, no dependencies but Python's headers). It is not
optional: a build that cannot compile it fails (pip install . / pip install -e . stop with the
compiler's error), and tests/sources/test_flat_json_native.py fails when it is missing."""
from setuptools import Extension, setup

setup(ext_modules=[Extension("increments.native._flatjson", ["increments/native/_flatjson.c"],
                             extra_compile_args=["-std=c99", "-Wall"])])
