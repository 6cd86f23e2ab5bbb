"""read_stream.files(path, format, schema, max_files_per_trigger=None, storage_options=None).

`path` is a directory (its files, without recursion) or a glob (``in/2024-*/*.json``: the
directory before the first wildcard is listed recursively and each name matched segment by
segment, '*' never crossing a '/'), on the local disk (a path or ``file://``) or on an object
store (``s3://``, ``gs://``, ``az://``, ``abfss://``; see increments.storage). Unknown schemes are
refused when the source is made. Credentials: the cloud's environment, the query's
``storage_options`` option, and this source's own ``storage_options=`` (which wins).
Names (relative to the listed directory) with a segment starting with '.' or '_' are ignored
(temporary and metadata files); sub-directories are not files.

Which files a batch takes (the name-order rule): files are taken in name (key) order, each once.
The offset is the seen-files log entry number (sources/seen_files.py); entry n records its files
and the last name. The next entry takes the files whose names come after that last name: the
store is asked only for the keys after it (S3's StartAfter), so a prefix with many files costs a
listing of the new ones only. Consequences, as for any name-ordered listing:
* a file that lands with a name before one already read is never read: name files so that new
  ones sort last (a timestamp or sequence number first);
* files must be complete when they land (write elsewhere, then rename or upload in one put): a
  file listed while being written is read as it was then;
* with max_files_per_trigger one listing serves the next batches while it still holds a full
  batch (as Spark's unread-files cache): a file that lands with a name before one already
  *listed* may then be missed too.
An AvailableNow drain's target is the last name available when it starts (the old form, a list
of paths, is read as its last name); backlog() counts the files after the last name read.

Reads: a local file is read in place; an object is fetched into a private local file
(storage.private_dir(local_dir, "fetch"): the query's local_dir option, else INCREMENTS_LOCAL_DIR,
else the temp dir), read by the same readers, and the copy deleted. A batch of
many JSON files is copied, in order, into one such file and read in one scan (a tiny file costs a
fraction of a scan of its own); such batches are not read ahead file by file. Smaller batches
are read ahead by the local runner, which also writes the next batch's seen-files entry ahead:
sources/file_read_ahead.py. A malformed
file fails the batch naming the file (its URL) and line; a file deleted after it was planned fails
with DataLossError unless fail_on_data_loss=False, which skips it, counts it and reports it.
"""
from __future__ import annotations

import os
from typing import Any

from ..lazy import lazy_module

from .. import storage
from ..errors import DataLossError, MalformedInputError
from ..redaction import logger as redacting_logger
from ..storage import Location, ObjectInfo
from ..types import parse_schema
from . import file_formats
from .file_changes import changed_since_read, check_unchanged
from .file_listing import LocalCopy, concatenated, name_matches, split_glob
from .base import Source
from .file_read_ahead import FileReadAhead
from .read_files_window import DEFAULT_WINDOW, ReadFilesWindow
from .seen_files import SeenFilesLog, entry_key

pa = lazy_module("pyarrow")  # loaded at first use: increments/lazy.py

log = redacting_logger("increments.sources.files")
FORMATS = ("json", "csv", "parquet")
#: a batch of at least this many JSON files (none read ahead) is read in one scan (_read_together)
MULTI_FILE_SCAN_MIN = 8


def normalized_path(path: str) -> str:
    """`path` (a directory, file or glob; local or URL) as one spelling: a local path made absolute
    and normalized, a URL without trailing slashes; a glob keeps its pattern."""
    root, pattern = split_glob(path)
    return root if pattern is None else (root.rstrip("/") + "/" + pattern)


