"""The provider factory: a state store provider by name ("rocksdb" | "memory").

Its own module so that state.base (the interfaces and the version protocol) never imports the
providers that implement it: the providers import base, this module imports both. `import state`
stays light: state/__init__ resolves ``make_provider`` from here on first use (rocksdict loads then).
"""
from __future__ import annotations

from .base import StateStoreProvider
from .memory import MemoryStateStoreProvider
from .rocksdb_provider import RocksDBStateStoreProvider

PROVIDERS = ("rocksdb", "memory")


def make_provider(name: str, checkpoint, *, local_dir: str | None = None, **conf) -> StateStoreProvider:
    """``name`` is "rocksdb" or "memory"; ``checkpoint`` a Location or a path/URL string
    (``storage.location`` turns it into one; ``storage_options=`` in conf go with it);
    ``local_dir`` is the root of the local caches (RocksDB working copies, see storage.private_dir);
    the rest of conf goes to the provider's constructor."""
    if name == "memory":
        return MemoryStateStoreProvider(checkpoint, **conf)
    if name == "rocksdb":
        return RocksDBStateStoreProvider(checkpoint, local_dir=local_dir, **conf)
    raise ValueError(f"unknown state_store {name!r}: expected one of {', '.join(PROVIDERS)}")
