"""Readers of one file into an Arrow table with a declared schema, and precise errors.

The fast paths are pyarrow's multithreaded readers. When one fails, the file is diagnosed line by
line (DuckDB, vectorised) so the error names the file, the line and the reason.
"""
from __future__ import annotations

import functools
import io
import json
import os
import re
import threading

from ..lazy import lazy_module

from ..errors import MalformedInputError
from ..identifiers import duckdb_ident
from ..nested_json import json_to_sql
from ..types import Schema, is_nested

pa = lazy_module("pyarrow")
pacsv = lazy_module("pyarrow.csv")
pajson = lazy_module("pyarrow.json")
pq = lazy_module("pyarrow.parquet")  # loaded at first use: increments/lazy.py

try:      # built with the package (setup.py); a missing build fails tests/sources/test_flat_json_native.py
    from ..native import _flatjson
except ImportError:       # an editable checkout not rebuilt since: DuckDB reads every file, as before
    _flatjson = None


def with_only(table: pa.Table, schema: pa.Schema, columns: list[str] | None) -> pa.Table:
    """`table` (holding at least `columns`) as a table of `schema` where every column not in
    `columns` is all null (a pruned scan: nothing downstream reads those columns)."""
    if columns is None:
        return table
    n = table.num_rows
    return pa.Table.from_arrays([table.column(f.name) if f.name in columns else pa.nulls(n, f.type)
                                 for f in schema], schema=schema)


def scanned_fields(schema: Schema, only) -> list:
    """The declared fields a scan decodes: those named in `only` (every field when None), and at
    least the first one (a scan of no column would not count the rows)."""
    return [f for f in schema.fields if only is None or f.name in only] or schema.fields[:1]


def parquet_as_declared(table: pa.Table, schema: Schema, columns: list[str] | None) -> pa.Table:
    """The columns read from a Parquet file (scanned_fields') cast to `schema`; with `columns`,
    the others all null (with_only). Raises Arrow's error when a column does not cast."""
    if columns is not None:
        target = schema.to_arrow()
        return with_only(table.cast(pa.schema([target.field(c) for c in table.column_names])), target, columns)
    return table.select(schema.names).cast(schema.to_arrow())


def read_json_lines(path: str, schema: Schema, columns: list[str] | None = None) -> pa.Table:
    """DuckDB's reader first (the fastest here); pyarrow's when DuckDB refuses (e.g. an object over its
    size limit); the line-by-line diagnosis when both do, so the error names the line. With
    `columns`, only those are decoded (the others are null, see with_only). A file within the
    compiled decoder's fast path (_read_json_native) is decoded there, with DuckDB's result."""
    fast = _read_json_native(path, schema, columns)
    if fast is None:
        fast = _read_json_duckdb(path, schema, columns)
    if fast is not None:
        return fast
    with open(path, "rb") as f:
        data = f.read()
    if not data.strip():
        return schema.to_arrow().empty_table()
    check_utf8(path, data)
    try:
        opts = pajson.ParseOptions(explicit_schema=schema.to_arrow(), unexpected_field_behavior="ignore",
                                   newlines_in_values=False)
        table = pajson.read_json(io.BytesIO(data), parse_options=opts,
                                 read_options=pajson.ReadOptions(block_size=max(1 << 20, min(len(data) + 1, 64 << 20))))
        return table.select(schema.names).cast(schema.to_arrow())
    except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError) as e:
        line, reason = diagnose_json_lines(data.split(b"\n"), schema)
        if line is None:
            line, reason = duplicate_key_line(data)
        if line is None:
            raise MalformedInputError(f"file {path}: cannot be read as JSON lines with schema ({schema}): {e}") from e
        raise MalformedInputError(f"file {path}, line {line}: {reason}") from e


