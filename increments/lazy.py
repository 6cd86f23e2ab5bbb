"""Heavy libraries (pyarrow, DuckDB, ...) imported when first used, not when the module naming them is.

    from ..lazy import lazy_module
    pa = lazy_module("pyarrow")          # instead of `import pyarrow as pa`

The Dagster code location imports the query modules (and so the API, the sources and the sinks
they build) to make its definitions; every launched run imports it again before its first op.
pyarrow alone costs more than half of that import; with the names bound lazily it loads when a
batch step first touches a table. `pa` is a module object standing in for pyarrow: its first
attribute access imports pyarrow and copies pyarrow's namespace into it, so later lookups
(`pa.Table`, `isinstance(x, pa.Table)`) are plain module attribute reads. Nothing may touch it at
import time (module constants built from it go in functions): tests/test_import_boundaries.py
checks that importing the definitions leaves these libraries out.
"""
from __future__ import annotations

import importlib
import types


class _LazyModule(types.ModuleType):
    def __getattr__(self, attr: str):
        name = self.__dict__["_lazy_target"]
        module = importlib.import_module(name)
        self.__dict__.update(module.__dict__)
        return getattr(module, attr)

    def __repr__(self) -> str:
        return f"<lazy module {self.__dict__['_lazy_target']!r}>"


def lazy_module(name: str) -> types.ModuleType:
    """A stand-in for module `name` that imports it at its first attribute access."""
    m = _LazyModule(name)
    m.__dict__["_lazy_target"] = name
    return m
