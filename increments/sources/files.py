"""read_stream.files(path, format, schema, max_files_per_trigger=None).

Files under `path` (a directory, listed without recursion, or a glob) are taken in name order,
each once; names starting with '.' or '_' are ignored (temporary and metadata files). The
offset is the seen-files log entry number (see checkpoint/seen_files.py). A malformed file fails
the batch naming the file and line; a file deleted after it was planned fails with DataLossError
unless fail_on_data_loss=False, which skips it, counts it and reports it in progress.
"""
from __future__ import annotations

import glob
import logging
import os
from typing import Any

import pyarrow as pa

from ..checkpoint.seen_files import SeenFilesLog
from ..errors import DataLossError, MalformedInputError
from ..types import parse_schema
from . import file_formats
from .base import Source
from .prefetch import ReadAhead

log = logging.getLogger("increments.sources.files")
FORMATS = ("json", "csv", "parquet")
#: with max_files_per_trigger and a backlog, the files of this many next batches are decoded in the
#: background while the current batch runs (sources/prefetch.py); a file's reader is mostly one
#: thread, so two files at once use both cores as a one-shot multi-file scan would
READ_AHEAD_BATCHES = 2
#: ...as long as the next batches' files hold at most this many bytes on disk (decoded data of
#: batches ahead is memory the current batch does not need); the first files that fit are read
READ_AHEAD_BYTES = 128 << 20