def duplicate_key_line(data: bytes) -> tuple[int | None, str]:
    """(1-based line, reason) of the first JSON object with a key given twice (at any depth), which
    pyarrow refuses and reports by its row in a block ("row 0"); (None, "") when there is none.
    Only run on a file that already failed, so a Python pass over its lines is acceptable."""
    def pairs(items: list) -> dict:
        seen = set()
        for k, _ in items:
            if k in seen:
                raise KeyError(k)
            seen.add(k)
        return dict(items)
    for n, raw in enumerate(data.split(b"\n"), 1):
        if raw.count(b'"') < 4 or not raw.strip():
            continue
        try:
            json.loads(raw, object_pairs_hook=pairs)
        except KeyError as e:
            return n, (f"the JSON object has the key {e.args[0]!r} twice; each key may appear once per object (fix "
                       "the writer of this file)")
        except ValueError:
            continue
    return None, ""


def check_utf8(path: str, data: bytes) -> None:
    """MalformedInputError naming the line of the first byte that is not UTF-8 (such text would be
    committed as it is and make the sink's strings unreadable)."""
    try:
        data.decode("utf-8")
    except UnicodeDecodeError as e:
        line = data.count(b"\n", 0, e.start) + 1
        col = e.start - (data.rfind(b"\n", 0, e.start) + 1) + 1
        raise MalformedInputError(f"file {path}, line {line}: byte 0x{data[e.start]:02x} at column {col} is not "
                                  "UTF-8 text (write the file as UTF-8)") from None


def read_json_lines_many(paths: list[str], schema: Schema, columns: list[str] | None = None) -> pa.Table | None:
    """The rows of several JSON-lines files in their order, in one DuckDB scan (many small files
    cost a fraction of one scan each); None when that scan fails: the caller then reads the files
    one by one (read_json_lines), which names the bad file and line."""
    fast = _read_json_native(list(paths), schema, columns)
    return fast if fast is not None else _read_json_duckdb(list(paths), schema, columns)


#: the JSON value types a field of a declared type accepts (DuckDB's json_type names); others fail
#: the batch as Spark's parser does (FAILFAST): 3.7, true or "42" are not a BIGINT, "yes" is not a
#: BOOLEAN. A STRING takes any value (its JSON text, as Spark); other types as DuckDB converts them.
_INTEGERS = ("TINYINT", "SMALLINT", "INTEGER", "BIGINT")
_STRICT = {**{t: ("BIGINT", "UBIGINT") for t in _INTEGERS}, "BOOLEAN": ("BOOLEAN",),
           "DOUBLE": ("BIGINT", "UBIGINT", "DOUBLE"), "FLOAT": ("BIGINT", "UBIGINT", "DOUBLE")}


def strict_json_types(duckdb_type: str) -> tuple[str, ...] | None:
    """The JSON value types a field of `duckdb_type` accepts, or None when any is converted."""
    if duckdb_type.startswith("DECIMAL"):
        return ("BIGINT", "UBIGINT", "DOUBLE")
    return _STRICT.get(duckdb_type)


_q = duckdb_ident


#: a scan of at most this many bytes of files runs its parsed statement on the cursor without
#: the optimizer (_small_scan); a larger one runs as a relation on the default cursor, as it did,
#: which streams its result into Arrow without the DB-API result's copy of the rows
SMALL_SCAN_BYTES = 1 << 20

_parsed = threading.local()


@functools.lru_cache(maxsize=64)
def json_scan_sql(schema: Schema, only: tuple[str, ...] | None) -> str:
    """The one statement of _read_json_duckdb for `schema` (the fields in `only`, or all when
    None), with the files as the parameter $files; built once per schema and column list."""
    fields = scanned_fields(schema, only)

    def declared(f) -> str:
        return "JSON" if strict_json_types(f.duckdb_type) or is_nested(f.duckdb_type) else f.duckdb_type

    def select(f) -> str:
        if is_nested(f.duckdb_type):      # Spark's conversion of nested values (nested_json.py)
            return f"{json_to_sql(_q(f.name), f.duckdb_type)} AS {_q(f.name)}"
        ok = strict_json_types(f.duckdb_type)
        if not ok:
            return _q(f.name)
        kinds = ", ".join(f"'{k}'" for k in ok)
        return (f"CASE WHEN {_q(f.name)} IS NULL OR json_type({_q(f.name)}) = 'NULL' THEN NULL "
                f"WHEN json_type({_q(f.name)}) IN ({kinds}) THEN CAST({_q(f.name)} AS {f.duckdb_type}) "
                f"ELSE error('wrong JSON type') END AS {_q(f.name)}")
    columns = "{" + ", ".join(f"'{f.name.replace(chr(39), chr(39) * 2)}': '{declared(f)}'" for f in fields) + "}"
    return (f"SELECT {', '.join(select(f) for f in fields)} FROM read_json($files, format='newline_delimited', "
            f"columns={columns}, maximum_object_size=67108864)")


