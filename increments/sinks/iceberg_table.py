"""Apache Iceberg tables through pyiceberg: catalogs, identifiers, and the few pyiceberg internals
the Iceberg sink, source and maintenance need, all here behind one version guard.

Catalog: `catalog={...}` is a dict of pyiceberg catalog properties (https://py.iceberg.apache.org/
configuration/), plus `name` (the catalog's name, default "increments"). A SQL catalog
({"type": "sql", "uri": <SQLAlchemy URL>, "warehouse": <file:// or s3:// URL>}) is the one the
tests run on PostgreSQL and SQLite. For the sink, a dict without "uri" (and of type sql, or
without type) uses the query's own log database (the PostgreSQL of log_url, or the SQLite file in
the checkpoint). The storage_options (delta-rs' names: AWS_ENDPOINT_URL, AWS_ACCESS_KEY_ID, ...),
else the same environment variables, fill pyiceberg's s3.* properties the dict leaves unset.

pyiceberg internals (tested with pyiceberg 0.12; another minor version is refused by `_guard` with
what to do): `write_files` (pyiceberg.io.pyarrow._dataframe_to_data_files: Parquet data files for a
snapshot the caller builds), `replace_files` (a REPLACE snapshot: compaction, rows unchanged,
which streaming readers skip), `MarkerUnchanged` (a commit requirement validated by the catalog at
commit time; pyiceberg's own commit retry keeps it, so a concurrent writer of the same query id
fails the commit instead of being retried on top of it).
"""
from __future__ import annotations

import os
import uuid
from typing import Any

import pyarrow as pa
import pyiceberg
from pyiceberg.catalog import load_catalog as _load
from pyiceberg.exceptions import CommitFailedException
from pyiceberg.io.pyarrow import _dataframe_to_data_files
from pyiceberg.table.snapshots import Operation, Summary
from pyiceberg.table.update import ValidatableTableRequirement
from pyiceberg.table.update.snapshot import _OverwriteFiles

from ..pg_driver import psycopg_url

TESTED_MINOR = "0.12"
MARKER_PREFIX = "increments.last-batch-id."
SUMMARY_QUERY, SUMMARY_BATCH = "increments.query-id", "increments.batch-id"

_S3_FROM_STORAGE = {"aws_endpoint_url": "s3.endpoint", "aws_endpoint": "s3.endpoint",
                    "aws_access_key_id": "s3.access-key-id", "aws_secret_access_key": "s3.secret-access-key",
                    "aws_session_token": "s3.session-token", "aws_region": "s3.region"}
_catalogs: dict[tuple, Any] = {}


def _guard() -> None:
    if not str(pyiceberg.__version__).startswith(TESTED_MINOR + "."):
        raise RuntimeError(f"increments' Iceberg support uses pyiceberg internals tested with pyiceberg {TESTED_MINOR}.x; "
                           f"pyiceberg {pyiceberg.__version__} is installed: install pyiceberg~={TESTED_MINOR}.0")


def catalog_properties(catalog: dict[str, Any] | None, default_uri: str | None = None,
                       storage_options: dict[str, Any] | None = None) -> dict[str, str]:
    """The pyiceberg properties of `catalog` (module doc): a default uri, s3.* from storage_options."""
    props = {str(k): v for k, v in (catalog or {}).items()}
    kind = str(props.get("type") or "").lower()
    if "uri" not in props and kind in ("", "sql") and default_uri:
        props["uri"] = default_uri
        props["type"] = "sql"
    if "uri" in props and not kind and str(props["uri"]).split(":", 1)[0].split("+")[0] in ("sqlite", "postgresql", "postgres"):
        props["type"] = "sql"
    if "uri" in props and str(props.get("type")).lower() == "sql":
        props["uri"] = psycopg_url(str(props["uri"]))     # postgresql:// is psycopg 3's (increments/pg_driver.py)
    given = {str(k).lower(): v for k, v in (storage_options or {}).items()}
    for k, target in _S3_FROM_STORAGE.items():       # the sink's/query's storage_options, then the environment
        v = given.get(k) or os.environ.get(k.upper())
        if v and target not in props:
            props[target] = v
    return {k: (v if isinstance(v, str) else str(v)) for k, v in props.items()}


