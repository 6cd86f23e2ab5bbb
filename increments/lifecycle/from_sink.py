"""`increments migrate --backfill-from-sink`: the old query's Delta table is the backfill's input.

Why: the source no longer holds the whole history (Kafka retention expired, early input files
removed), but the old query's table does. The changed query then runs on the new checkpoint with its
source replaced by the old table, batch for batch, and continues from the source exactly where the
old query stopped.

Contract (what makes it sound, and what is refused). The old query's table must hold, for every
batch the old query committed, the rows that batch read from the source, unchanged in the columns
the changed query reads from its source (plan.scan_columns; all of the source's columns when it
reads them all): a bronze/pass-through query (source -> projection -> Delta, append mode) whose
new version changes the projection, parsing or filter downstream, or adds derived columns. Refused
(AnalysisException naming the query, the table and `--backfill earliest` as the way out):
* the old checkpoint has no committed batch, no conf.json, or names another sink than this table;
* the old query was stateful (aggregation, deduplication, join, ...): its table holds results,
  not the rows it read (in update/complete mode not even an append log of them);
* the changed query has more than one source, or another source than the old query;
* the old table lacks a column the changed query reads from its source, or holds it with another
  type;
* the old table is not an append log of the old query's batches up to its last committed batch L:
  a version that removed or rewrote rows (overwrite, delete, update, merge, an earlier switch-over;
  also after L: rows deleted from the table must not come back through the backfill; a compaction,
  dataChange=false, is fine while its old files are not vacuumed), a version up to L that added
  rows without the old query's app transaction (another writer), a deletion vector, a log entry
  that is gone (log cleanup), or an old batch whose rows are not in the table as its commit entry
  counted them (num_output_rows);
* the rows check fails: for the old query's last batches (up to SINK_CHECK_BATCHES with data) the
  source is read again at the old batch's offsets, and those rows (in the columns the changed query
  reads) must equal, as a multiset, the rows the table holds for that batch. A difference means the
  old query filtered or transformed its input, and a backfill from its table would lose or alter
  rows. When none of those batches' input is retained any more the check cannot run and migrate
  refuses, unless `sink_check=False` (CLI `--no-sink-check`): you then assert that the old query
  wrote its input rows unchanged. The check is a sample: a filter that dropped no row of those
  batches is not seen. (The source is opened on the old checkpoint for it and only read; a file
  source records there, as any read of it does, the facts of a file found changed since listed.)
The changed query itself may be stateful (an aggregation over the bronze rows): see below.

How (exactly-once): the new checkpoint's source directory (sources/0/: the file source's seen-files
entries, Kafka's initial.json and topic ids) starts as a copy of the old checkpoint's, and the
backfill source (SinkBackfillSource) uses the old query's own source offsets: each backfill batch
reads the table rows of one old batch k (the files its Delta commit added, found by the app
transaction (old query id, k)) and records old batch k's start and end offsets
(lifecycle/from_sink_source.py). Old batches with no
new data are skipped. All of this is fixed when migrate starts (the old log's last committed batch
L); an old query still running is followed afterwards by the source drains (migrate.py). So after the backfill the new checkpoint's log ends at exactly the offsets the old query
had committed (Kafka: per-partition offsets; files: the seen-files entry of the last files it read;
Delta source: the version and index), and the real source continues from there: the rows the old
query read are not read again, nothing after them is skipped. A redo of a backfill batch reads the
same commits (the table's versions up to L never change). A migrate interrupted during the backfill
continues where the new checkpoint's log stands. The new query's batch boundaries during the
backfill are the old query's, so a stateful changed query sees the same batches as the old query did.
"""
from __future__ import annotations

import dataclasses
import io
import json
import os
from typing import Any
from urllib.parse import unquote

import pyarrow as pa
import pyarrow.parquet as pq

from .. import storage
from ..checkpoint.log import open_log
from ..checkpoint.metadata import _read_conf, read_metadata
from ..errors import AnalysisException, DataLossError
from ..execution.runtime import start_conf
from ..options import writer_options
from ..sinks.delta import open_table

#: the rows check reads the source again for at most this many of the old query's last batches with data
SINK_CHECK_BATCHES = 3


def offset_key(offset: Any) -> str:
    """An offset as one comparable text (JSON, keys sorted)."""
    return json.dumps(offset, sort_keys=True, separators=(",", ":"), default=str)


def _norm(t: pa.DataType) -> pa.DataType:
    norm = {pa.large_string(): pa.string(), pa.string_view(): pa.string(), pa.large_binary(): pa.binary(),
            pa.binary_view(): pa.binary()}
    return norm.get(t, t)