def _small_scan(con, sql: str, path: str | list[str]) -> pa.Table | None:
    """`sql` run on `con` from its statement as parsed once per thread, or None when this DuckDB
    has no `_result_as_arrow` (then the caller runs it as a relation). A relation parses and binds
    its statement twice (once to describe it, once to run its rendered text; DuckDB's parser costs
    ~1.3 M instructions a statement), this once. `con` is the thread's cursor without the optimizer
    (sql.duckdb_plain_connection): a projection of read_json has nothing to optimize.
    `_result_as_arrow` is what a connection's public `to_arrow_table()` calls after its warning
    that a DB-API result's rows are copied once more into Arrow: the copy is the point here (a few
    kB), and a warning per batch is not (nor an error under `-W error`)."""
    fetch = getattr(con, "_result_as_arrow", None)
    if fetch is None:
        return None
    cache = getattr(_parsed, "statements", None)
    if cache is None or len(cache) >= 64:
        cache = _parsed.statements = {}
    statement = cache.get(sql)
    if statement is None:
        statement = cache[sql] = con.extract_statements(sql)[0]
    con.execute(statement, {"files": path})
    return fetch(131072, reader=False)     # DuckDB's default Arrow batch size, as the relation's


def _scan_bytes(path: str | list[str]) -> int | None:
    """The files' total size; None when one cannot be stat'ed (the scan then names the failure)."""
    try:
        return sum(os.path.getsize(p) for p in ([path] if isinstance(path, str) else path))
    except (OSError, TypeError):
        return None


#: the declared types the compiled decoder reads (increments/native/_flatjson.c), as its kinds
_NATIVE_KINDS = {"VARCHAR": 0, "TINYINT": 1, "SMALLINT": 2, "INTEGER": 3, "BIGINT": 4, "DOUBLE": 5,
                 "BOOLEAN": 6, "TIMESTAMPTZ": 7, "TIMESTAMP": 7}


#: a larger file goes to DuckDB's scan, which streams it (the decoder holds the file and its columns)
NATIVE_MAX_BYTES = 1 << 30


@functools.lru_cache(maxsize=64)
def _native_plan(schema: Schema, only: tuple[str, ...] | None) -> tuple | None:
    """(the decoder's fields, their Arrow schema) for the columns _read_json_duckdb would declare
    (json_scan_sql's), or None when one has a type the decoder does not read (DATE, FLOAT,
    DECIMAL, BINARY, nested: DuckDB reads those files)."""
    fields = scanned_fields(schema, only)
    if any(f.duckdb_type not in _NATIVE_KINDS for f in fields):
        return None
    try:
        spec = tuple((f.name.encode(), _NATIVE_KINDS[f.duckdb_type]) for f in fields)
    except UnicodeEncodeError:    # a name holding a lone surrogate: no line can spell it in UTF-8
        return None
    return spec, pa.schema([pa.field(f.name, f.arrow_type) for f in fields])