def load_catalog(props: dict[str, str], where: str):
    """The pyiceberg catalog of these properties (one per process and properties)."""
    props = dict(props)
    name = props.pop("name", "increments")
    key = (name, tuple(sorted(props.items())))
    if key not in _catalogs:
        if not props.get("uri") and not props.get("type"):
            raise ValueError(f"{where}: the catalog needs at least 'uri' (and 'type'): e.g. catalog={{'type': 'sql', "
                             "'uri': 'postgresql+psycopg://host/db', 'warehouse': 's3://bucket/warehouse'}")
        _catalogs[key] = _load(name, **props)
    return _catalogs[key]


def identifier(name: str, where: str) -> tuple[tuple[str, ...], str]:
    """"namespace.table" (or "a.b.table") -> (namespace parts, table)."""
    parts = [p for p in str(name or "").split(".") if p]
    if len(parts) < 2:
        raise ValueError(f"{where}: {name!r} is not 'namespace.table'")
    return tuple(parts[:-1]), parts[-1]


def snapshot_summary(snapshot: Any) -> dict[str, str]:
    s = snapshot.summary if snapshot is not None else None
    return {} if s is None else {k: v for k, v in s.additional_properties.items()} | (
        {"operation": s.operation.value} if s.operation is not None else {})


def arrow_schema(table: Any) -> pa.Schema:
    """The table's schema as Arrow, with the engine's types (string, not large_string)."""
    return pa.schema([pa.field(f.name, _small(f.type), f.nullable) for f in table.schema().as_arrow()])


def _small(t: pa.DataType) -> pa.DataType:
    if pa.types.is_large_string(t):
        return pa.string()
    if pa.types.is_large_binary(t):
        return pa.binary()
    if pa.types.is_large_list(t):
        return pa.list_(_small(t.value_type))
    if pa.types.is_struct(t):
        return pa.struct([pa.field(f.name, _small(f.type), f.nullable) for f in t])
    if pa.types.is_map(t):
        return pa.map_(_small(t.key_type), _small(t.item_type))
    return t


def write_files(tx: Any, table: Any, df: pa.Table) -> list[Any]:
    """Parquet data files of `df` for a snapshot built in `tx` (not yet part of the table)."""
    _guard()
    if df.num_rows == 0:
        return []
    return list(_dataframe_to_data_files(table_metadata=tx.table_metadata, write_uuid=uuid.uuid4(), df=df,
                                         io=table.io))


def replace_files(tx: Any, table: Any, properties: dict[str, str]):
    """A snapshot producer (context manager) whose snapshot's operation is REPLACE: files deleted
    and added with the same rows (compaction)."""
    _guard()

    class _ReplaceFiles(_OverwriteFiles):
        def _summary(self, snapshot_properties: dict[str, str] = {}) -> Summary:  # noqa: B006 - as the base
            s = super()._summary(snapshot_properties)       # computed as an overwrite (the same totals)
            return Summary(Operation.REPLACE, **s.additional_properties)
    return _ReplaceFiles(operation=Operation.OVERWRITE, transaction=tx, io=table.io, snapshot_properties=properties)


def marker_requirement(query_id: str, expected: str | None):
    """A commit requirement: the table's marker property of `query_id` is still `expected`."""
    _guard()

    class MarkerUnchanged(ValidatableTableRequirement):
        type: str = "assert-increments-marker"
        key: str
        value: str | None = None

        def validate(self, base_metadata: Any) -> None:
            found = None if base_metadata is None else base_metadata.properties.get(self.key)
            if found != self.value:
                raise CommitFailedException(f"Requirement failed: {self.key} is {found!r}, expected {self.value!r} "
                                            "(another writer of the same query committed a batch)")
    return MarkerUnchanged(key=MARKER_PREFIX + query_id, value=expected)


def add_requirement(tx: Any, requirement: Any) -> None:
    """Attach a requirement to a pyiceberg Transaction (validated now and by the catalog's commit)."""
    tx._stage((), (requirement,))
