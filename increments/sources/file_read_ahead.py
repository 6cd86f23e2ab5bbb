"""The file source's read-ahead (FileSource inherits FileReadAhead): only in the local runner
(enable_read_ahead), never in a runner that exits after one step.

- The files of the batch just planned and of the next batches are decoded in the background
  (sources/prefetch.py) while the current batch runs; an object's prefetched rows are used only if
  the object read had the size and etag its seen-files entry recorded. A batch of many JSON files
  is read in one scan instead (files.py), not file by file ahead.
- The next batch's seen-files entry is written ahead, while the current batch runs (an orphan
  entry, adopted by the next plan: see _write_entry_ahead).
- The consuming operator's pre-computation runs on the rows read ahead (prepare_rows_with).
- A local Parquet file's dictionary-encoded string columns are read ahead as dictionaries and
  decoded by a cast: the same table as the batch's own read, for less CPU
  (_decode_parquet_dictionary).

What it uses of FileSource: _log, _listed, _where, _decode, _reads_together, root(), auto_batch and
the attributes FileSource.__init__ sets for it (_read_ahead, _ahead_columns, _prepare,
_entry_pool, _entry_ahead, _known).
"""
from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from ..lazy import lazy_module
from ..redaction import logger as redacting_logger
from ..storage import ObjectInfo
from .file_formats import parquet_as_declared, scanned_fields
from .file_listing import within_bytes
from .prefetch import ReadAhead
from .seen_files import entry_key

pa = lazy_module("pyarrow")  # loaded at first use: increments/lazy.py
pq = lazy_module("pyarrow.parquet")

log = redacting_logger("increments.sources.files")
#: with max_files_per_trigger and a backlog, the files of this many next batches are decoded in the
#: background while the current batch runs (sources/prefetch.py); four rather than two absorb the
#: batches whose protocol takes longer than a decode (hourly-clicks JSON: 4-15% faster in A/B runs)
READ_AHEAD_BATCHES = 4
#: threads decoding ahead, one file each at a time: a file's reader is mostly one thread, so two
#: files at once use both cores as a one-shot multi-file scan would
READ_AHEAD_WORKERS = 2
#: ...as long as the next batches' files hold at most this many bytes (decoded data of batches
#: ahead is memory the current batch does not need); the first files that fit are read
READ_AHEAD_BYTES = 128 << 20
#: a Parquet file read ahead from this size on has its dictionary-encoded strings read as dictionaries
#: (_decode_parquet_dictionary): below, the second open of the file costs more than the cast saves
#: (hourly-clicks rows: 20k rows, 0.29 MB, break even; a 50-row file 0.24 against 0.15 ms of CPU)
DICTIONARY_READ_MIN_BYTES = 1 << 20