def _read_json_native(path: str | list[str], schema: Schema, only: list[str] | None = None) -> pa.Table | None:
    """The table _read_json_duckdb gives for these files, decoded by the compiled flat-JSON decoder
    (increments/native/_flatjson.c, without the GIL), or None -- a decline -- when a declared type,
    a line or a value is outside its fast path (see there; the caller then runs DuckDB's scan, so
    errors and their messages are DuckDB's path's), or a file cannot be read."""
    plan = _native_plan(schema, None if only is None else tuple(only))
    if plan is None or _flatjson is None or not path:
        return None
    spec, read = plan
    tables = []
    for p in [path] if isinstance(path, str) else path:
        try:
            with open(p, "rb") as fh:
                if os.fstat(fh.fileno()).st_size > NATIVE_MAX_BYTES:
                    return None
                data = fh.read()
        except (OSError, TypeError, ValueError):
            return None
        out = _flatjson.decode(data, spec)
        if isinstance(out, str):
            return None
        rows, columns = out
        arrays = []
        for field, (nulls, valid, values, offsets) in zip(read, columns):
            validity = None if valid is None else pa.py_buffer(valid)
            buffers = [validity, pa.py_buffer(offsets), pa.py_buffer(values)] if offsets is not None else \
                [validity, pa.py_buffer(values)]
            arrays.append(pa.Array.from_buffers(field.type, rows, buffers, null_count=nulls))
        tables.append(pa.Table.from_arrays(arrays, schema=read))
    table = tables[0] if len(tables) == 1 else pa.concat_tables(tables)
    return with_only(table, schema.to_arrow(), only) if only is not None else table


def _read_json_duckdb(path: str | list[str], schema: Schema, only: list[str] | None = None) -> pa.Table | None:
    """One DuckDB scan; strictly typed fields (strict_json_types) are read as JSON and converted
    only when the value has an accepted type (else the scan fails: None, and the caller names the
    line). The statement is json_scan_sql's: the same for every file of a schema and column list."""
    import duckdb  # noqa: PLC0415 - duckdb: kept off the code location's import path

    from ..sql import duckdb_connection, duckdb_plain_connection  # noqa: PLC0415 - increments.sql (duckdb, numpy, pyarrow): kept off the code location's import path
    fields = scanned_fields(schema, only)
    sql = json_scan_sql(schema, None if only is None else tuple(only))
    try:
        size = _scan_bytes(path)
        table = _small_scan(duckdb_plain_connection(), sql, path) if size is not None and size <= SMALL_SCAN_BYTES else None
        if table is None:
            table = duckdb_connection().sql(sql, params={"files": path}).to_arrow_table()
        if only is not None:
            target = schema.to_arrow()
            read = pa.schema([target.field(f.name) for f in fields])
            return with_only(table.select(read.names).cast(read), target, only)
        return table.select(schema.names).cast(schema.to_arrow())
    except (duckdb.Error, pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError):
        return None
    except UnicodeDecodeError:    # DuckDB's error text cut inside a character (a duplicate key's non-ASCII value)
        return None


def diagnose_json_lines(lines: list[bytes], schema: Schema) -> tuple[int | None, str]:
    """Find the first line that is not a JSON object matching `schema`; return (1-based line, reason)."""
    from ..sql import duckdb_connection  # noqa: PLC0415 - increments.sql (duckdb, numpy, pyarrow): kept off the code location's import path
    texts = pa.array([ln.decode("utf-8", errors="replace") for ln in lines], pa.string())
    bad = first_bad_json_row(duckdb_connection(), texts, schema)
    if bad is None:
        return None, ""
    return bad[0] + 1, bad[1]


def has_wrong_json_types(con, texts: pa.Array, schema: Schema) -> bool:
    """Does any value hold a field whose JSON type its declared type does not accept
    (strict_json_types: 3.7, true or "42" for a BIGINT, "yes" for a BOOLEAN)? One pass."""
    conds = []
    for f in schema.fields:
        ok = strict_json_types(f.duckdb_type)
        if ok:
            path = ("$." + f.name if f.name.isidentifier() else "$." + json.dumps(f.name)).replace("'", "''")
            conds.append(f"coalesce(json_type(v, '{path}'), 'NULL') NOT IN ('NULL', {', '.join(repr(k) for k in ok)})")
    if not conds or not len(texts):
        return False
    t = pa.table({"v": texts})
    con.register("__wt", t)
    try:
        return bool(con.execute(f"SELECT count(*) FROM __wt WHERE v IS NOT NULL AND trim(v) <> '' AND json_valid(v) "
                                f"AND ({' OR '.join(conds)})").fetchall()[0][0])
    finally:
        con.unregister("__wt")