class FileSource(Source):
    _per_query = {"_log": None, "_target": None, "read_metrics": {}, "_read_ahead": None,
                  "_ahead_columns": None}

    def __init__(self, path: str, format: str = "json", schema: Any = None, max_files_per_trigger: int | None = None,
                 fail_on_data_loss: bool = True, header: bool = False, delimiter: str = ","):
        fmt = format.lower().replace("jsonl", "json").replace("ndjson", "json")
        if fmt not in FORMATS:
            raise ValueError(f"read_stream.files: format {format!r} is not one of {FORMATS}")
        if schema is None and fmt != "parquet":
            raise ValueError(f"read_stream.files({path!r}): a schema is required for format {fmt!r} "
                             "(e.g. schema=\"user_id STRING, event_time TIMESTAMP\")")
        if max_files_per_trigger is not None and max_files_per_trigger < 1:
            raise ValueError("max_files_per_trigger must be >= 1")
        self.path = path
        self.format = fmt
        self._schema = parse_schema(schema) if schema is not None else None
        self.max_files_per_trigger = max_files_per_trigger
        self.fail_on_data_loss = fail_on_data_loss
        self.header = header
        self.delimiter = delimiter
        self._log: SeenFilesLog | None = None
        self._target: set[str] | None = None
        self.read_metrics: dict[str, Any] = {}
        self._read_ahead: ReadAhead | None = None  # set by enable_read_ahead (the local runner)
        self._ahead_columns: list[str] | None = None

    @property
    def description(self) -> str:
        return f"FileStreamSource[{self.path}]"

    def schema(self) -> pa.Schema:
        if self._schema is None:
            first = self._list()
            if not first:
                raise ValueError(f"read_stream.files({self.path!r}, 'parquet'): no schema given and no file to infer "
                                 "it from; pass schema=")
            import pyarrow.parquet as pq
            self._schema = parse_schema(pq.read_schema(first[0]))
        return self._schema.to_arrow()

    def open(self, checkpoint_dir: str, index: int, query_name: str) -> None:
        super().open(checkpoint_dir, index, query_name)
        self._log = SeenFilesLog(os.path.join(checkpoint_dir, "sources", str(index)))

    def _list(self) -> list[str]:
        if any(ch in self.path for ch in "*?["):
            names = glob.glob(self.path)
        elif os.path.isdir(self.path):
            names = [e.path for e in os.scandir(self.path) if e.is_file()]
        else:
            names = []
        names = [os.path.abspath(n) for n in names if not os.path.basename(n).startswith((".", "_"))]
        return sorted(names, key=os.path.basename)

    def initial_offset(self) -> int:
        return -1

    def latest_offset(self, start: int, limited: bool = True) -> int:
        assert self._log is not None
        seen = self._log.seen_upto(start)
        new = [f for f in self._list() if f not in seen]
        if self._target is not None:
            new = [f for f in new if f in self._target]
        upcoming: list[str] = []        # the files of the next batches, in order
        if limited and self.max_files_per_trigger:
            m = self.max_files_per_trigger
            upcoming = _within_bytes(new[m: m + READ_AHEAD_BATCHES * m], READ_AHEAD_BYTES)
            new = new[:m]
        if not new:
            return start
        self._log.write(start + 1, new)
        # overlap decoding this batch's files (first) and the next batches' with the work between
        # plan and their read steps (sources/prefetch.py)
        self._start_read_ahead(new + upcoming)
        return start + 1

    def prepare_available_now(self) -> None:
        self._target = set(self._list())

    def available_now_target(self) -> Any:
        return sorted(self._target) if self._target is not None else None

    def set_available_now_target(self, target: Any) -> None:
        self._target = set(target) if target is not None else None

    def files_for(self, start: int, end: int) -> list[str]:
        assert self._log is not None
        return self._log.files_between(start, end)

    @property
    def reads_columns(self) -> bool:
        """JSON and Parquet files can be read for a subset of the columns (read(..., columns=))."""
        return self.format in ("json", "parquet")

    def read(self, start: int, end: int, columns: list[str] | None = None) -> pa.Table:
        """The rows of the files of batches (start, end], in name order. With `columns` (JSON and
        Parquet) only those columns are decoded and every other column of the schema is null, as
        Spark's scan reads only the columns a query uses (a bad value in an unread column is not
        seen); a malformed line or file fails the batch either way."""
        files = self.files_for(start, end)
        tables, skipped = [], []
        for f in files:
            if not os.path.exists(f):
                if self.fail_on_data_loss:
                    raise DataLossError(self.fail(
                        f"file {f} was listed for this batch but is gone. Restore it, or set "
                        "fail_on_data_loss=False to skip missing files (they are counted and reported)."))
                log.warning("%s", self.fail(f"skipping missing file {f} (fail_on_data_loss=False)"))
                skipped.append(f)
                continue
            tables.append(self._read_one(f, columns if self.reads_columns else None))
        self.read_metrics = {"files": len(files), "skipped_files": skipped}
        if not tables:
            return self.schema().empty_table()
        return pa.concat_tables(tables)

    def enable_read_ahead(self, columns: list[str] | None = None) -> None:
        """Decode planned and upcoming files in the background, for a query that reads `columns`
        (None: all) -- the same columns its read step will ask for, or the read-ahead is unused."""
        if self._read_ahead is None:
            self._read_ahead = ReadAhead(workers=READ_AHEAD_BATCHES)
        self._ahead_columns = columns if self.reads_columns else None

    def close(self) -> None:
        if self._read_ahead is not None:
            self._read_ahead.close()
            self._read_ahead = None

    def _start_read_ahead(self, paths: list[str]) -> None:
        if self._read_ahead is not None and paths:
            cols = self._ahead_columns
            self._read_ahead.start(paths, cols, lambda f: self._decode(f, cols))

    def _read_one(self, f: str, columns: list[str] | None = None) -> pa.Table:
        ahead = self._read_ahead.take(f, columns) if self._read_ahead is not None else None
        if ahead is not None:
            return ahead
        return self._decode(f, columns)

    def _decode(self, f: str, columns: list[str] | None = None) -> pa.Table:
        try:
            if self.format == "json":
                return file_formats.read_json_lines(f, self._schema, columns)
            if self.format == "csv":
                return file_formats.read_csv(f, self._schema, self.header, self.delimiter)
            return file_formats.read_parquet(f, self._schema, columns)
        except MalformedInputError as e:
            raise MalformedInputError(self.fail(str(e) + ". Fix or remove the file; nothing of it was processed.")) from e

    def backlog(self, end: int) -> dict[str, Any] | None:
        if self._log is None:
            return None
        seen = self._log.seen_upto(end)
        return {"files_pending": sum(1 for f in self._list() if f not in seen)}


def _within_bytes(paths: list[str], budget: int) -> list[str]:
    """The leading paths whose sizes add up to at most `budget` bytes."""
    out, total = [], 0
    for p in paths:
        try:
            total += os.path.getsize(p)
        except OSError:
            break
        if total > budget:
            break
        out.append(p)
    return out