class FileReadAhead:
    """The read-ahead half of FileSource (module doc)."""

    def _upcoming(self, listed: list[ObjectInfo], m: int) -> list[ObjectInfo]:
        """The files of the next READ_AHEAD_BATCHES batches after this one's first `m` of `listed`,
        the first of them that fit in READ_AHEAD_BYTES."""
        return within_bytes(listed[m: m + READ_AHEAD_BATCHES * m], READ_AHEAD_BYTES)

    def _read_planned_ahead(self, entry: dict, upcoming: list[ObjectInfo], last: str, m: int | None) -> None:
        """After a plan wrote seen-files `entry`: overlap decoding its files (first) and the next
        batches' (`upcoming`, the names after `last`) with the work between plan and their read
        steps (sources/prefetch.py). A batch of many JSON files is read in one scan instead
        (FileSource._reads_together): not file by file ahead."""
        if not self._reads_together(len(entry["files"])):
            ahead = [o.name for o in upcoming if o.name > last]
            ahead = ahead if not self._reads_together(m) else []
            self._start_read_ahead([entry_key(f) for f in entry["files"]] + ahead,
                                   [f for f in entry["files"] if isinstance(f, dict)] + upcoming)

    def enable_read_ahead(self, columns: list[str] | None = None) -> None:
        """Decode planned and upcoming files in the background, for a query that reads `columns`
        (None: all) -- the same columns its read step will ask for, or the read-ahead is unused."""
        if self._read_ahead is None:
            self._read_ahead = ReadAhead(workers=READ_AHEAD_WORKERS, stat=self._fingerprint, expected=self._listed_as)
        self._ahead_columns = columns if self.reads_columns else None

    def _write_entry_ahead(self, n: int, files: list[ObjectInfo]) -> None:
        """The local runner (read-ahead on) with a fixed max_files_per_trigger and a backlog: write
        seen-files entry n -- the files the next plan takes from this listing -- on a background
        thread while batch n-1 runs, so that its durable write is off the batch's path. Safe by
        the seen-files recovery rule: an entry without offsets[N] is an orphan that the next plan
        adopts as it stands (seen_files.py), exactly as after a crash between the two writes."""
        if self._read_ahead is None or getattr(self, "auto_batch", None) is not None:
            return
        if self._entry_pool is None:
            self._entry_pool = ThreadPoolExecutor(1, thread_name_prefix="increments-seen-files")
        log_ = self._log
        self._entry_ahead = (n, self._entry_pool.submit(lambda: log_.write(n, files)))

    def _entry_written_ahead(self, n: int, files: list[ObjectInfo]) -> dict | None:
        """Entry n if _write_entry_ahead wrote (or adopted) it, durably, with exactly `files`;
        None: the plan writes it itself (create-only, adopting whatever is there)."""
        ahead, self._entry_ahead = self._entry_ahead, None
        if ahead is None or ahead[0] != n:
            return None
        try:
            entry = ahead[1].result()      # the write is durable (fsynced) before the plan goes on
        except Exception:  # noqa: BLE001 - the plan's own write adopts or fails naming the entry
            return None
        names = [entry_key(f) for f in entry["files"]]
        return entry if names == [o.name for o in files] else None

    def prepare_rows_with(self, prepare: Any) -> None:
        """Apply `prepare(table)` to the rows of every file decoded ahead, on the read-ahead
        thread (the local runner passes the consuming operator's own pre-computation, see
        WindowAggregateOp.prepare). A failing prepare only loses that head start."""
        self._prepare = prepare

    def _decode_ahead(self, key: str, columns: list[str] | None) -> pa.Table:
        table = None
        if self.format == "parquet":
            try:
                table = self._decode_parquet_dictionary(key, columns)
            except Exception:  # noqa: BLE001 - decoded as usual below: the batch raises there if it must
                log.debug("dictionary read of %s ahead failed", key, exc_info=True)
        if table is None:
            table = self._decode(key, columns)
        if self._prepare is not None and self.max_files_per_trigger == 1:   # a batch is this very table
            try:
                self._prepare(table)
            except Exception:  # noqa: BLE001 - the batch computes it again and raises there if it must
                log.debug("prepare of %s read ahead failed", key, exc_info=True)
        return table

    def _decode_parquet_dictionary(self, key: str, columns: list[str] | None) -> pa.Table | None:
        """The table file_formats.read_parquet gives for a local Parquet file, its string columns
        stored dictionary-encoded read as dictionaries and decoded by a cast: the same values
        (and one chunk per column, as read), at ~0.6x of the CPU of reading them as strings
        (Arrow's reader appends each string to a builder; the cast is one take). None when that
        does not apply (a remote object, no declared schema, no such column, a declared column
        missing, a file under DICTIONARY_READ_MIN_BYTES): the usual read decides, and raises."""
        loc, name = self._where(key)
        path = loc.local_path(name)
        schema = self._schema
        if path is None or schema is None or os.path.getsize(path) < DICTIONARY_READ_MIN_BYTES:
            return None
        target = schema.to_arrow()
        read = [f.name for f in scanned_fields(schema, columns)]
        with pq.ParquetFile(path) as pf:
            names = pf.schema_arrow.names
            if any(n not in names for n in schema.names):
                return None
            meta = pf.metadata
            stored = pf.schema_arrow
            at = {meta.schema.column(i).path: i for i in range(meta.num_columns)}    # leaf columns
            coded = [c for c in read if c in at and target.field(c).type == pa.string()
                     and (pa.types.is_string(stored.field(c).type) or pa.types.is_large_string(stored.field(c).type))
                     and meta.num_row_groups
                     and all(meta.row_group(g).column(at[c]).has_dictionary_page for g in range(meta.num_row_groups))]
        if not coded:
            return None
        with pq.ParquetFile(path, read_dictionary=coded, metadata=meta) as pf:
            rows = pf.read(columns=read)
        table = parquet_as_declared(rows, schema, columns)
        if any(table.column(c).num_chunks > 1 for c in coded):
            # a dictionary per row group: the strings decoded from them in one chunk, as read
            table = pa.Table.from_arrays([c.combine_chunks() if n in coded else c
                                          for n, c in zip(table.column_names, table.columns)], schema=table.schema)
        return table

    def close(self) -> None:
        if self._entry_pool is not None:
            self._entry_pool.shutdown(wait=True)
            self._entry_pool, self._entry_ahead = None, None
        if self._read_ahead is not None:
            self._read_ahead.close()
            self._read_ahead = None

    def _start_read_ahead(self, keys: list[str], infos: list[Any] = ()) -> None:
        if self._read_ahead is not None and keys:
            self._known = {(i["name"] if isinstance(i, dict) else i.name):
                           ((i["size"], i["etag"]) if isinstance(i, dict) else (i.size, i.etag)) for i in infos}
            cols = self._ahead_columns
            self._read_ahead.start(keys, cols, lambda f: self._decode_ahead(f, cols))

    def _fingerprint(self, key: str) -> Any:
        """What tells a file changed: (size, mtime) of a local file, the listing facts of an object."""
        loc, name = self._where(key)
        p = loc.local_path(name)
        if p is not None:
            try:
                st = os.stat(p)
            except OSError:
                return None
            return st.st_size, st.st_mtime_ns
        info = loc.head(name)
        return None if info is None else (info.size, info.etag)

    def _listed_as(self, key: str) -> Any:
        """The fingerprint a read-ahead result must have been read with: an object's size and etag
        as its listing recorded them (no request); a local file's current one."""
        known = self._known.get(key)
        if known is not None and not self.root().is_local:
            return known
        return self._fingerprint(key)