def first_bad_json_row(con, texts: pa.Array, schema: Schema) -> tuple[int, str] | None:
    """(row index, reason) of the first non-blank value that is invalid JSON or has a field of the
    wrong type; None when every row fits. Blank rows are not errors here (they are skipped)."""
    t = pa.table({"v": texts, "i": pa.array(range(len(texts)), pa.int64())})
    con.register("__diag", t)
    try:
        row = con.execute(
            "SELECT i, v FROM __diag WHERE v IS NOT NULL AND trim(v) <> '' AND NOT json_valid(v) ORDER BY i LIMIT 1").fetchall()
        if row:
            row = row[0]
            return row[0], f"invalid JSON: {row[1][:200]!r}"
        for f in schema.fields:
            path = "$." + json.dumps(f.name) if not f.name.isidentifier() else "$." + f.name
            ok = strict_json_types(f.duckdb_type)
            if ok:
                row = con.execute(
                    f"SELECT i, json_extract(v, ?)::VARCHAR, json_type(v, ?) FROM __diag WHERE v IS NOT NULL "
                    f"AND trim(v) <> '' AND json_type(v, ?) IS NOT NULL AND json_type(v, ?) NOT IN "
                    f"('NULL', {', '.join(repr(k) for k in ok)}) ORDER BY i LIMIT 1", [path, path, path, path]).fetchall()
                if row:
                    i, text, kind = row[0]
                    return i, (f"field {f.name!r} is {text[:100]}, which is not a {f.duckdb_type} (a JSON "
                               f"{kind.lower()}; values are not converted to another type)")
            if is_nested(f.duckdb_type):   # values inside convert or are NULL (nested_json.py): never an error
                continue
            row = con.execute(
                f"SELECT i, json_extract(v, ?)::VARCHAR FROM __diag WHERE v IS NOT NULL AND trim(v) <> '' "
                f"AND json_type(v, ?) NOT IN ('NULL') AND json_type(v, ?) IS NOT NULL "
                f"AND TRY_CAST(json_extract_string(v, ?) AS {f.duckdb_type}) IS NULL ORDER BY i LIMIT 1",
                [path, path, path, path]).fetchall()
            if row:
                row = row[0]
                return row[0], f"field {f.name!r} is {row[1][:100]}, which is not a {f.duckdb_type}"
        row = con.execute(
            "SELECT i, v FROM __diag WHERE v IS NOT NULL AND trim(v) <> '' AND json_type(v) <> 'OBJECT' ORDER BY i LIMIT 1").fetchall()
        if row:
            row = row[0]
            return row[0], f"not a JSON object: {row[1][:200]!r}"
        return None
    finally:
        con.unregister("__diag")


def read_csv(path: str, schema: Schema, header: bool = False, delimiter: str = ",") -> pa.Table:
    """The rows of a CSV file as `schema`. A 0-byte file has no rows; a header without a column of
    the schema, a value that does not convert, or text that is not UTF-8 fails naming the file (and
    the line where known)."""
    arrow_schema = schema.to_arrow()
    if os.path.getsize(path) == 0:
        return arrow_schema.empty_table()
    read_opts = (pacsv.ReadOptions(autogenerate_column_names=False) if header
                 else pacsv.ReadOptions(column_names=schema.names))
    conv = pacsv.ConvertOptions(column_types=arrow_schema, include_columns=schema.names,
                                strings_can_be_null=True, timestamp_parsers=["%Y-%m-%dT%H:%M:%S%z", "%Y-%m-%d %H:%M:%S%z", pacsv.ISO8601])
    try:
        table = pacsv.read_csv(path, read_options=read_opts, convert_options=conv,
                               parse_options=pacsv.ParseOptions(delimiter=delimiter))
        return table.select(schema.names).cast(arrow_schema)
    except pa.ArrowKeyError:
        with open(path, "rb") as f:
            first = f.readline().decode("utf-8", "replace").rstrip("\r\n")
        names = [c.strip().strip('"') for c in first.split(delimiter)]
        missing = [n for n in schema.names if n not in names]
        raise MalformedInputError(f"file {path}, line 1: the header {names} has no column {', '.join(map(repr, missing))} "
                                  f"of the schema ({schema}); fix the header, or the schema") from None
    except (pa.ArrowInvalid, pa.ArrowTypeError) as e:
        if "UTF8" in str(e) or "UTF-8" in str(e):
            with open(path, "rb") as f:
                check_utf8(path, f.read())
        where = _csv_bad_value(path, schema, header, delimiter, str(e))
        if where is not None:
            raise MalformedInputError(f"file {path}, {where} ({e})") from e
        raise MalformedInputError(f"file {path}: {_csv_reason(str(e))}") from e


