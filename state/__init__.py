"""Versioned state store: a store per (operator, partition), two providers (``rocksdb``,
``memory``) behind one interface, order-preserving key encoding and the state reader.
See state.base for the version protocol and recovery rules."""
from .base import StateMetrics, StateStore, StateStoreError, StateStoreProvider
from .encoding import decode_key, decode_value, encode_key, encode_prefix, encode_value, prefix_end
from .reader import read_state, state_view
from .schema import read_state_schema, write_state_schema

__all__ = ["StateStore", "StateStoreProvider", "StateMetrics", "StateStoreError", "make_provider",
           "read_state", "state_view", "encode_key", "decode_key", "encode_prefix", "prefix_end",
           "encode_value", "decode_value", "write_state_schema", "read_state_schema"]


def __getattr__(name: str):
    """``state.make_provider`` / ``state.PROVIDERS`` load the providers (and rocksdict) on first use."""
    if name in ("make_provider", "PROVIDERS"):
        from . import providers  # noqa: PLC0415 - the providers load rocksdict: kept off `import state`
        return getattr(providers, name)
    raise AttributeError(f"module 'state' has no attribute {name!r}")