@dataclasses.dataclass
class OldBatch:
    batch_id: int
    start: Any
    end: Any
    output_rows: int


@dataclasses.dataclass
class SinkBackfill:
    """What the backfill reads: the old query's batches 0..L and, per batch, the add actions of
    the Delta commit of the old table that carries its app transaction."""
    query: str
    table: str                      # the old table's path (shown redacted)
    storage_options: dict[str, Any]
    old_id: str
    batches: list[OldBatch]
    adds: dict[int, list[dict]]     # old batch id -> data files its commit added
    versions: dict[int, int]        # old batch id -> the table version of that commit
    columns: list[str]              # the source columns the changed query reads
    source_schema: pa.Schema
    old_checkpoint: Any             # Location
    positions: list[Any] = dataclasses.field(default_factory=list)     # offsets: initial, then distinct ends
    at: dict[str, int] = dataclasses.field(default_factory=dict)        # offset_key(offset) -> position
    batches_at: dict[int, list[int]] = dataclasses.field(default_factory=dict)   # position -> old batch ids
    check_source: Any = None        # the changed query's real source (a for_query copy), for check_rows

    def __post_init__(self) -> None:
        self.positions = [self.batches[0].start]
        self.at = {offset_key(self.batches[0].start): 0}
        for b in self.batches:
            k = offset_key(b.end)
            if k not in self.at:
                self.at[k] = len(self.positions)
                self.positions.append(b.end)
            self.batches_at.setdefault(self.at[k], []).append(b.batch_id)

    @property
    def last(self) -> Any:
        return self.positions[-1]

    def refuse(self, why: str) -> AnalysisException:
        return refusal(self.query, self.table, why)

    def read_batches(self, ids: list[int]) -> pa.Table:
        """The table rows of old batches `ids`, as the source's schema: the columns the changed query
        reads from the old table (cast to the source's types), every other column null. An old
        batch whose rows in the table differ in number from its commit entry's num_output_rows
        fails (DataLossError naming the batch and version)."""
        loc = storage.location(self.table, self.storage_options)
        by_id = {b.batch_id: b for b in self.batches}
        pieces = []
        for i in ids:
            got = [_read_add(loc, a, self.storage_options) for a in self.adds.get(i, [])]
            n = sum(t.num_rows for t in got)
            if n != by_id[i].output_rows:
                raise DataLossError(
                    f"query {self.query!r}, backfill from the table {self.table}: the old query's batch {i} wrote "
                    f"{by_id[i].output_rows} rows (its commit entry), but the table's version "
                    f"{self.versions.get(i, '(none)')} holds {n} rows of it; the table is not the old query's output. "
                    "Use --backfill earliest")
            pieces += got
        cols = []
        rows = sum(t.num_rows for t in pieces)
        for f in self.source_schema:
            if f.name in self.columns and pieces:      # (a file older than the column holds nulls for it)
                cols.append(pa.chunked_array([t.column(f.name).cast(f.type) if f.name in t.column_names
                                              else pa.nulls(t.num_rows, f.type) for t in pieces], f.type))
            else:
                cols.append(pa.nulls(rows, f.type))
        return pa.Table.from_arrays(cols, schema=self.source_schema)


def refusal(query: str, table: str, why: str) -> AnalysisException:
    return AnalysisException(
        f"increments migrate --backfill-from-sink: query {query!r}, table {table}: {why}. The old table cannot "
        "stand in for the source here; use --backfill earliest (the sources' retained data) instead")


def _read_add(loc: Any, add: dict, opts: dict[str, Any]) -> pa.Table:
    rel = unquote(add["path"])
    if "://" in rel or os.path.isabs(rel):
        parent, _, name = rel.rpartition("/")
        loc = storage.location(parent or "/", opts)
    else:
        name = rel
    try:
        local = loc.local_path(name)
        t = pq.read_table(local) if local is not None else pq.read_table(io.BytesIO(loc.read_bytes(name)))
    except FileNotFoundError:
        raise DataLossError(f"the old table's data file {loc.join(name)} is gone (vacuumed after a compaction?); "
                            "use --backfill earliest") from None
    for k, v in (add.get("partitionValues") or {}).items():
        if k not in t.column_names:
            t = t.append_column(k, pa.array([v] * t.num_rows, pa.string()))
    return t