def _csv_bad_value(path: str, schema: Schema, header: bool, delimiter: str, msg: str) -> str | None:
    """'line L: column 'c' has value 'v', which is not a T' for the CSV conversion error `msg`
    ("In CSV column #k: ... invalid value 'v'"): the file read again as text, the first row of
    that column whose value does not convert (found by halving: a few vectorised casts), and its
    line (a header and blank lines, which the reader skips, counted). None when not found."""
    m = re.search(r"CSV column #(\d+)", msg)
    if m is None:
        return None
    arrow_schema = schema.to_arrow()
    read_opts = (pacsv.ReadOptions(autogenerate_column_names=False) if header
                 else pacsv.ReadOptions(column_names=schema.names))
    try:
        text = pacsv.read_csv(path, read_options=read_opts, parse_options=pacsv.ParseOptions(delimiter=delimiter),
                              convert_options=pacsv.ConvertOptions(
                                  column_types={n: pa.string() for n in schema.names}, include_columns=schema.names,
                                  strings_can_be_null=True))
    except (pa.ArrowInvalid, pa.ArrowTypeError):
        return None
    col = text.column_names[int(m.group(1))] if int(m.group(1)) < text.num_columns else None
    if col is None:
        return None
    values = text.column(col).combine_chunks()
    target = arrow_schema.field(col).type

    def fails(arr: pa.Array) -> bool:
        try:
            arr.cast(target)
            return False
        except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError):
            return True
    if not fails(values):
        return None
    lo, hi = 0, len(values)                    # the first failing row is in [lo, hi)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if fails(values.slice(lo, mid - lo)):
            hi = mid
        else:
            lo = mid
    line = _csv_line_of_row(path, lo, header)
    return (f"line {line}: column {col!r} has value {values[lo].as_py()!r}, which is not a "
            f"{next(f.duckdb_type for f in schema.fields if f.name == col)}; fix the value, or declare the column "
            f"as STRING and convert it in the query")


def _csv_line_of_row(path: str, row: int, header: bool) -> int:
    """The 1-based line of data row `row` (0-based), counting the header and blank lines the reader skips."""
    k = -1 if header else 0
    with open(path, "rb") as f:
        for n, raw in enumerate(f, 1):
            if not raw.strip(b"\r\n"):
                continue
            if k == row:
                return n
            k += 1
    return row + (2 if header else 1)


def _csv_reason(msg: str) -> str:
    m = re.search(r"[Rr]ow #?(\d+)", msg)
    if m:
        return f"line {int(m.group(1))}: {msg}"
    return msg


def read_parquet(path: str, schema: Schema | None, columns: list[str] | None = None) -> pa.Table:
    """The file as `schema` (every declared column must be in the file); with `columns`, only
    those are decoded (the others are null, see with_only)."""
    try:
        with pq.ParquetFile(path) as pf:
            names = pf.schema_arrow.names
            if schema is None:
                return pf.read()
            missing = [n for n in schema.names if n not in names]
            if missing:
                raise MalformedInputError(f"file {path}: columns {missing} of the declared schema are missing "
                                          f"(the file has {names})")
            table = pf.read(columns=[f.name for f in scanned_fields(schema, columns)])
    except (pa.ArrowInvalid, OSError) as e:
        raise MalformedInputError(f"file {path}: not a readable Parquet file: {e}") from e
    try:
        return parquet_as_declared(table, schema, columns)
    except (pa.ArrowInvalid, pa.ArrowTypeError) as e:
        raise MalformedInputError(f"file {path}: cannot cast to the declared schema ({schema}): {e}") from e