class FileSource(FileReadAhead, Source):
    _per_query = {"_log": None, "_target": None, "read_metrics": {}, "_read_ahead": None,
                  "_ahead_columns": None, "_known": {}, "_root": None, "_listed": None, "_read_facts": {},
                  "_prepare": None, "_entry_pool": None, "_entry_ahead": None, "_window": None,
                  "_subfolders_checked": False}

    def __init__(self, path: str, format: str = "json", schema: Any = None, max_files_per_trigger: int | None = None,
                 fail_on_data_loss: bool = True, header: bool = False, delimiter: str = ",",
                 storage_options: dict[str, Any] | None = None, wait_for_path: bool = False,
                 changed_files_window: int = DEFAULT_WINDOW):
        path = os.fspath(path)
        storage.check_scheme(path, "files: path")
        fmt = format.lower().replace("jsonl", "json").replace("ndjson", "json")
        if fmt not in FORMATS:
            raise ValueError(f"read_stream.files: format {format!r} is not one of {FORMATS}")
        if schema is None and fmt != "parquet":
            raise ValueError(f"read_stream.files({storage.redact_url(path)!r}): a schema is required for format "
                             f"{fmt!r} (e.g. schema=\"user_id STRING, event_time TIMESTAMP\")")
        if max_files_per_trigger is not None and max_files_per_trigger < 1:
            raise ValueError("max_files_per_trigger must be >= 1")
        if not isinstance(changed_files_window, int) or isinstance(changed_files_window, bool) or \
                changed_files_window < 0:
            raise ValueError(f"read_stream.files: changed_files_window={changed_files_window!r}: give the number of "
                             "most recently read files checked for changes at every plan (>= 0; 0: only the "
                             "previous batch's files)")
        self.changed_files_window = changed_files_window
        self._window: ReadFilesWindow | None = None
        self._subfolders_checked = False
        self.root_url, self.pattern = split_glob(path)
        #: the path as the checkpoint records it: absolute, no trailing slash (so "in", "./in/" and
        #: "/abs/in" are one source; checkpoint/metadata.py upgrades what earlier releases recorded)
        self.path = normalized_path(path)
        self.storage_options = dict(storage_options or {})
        storage.remember_secrets(self.storage_options)
        self.format = fmt
        self._schema = parse_schema(schema) if schema is not None else None
        self.max_files_per_trigger = max_files_per_trigger
        self.fail_on_data_loss = fail_on_data_loss
        self.header = header
        self.delimiter = delimiter
        self.wait_for_path = str(wait_for_path).lower() in ("true", "1", "yes")
        self._log: SeenFilesLog | None = None
        self._target: str | None = None       # AvailableNow: the last name of the drain
        self.read_metrics: dict[str, Any] = {}
        self._read_ahead = None               # a prefetch.ReadAhead: set by enable_read_ahead (the local runner)
        self._ahead_columns: list[str] | None = None
        self._prepare: Any = None             # prepare_rows_with: applied to rows decoded ahead
        self._entry_pool: Any = None          # the local runner's writer of the next seen-files entry
        self._entry_ahead: tuple[int, Any] | None = None   # (entry n, the future of its write)
        self._known: dict[str, tuple] = {}    # key -> (size, etag) as listed, for the read-ahead
        #: entry n -> the facts of its files that its read found changed since listed ({} = none), as
        #: recorded in sources/<i>/<n>.read.json by this runtime (file_changes.py)
        self._read_facts: dict[int, dict[str, tuple]] = {}
        self._root: Location | None = None
        #: (entry n, its last name, the rest of the listing after it) -- see the module doc
        self._listed: tuple[int, str, list[ObjectInfo]] | None = None

    @property
    def description(self) -> str:
        return f"FileStreamSource[{storage.redact_url(self.path)}]"

    # -- where -------------------------------------------------------------------------------------
    def options(self) -> dict[str, Any]:
        """The storage options: this source's own over the query's."""
        return {**self.query_storage_options, **self.storage_options}

    def root(self) -> Location:
        if self._root is None:
            self._root = storage.location(self.root_url, self.options())
        return self._root

    def open(self, checkpoint: Any, index: int, query_name: str, storage_options: dict | None = None) -> None:
        """Attach to the checkpoint. A path (not a glob) that does not exist fails the start, naming
        it, as Spark's file source does; `wait_for_path=True` waits for it instead (no batch runs
        until it appears)."""
        super().open(checkpoint, index, query_name, storage_options)
        self._root = None
        self._log = SeenFilesLog(self.own_files())
        self._window = ReadFilesWindow(self, self.changed_files_window)
        if self.pattern is None and self._single_file():
            return
        if self.pattern is None and not self.wait_for_path and not self._path_exists():
            raise FileNotFoundError(
                f"query {query_name!r}, source {index} ({self.description}): the path {storage.redact_url(self.path)} "
                "does not exist (no directory or file, and no object under that prefix). Create it, fix the path, "
                "or pass wait_for_path=True to read_stream.files to start before it exists.")

    def _single_file(self) -> bool:
        """A path naming one file (not a directory) is read as that file: its directory listed with
        the file's own name as the pattern (a file of that name landing later is read once it
        lands). A directory that holds no file of its own but sub-directories that do reads nothing
        (sub-directories are not listed without a glob): warned, naming the path and a glob to use."""
        parent_url, _, base = self.root_url.rpartition("/")
        if not base or parent_url.endswith(":/"):
            return False
        root = self.root()
        local = root.local_path("")
        if local is not None:
            is_file = os.path.isfile(local)
        else:                   # one HEAD (an object of that name), not a listing of the prefix
            is_file = storage.location(parent_url, self.options()).head(base) is not None
        if is_file:
            self.root_url, self.pattern, self._root = parent_url or "/", _glob_escape(base), None
        return is_file

    def _warn_subfolders_only(self) -> None:
        """Called by the first plan that finds no file to read (never a listing at start: a large
        directory would pay it at every start)."""
        self._subfolders_checked = True
        try:
            files, dirs = self.root().list_dir("")
        except (OSError, storage.StorageError):
            return
        if [f for f in files if name_matches(f.name, None)] or not dirs:
            return
        deeper = [o.name for o in self.root().list("") if "/" in o.name and name_matches(o.name.rsplit("/", 1)[-1], None)]
        if deeper:
            depth = deeper[0].count("/")
            log.warning("%s", self.fail(
                f"the directory {storage.redact_url(self.path)} holds no file of its own, but its sub-directories "
                f"hold {len(deeper)} (e.g. {deeper[0]}); a directory path reads only its own files, so this source "
                f"reads nothing. To read them, use a glob: read_stream.files({(self.path.rstrip('/') + '/*' * depth + '/*')!r}, ...)"))

    def _path_exists(self) -> bool:
        root = self.root()
        local = root.local_path("")
        if local is not None:
            return os.path.exists(local)
        files, dirs = root.list_dir("")
        if files or dirs:
            return True
        parent_url, _, base = self.root_url.rpartition("/")
        return bool(base) and storage.location(parent_url, self.options()).head(base) is not None

    def list_after(self, after: str | None) -> list[ObjectInfo]:
        """The source's files whose names come after `after` (all for None), in name order: one
        listing of the keys after it."""
        return [o for o in self.root().list("", start_after=after) if name_matches(o.name, self.pattern)]

    def _rel(self, path: str) -> str:
        """A version-1 entry's absolute path as a name relative to the root."""
        root = self.root().local_path("")
        if root is not None and os.path.isabs(path):
            rel = os.path.relpath(path, root)
            if not rel.startswith(".."):
                return rel.replace(os.sep, "/")
        return path

    def static_files(self) -> list[tuple[Location, str]]:
        """For read.files(path): a single file reads that file; a directory or glob its files (in
        name order); a missing path is an error naming it."""
        if self.pattern is None:
            parent_url, _, base = self.root_url.rpartition("/")
            if base and not parent_url.endswith(":/"):        # not a bucket's root
                parent = storage.location(parent_url or "/", self.options())
                if parent.head(base) is not None:
                    return [(parent, base)]
            everything = self.root().list("")
            if not everything and not (self.root().local_path("") and os.path.isdir(self.root().local_path(""))):
                raise FileNotFoundError(f"read.files: {storage.redact_url(self.path)} does not exist (no file or "
                                        "directory, and no object under that prefix)")
            return [(self.root(), o.name) for o in everything if name_matches(o.name, self.pattern)]
        return [(self.root(), o.name) for o in self.list_after(None)]

    def schema(self) -> pa.Schema:
        if self._schema is None:
            try:
                first = self.static_files()[:1]
            except FileNotFoundError:
                first = []
            if not first:
                raise ValueError(f"read_stream.files({storage.redact_url(self.path)!r}, 'parquet'): no schema given "
                                 "and no file to infer it from; pass schema=")
            import pyarrow.parquet as pq  # noqa: PLC0415 - pyarrow: kept off the code location's import path
            loc, name = first[0]
            with LocalCopy(loc, name, self.local_dir) as path:
                self._schema = parse_schema(pq.read_schema(path))
        return self._schema.to_arrow()

    # -- offsets -----------------------------------------------------------------------------------
    def initial_offset(self) -> int:
        return -1

    def _new_files(self, start: int, limited: bool) -> list[ObjectInfo]:
        assert self._log is not None
        last = self._log.last(start, self._rel)
        # every file read within the window, unchanged? (read_files_window.py; its listing serves below)
        fresh = self._window.check(start, last) if self._window is not None else None
        m = self.max_files_per_trigger if limited else None
        cached = self._listed
        if fresh is not None:
            new = fresh
        elif m and cached is not None and cached[0] == start and cached[1] == last and len(cached[2]) >= m:
            new = cached[2]
        else:
            new = self.list_after(last)
        if self._target is not None:
            new = [o for o in new if o.name <= self._target]
        return new

    def latest_offset(self, start: int, limited: bool = True) -> int:
        assert self._log is not None
        listed = self._new_files(start, limited)
        new, upcoming = listed, []             # this batch's files; the files of the next batches
        m = self.max_files_per_trigger
        if limited and m:
            new = listed[:m]
            upcoming = self._upcoming(listed, m)
        if not new:
            if start < 0 and self.pattern is None and not self._subfolders_checked:
                self._warn_subfolders_only()
            return start
        entry = self._entry_written_ahead(start + 1, new)
        if entry is None:
            entry = self._log.write(start + 1, new)      # create-only; an existing entry is adopted
        last = self._log.last(start + 1, self._rel)      # (an adopted entry of version 1 has no "last")
        # what the next plans may take from this listing: the names after the entry's last (an
        # adopted entry may end before or after this plan's own first m files)
        rest = [o for o in listed if o.name > last] if limited and m else []
        self._listed = (start + 1, last, rest) if rest else None
        if rest and (len(rest) >= m or self._target is not None):
            self._write_entry_ahead(start + 2, rest[:m])
        self._read_planned_ahead(entry, upcoming, last, m)
        return start + 1

    def prepare_available_now(self) -> None:
        """The target: the last name available now (listing after the newest entry's last name)."""
        assert self._log is not None
        newest = self._log.newest()
        last = self._log.last(newest, self._rel) if newest >= 0 else None
        new = self.list_after(last)
        self._target = new[-1].name if new else (last or "")

    def available_now_target(self) -> Any:
        return self._target

    def set_available_now_target(self, target: Any) -> None:
        if isinstance(target, list):      # the old form: the paths available at the drain's start
            names = [self._rel(p) for p in target]
            target = max(names) if names else ""
        self._target = target

    def files_for(self, start: int, end: int) -> list[str]:
        """The keys of the files of batches (start, end]: names relative to the root (or the
        absolute paths of a version-1 entry)."""
        assert self._log is not None
        return [entry_key(f) for f in self._log.files_between(start, end)]

    def commit(self, end: int) -> None:
        """After commits[N]: the window index, every INDEX_EVERY entries (read_files_window.py)."""
        if self._window is not None:
            self._window.write_index(end)

    def backlog(self, end: int) -> dict[str, Any] | None:
        if self._log is None:
            return None
        return {"files_pending": len(self.list_after(self._log.last(end, self._rel)))}

    # -- reading -----------------------------------------------------------------------------------
    @property
    def reads_columns(self) -> bool:
        """JSON and Parquet files can be read for a subset of the columns (read(..., columns=))."""
        return self.format in ("json", "parquet")

    def display(self, key: str) -> str:
        return key if os.path.isabs(key) else self.root().join(key)

    def read(self, start: int, end: int, columns: list[str] | None = None) -> pa.Table:
        """The rows of the files of batches (start, end], in name order. With `columns` (JSON and
        Parquet) only those columns are decoded and every other column of the schema is null, as
        Spark's scan reads only the columns a query uses (a bad value in an unread column is not
        seen); a malformed line or file fails the batch either way."""
        changed = self._check_unchanged(start, end)
        if self._window is not None:       # reported by a plan's window check since the last read
            changed = self._window.take_pending() + [c for c in changed if c not in self._window.pending]
        files = self.files_for(start, end)
        cols = columns if self.reads_columns else None
        together = self._read_together(files, cols)
        if together is not None:
            self.read_metrics = {"files": len(files), "skipped_files": [], "changed_files": changed}
            return together
        tables, skipped = [], []
        for f in files:
            try:
                tables.append(self._read_one(f, cols))
            except FileNotFoundError:
                if self.fail_on_data_loss:
                    raise DataLossError(self.fail(
                        f"file {self.display(f)} was listed for this batch but is gone. Restore it, or set "
                        "fail_on_data_loss=False to skip missing files (they are counted and reported).")) from None
                log.warning("%s", self.fail(f"skipping missing file {self.display(f)} (fail_on_data_loss=False)"))
                skipped.append(self.display(f))
        self.read_metrics = {"files": len(files), "skipped_files": skipped, "changed_files": changed}
        if not tables:
            return self.schema().empty_table()
        # one file: its table as decoded (rows prepared ahead are known by the table object)
        return tables[0] if len(tables) == 1 else pa.concat_tables(tables)

    # -- files that changed after they were read (sources/file_changes.py) ------------------------
    def _check_unchanged(self, start: int, end: int) -> list[str]:
        return check_unchanged(self, start, end)

    def changed_since_read(self, end: int) -> list[str]:
        return changed_since_read(self, end)

    def locate(self, start: int, end: int, needles: list[bytes]) -> str | None:
        """'file F, line L': the first line of the files of batches (start, end] holding one of
        `needles` (for an error message that names the input row), or None."""
        for key in self.files_for(start, end):
            loc, name = self._where(key)
            try:
                with LocalCopy(loc, name, self.local_dir) as path, open(path, "rb") as f:
                    for n, line in enumerate(f, 1):
                        if any(x in line for x in needles):
                            return f"file {self.display(key)}, line {n}"
            except (OSError, storage.StorageError):
                continue
        return None

    def _reads_together(self, n_files: int | None) -> bool:
        return self.format == "json" and n_files is not None and n_files >= MULTI_FILE_SCAN_MIN

    def _read_together(self, keys: list[str], columns: list[str] | None) -> pa.Table | None:
        """Many JSON files, none read ahead: their lines copied, in order, into one private local
        file that is read in one scan (a tiny file costs a fraction of a scan of its own, and an
        object one GET, several at a time). None: read them one by one instead -- also when a
        file is gone or the scan fails, so that a missing or malformed file is named as usual."""
        if not self._reads_together(len(keys)):
            return None
        pending = self._read_ahead.pending() if self._read_ahead is not None else set()
        if any(k in pending for k in keys):
            return None

        def content(key: str) -> bytes:
            loc, name = self._where(key)
            p = loc.local_path(name)
            if p is None:
                return loc.read_bytes(name)
            with open(p, "rb") as fh:
                return fh.read()
        try:
            with concatenated(keys, content, 1 if self.root().is_local else 8, self.local_dir) as path:
                return file_formats.read_json_lines_many([path], self._schema, columns)
        except (OSError, storage.StorageError):
            return None

    def _where(self, key: str) -> tuple[Location, str]:
        if os.path.isabs(key):        # a version-1 entry's absolute local path
            return storage.location(os.path.dirname(key)), os.path.basename(key)
        return self.root(), key

    def _read_one(self, f: str, columns: list[str] | None = None) -> pa.Table:
        ahead = self._read_ahead.take(f, columns) if self._read_ahead is not None else None
        if ahead is not None:
            return ahead
        return self._decode(f, columns)

    def _decode(self, key: str, columns: list[str] | None = None) -> pa.Table:
        return self.decode_at(*self._where(key), columns)

    def decode_at(self, loc: Location, name: str, columns: list[str] | None = None) -> pa.Table:
        """The rows of one file (FileNotFoundError when it is gone; MalformedInputError naming it)."""
        shown = loc.join(name)
        with LocalCopy(loc, name, self.local_dir) as path:
            if loc.local_path(name) is not None and not os.path.isfile(path):
                raise FileNotFoundError(shown)
            try:
                if self.format == "json":
                    return file_formats.read_json_lines(path, self._schema, columns)
                if self.format == "csv":
                    return file_formats.read_csv(path, self._schema, self.header, self.delimiter)
                return file_formats.read_parquet(path, self._schema, columns)
            except MalformedInputError as e:
                msg = str(e).replace(path, shown) if path != shown else str(e)
                raise MalformedInputError(self.fail(msg + ". Fix or remove the file; nothing of it was "
                                                          "processed.")) from e


def _glob_escape(name: str) -> str:
    """`name` as a pattern matching only itself (fnmatch: each wildcard character in brackets)."""
    return "".join(f"[{c}]" if c in "*?[" else c for c in name)