def _log_entry(loc: Any, version: int) -> list[dict]:
    name = f"_delta_log/{version:020d}.json"
    try:
        text = loc.read_bytes(name).decode()
    except FileNotFoundError:
        return None  # type: ignore[return-value]
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def _table_history(query: str, table: str, loc: Any, old_id: str, last: int, latest: int
                   ) -> tuple[dict[int, list[dict]], dict[int, int]]:
    """Old batch id -> (its commit's data files, its version), reading the table's log from version 0
    up to the commit of the old query's batch `last`, and on to `latest` for removals (rows deleted
    from the table later must not come back through the backfill); refusals per the module doc."""
    adds: dict[int, list[dict]] = {}
    versions: dict[int, int] = {}
    done = False                    # past the commit of batch `last`: only removals matter (rows deleted later)
    for v in range(latest + 1):
        actions = _log_entry(loc, v)
        if actions is None:
            raise refusal(query, table, f"the table's log entry of version {v} is gone (log cleanup), so the old "
                                        "query's batches cannot be told apart in it")
        txn = [a["txn"] for a in actions if "txn" in a and a["txn"].get("appId") == old_id]
        data = [a["add"] for a in actions if "add" in a and a["add"].get("dataChange", True)]
        removes = [a for a in actions if "remove" in a and a["remove"].get("dataChange", True)]
        if removes:
            raise refusal(query, table, f"version {v} removed or rewrote {len(removes)} data files (overwrite, "
                                        "delete, update, merge, complete mode or an earlier switch-over): the "
                                        "table is not an append log of the rows the old query read")
        if any(a.get("deletionVector") for a in data):
            raise refusal(query, table, f"version {v} has files with deletion vectors: rows were deleted")
        if done:
            continue
        if not txn:
            if data:
                raise refusal(query, table, f"version {v} added {len(data)} data files without the old query's app "
                                            f"transaction (query id {old_id}): rows another writer added would "
                                            "be read as the old query's input")
            continue
        batch = int(txn[0]["version"])
        if batch > last:
            done = True
            continue
        adds.setdefault(batch, []).extend(data)
        versions[batch] = v
        done = batch == last
    return adds, versions


def plan_backfill(writer: Any, sink_path: str, opts: dict[str, Any], query: str) -> SinkBackfill:
    """Check the contract (module doc) and gather what the backfill reads; writes nothing."""
    from .migrate import _sink_fingerprint  # noqa: PLC0415 - cycle: increments.lifecycle.migrate -> increments.lifecycle.from_sink
    s = writer.settings
    shown = storage.redact_url(sink_path)
    o = writer_options(s, required=False)
    old = s.checkpoint or o["checkpoint_location"]
    if not old:
        raise refusal(query, shown, "the query names no (old) checkpoint_location, so the old query's offsets "
                                    "are unknown")
    old_loc = storage.location(old, opts)
    meta = read_metadata(old_loc)
    conf = _read_conf(old_loc) if meta is not None else None
    if meta is None or not conf:
        raise refusal(query, shown, f"the old checkpoint {old_loc.url} has no metadata.json/conf.json")
    old_plan = conf.get("plan") or {}
    if old_plan.get("stateful_operators"):
        raise refusal(query, shown, f"the old query is stateful ({', '.join(old_plan['stateful_operators'])}): its "
                                    "table holds the results of that operator, not the rows it read (in update or "
                                    "complete mode not even an append log of them)")
    if old_plan.get("sink") != _sink_fingerprint(writer, sink_path, opts):
        raise refusal(query, shown, f"the old checkpoint {old_loc.url} belongs to a query writing "
                                    f"{old_plan.get('sink')}, not this table")
    plan, _sink, _conf = start_conf(writer.frame, s, opts)
    if len(plan.sources) != 1:
        raise refusal(query, shown, f"the changed query reads {len(plan.sources)} sources; the old table's rows "
                                    "cannot be told apart by source")
    src = plan.sources[0]
    if list(old_plan.get("sources") or []) != [src.description]:
        raise refusal(query, shown, f"the changed query reads {src.description}, the old query read "
                                    f"{old_plan.get('sources')}: the old query's offsets do not apply")
    schema = src.schema()
    columns = list(plan.scan_columns.get(0) or schema.names)
    dt = open_table(sink_path, opts or None)
    if dt is None:
        raise refusal(query, shown, "there is no Delta table there")
    table_schema = pa.schema(dt.schema().to_arrow())
    bad = []
    for c in columns:
        if c not in table_schema.names:
            bad.append(f"column {c!r} (read by the changed query from its source) is not in the table")
        elif _norm(table_schema.field(c).type) != _norm(schema.field(c).type):
            bad.append(f"column {c!r} is {table_schema.field(c).type} in the table but {schema.field(c).type} "
                       "in the source")
    if bad:
        raise refusal(query, shown, "; ".join(bad))
    log = open_log(o["log_url"], old_loc, meta["id"], s.query_name or meta["id"])
    last = log.latest_commit()
    if last is None:
        raise refusal(query, shown, f"the old checkpoint {old_loc.url} has no committed batch")
    batches = []
    newest = log.latest_offsets()         # (an uncommitted offsets[L + 1] of a crashed old runner counts too)
    entries = {o.batch_id: (o, c) for o, c in log.history(limit=max(newest.batch_id if newest else 0, last.batch_id)
                                                            + 1)}      # two queries in all
    for b in range(last.batch_id + 1):
        o, c = entries.get(b, (None, None))
        if o is None or c is None or "0" not in o.end:
            raise refusal(query, shown, f"the old checkpoint's log lacks offsets or commit of batch {b}")
        batches.append(OldBatch(b, o.start["0"], o.end["0"], int(c.num_output_rows or 0)))
    adds, versions = _table_history(query, shown, storage.location(sink_path, opts), meta["id"], last.batch_id,
                                    dt.version())
    missing = [b.batch_id for b in batches if b.output_rows and b.batch_id not in adds]
    if missing:
        raise refusal(query, shown, f"the old query's batches {missing[:10]} wrote rows (their commit entries) "
                                    "that no version of the table holds under its app transaction")
    bf = SinkBackfill(query, shown, opts, meta["id"], batches, adds, versions, columns, schema, old_loc)
    if len(bf.positions) < 2:
        raise refusal(query, shown, "the old query's batches read no new data from the source: there is nothing to "
                                    "backfill from its table")
    bf.check_source = src          # the real source (a for_query copy): check_rows reads it
    return bf


def check_rows(bf: SinkBackfill, src: Any, storage_options: dict[str, Any]) -> tuple[int, int]:
    """The rows check of the module doc: (batches checked, rows compared). `src` is a for_query copy
    of the changed query's source; it is opened on the old checkpoint (its files there describe the
    old offsets) and only read."""
    src.open(bf.old_checkpoint, 0, bf.query, storage_options)
    checked = rows = 0
    gone: list[str] = []
    try:
        for b in reversed(bf.batches):
            if checked >= SINK_CHECK_BATCHES:
                break
            if not b.output_rows or not src.has_new_data(b.start, b.end):
                continue
            try:
                got = (src.read(b.start, b.end, columns=bf.columns) if src.reads_columns
                       else src.read(b.start, b.end))
            except (DataLossError, FileNotFoundError) as e:
                gone.append(f"batch {b.batch_id}: {e}")
                continue
            metrics = getattr(src, "read_metrics", None) or {}
            if metrics.get("skipped_files") or metrics.get("offsets_skipped"):
                gone.append(f"batch {b.batch_id}: part of its input is gone")
                continue
            sink_rows = _rows(bf.read_batches([b.batch_id]), bf.columns)
            source_rows = _rows(got, bf.columns)
            if sink_rows != source_rows:
                only_src = len(source_rows) - len(sink_rows)
                what = (f"the source holds {len(source_rows)} rows for it, the table {len(sink_rows)}"
                        + (" (the old query filtered rows out)" if only_src > 0 else ""))
                if only_src == 0:
                    what = "the table's rows differ from the source's in the columns the changed query reads " \
                           "(the old query transformed them)"
                raise bf.refuse(f"rows check: the old query's batch {b.batch_id} (offsets {offset_key(b.start)} -> "
                                f"{offset_key(b.end)}, table version {bf.versions.get(b.batch_id)}): {what}; a backfill "
                                "from the table would lose or alter the changed query's input")
            checked += 1
            rows += len(source_rows)
    finally:
        src.close()
    if not checked:
        raise bf.refuse("rows check: the source no longer holds the input of any of the old query's last batches "
                        f"({'; '.join(gone[:3]) or 'none with rows'}), so it cannot be checked that the table holds "
                        "that input unchanged. If you know the old query wrote its input rows unchanged in the columns "
                        f"{bf.columns}, run again with --no-sink-check (sink_check=False)")
    return checked, rows


def _rows(t: pa.Table, columns: list[str]) -> list[tuple]:
    t = t.select(columns)
    return sorted((tuple(r[c] for c in columns) for r in t.to_pylist()), key=repr)
