"""Readers of one file into an Arrow table with a declared schema, and precise errors.

The fast paths are pyarrow's multithreaded readers. When one fails, the file is diagnosed line by
line (DuckDB, vectorised) so the error names the file, the line and the reason.
"""
from __future__ import annotations

import io
import json

import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.json as pajson
import pyarrow.parquet as pq

from ..errors import MalformedInputError
from ..types import Schema


def with_only(table: pa.Table, schema: pa.Schema, columns: list[str] | None) -> pa.Table:
    """`table` (holding at least `columns`) as a table of `schema` where every column not in
    `columns` is all null (a pruned scan: nothing downstream reads those columns)."""
    if columns is None:
        return table
    n = table.num_rows
    return pa.Table.from_arrays([table.column(f.name) if f.name in columns else pa.nulls(n, f.type)
                                 for f in schema], schema=schema)


def read_json_lines(path: str, schema: Schema, columns: list[str] | None = None) -> pa.Table:
    """DuckDB's reader first (the fastest here); pyarrow's when DuckDB refuses (e.g. an object over its
    size limit); the line-by-line diagnosis when both do, so the error names the line. With
    `columns`, only those are decoded (the others are null, see with_only)."""
    fast = _read_json_duckdb(path, schema, columns)
    if fast is not None:
        return fast
    with open(path, "rb") as f:
        data = f.read()
    if not data.strip():
        return schema.to_arrow().empty_table()
    try:
        opts = pajson.ParseOptions(explicit_schema=schema.to_arrow(), unexpected_field_behavior="ignore",
                                   newlines_in_values=False)
        table = pajson.read_json(io.BytesIO(data), parse_options=opts,
                                 read_options=pajson.ReadOptions(block_size=max(1 << 20, min(len(data) + 1, 64 << 20))))
        return table.select(schema.names).cast(schema.to_arrow())
    except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError) as e:
        line, reason = diagnose_json_lines(data.split(b"\n"), schema)
        if line is None:
            raise MalformedInputError(f"file {path}: cannot be read as JSON lines with schema ({schema}): {e}") from e
        raise MalformedInputError(f"file {path}, line {line}: {reason}") from e


def read_json_lines_many(paths: list[str], schema: Schema, columns: list[str] | None = None) -> pa.Table | None:
    """The rows of several JSON-lines files in their order, in one DuckDB scan (many small files
    cost a fraction of one scan each); None when that scan fails: the caller then reads the files
    one by one (read_json_lines), which names the bad file and line."""
    return _read_json_duckdb(list(paths), schema, columns)


def _read_json_duckdb(path: str | list[str], schema: Schema, only: list[str] | None = None) -> pa.Table | None:
    import duckdb

    from ..sql import duckdb_connection
    fields = [f for f in schema.fields if only is None or f.name in only] or schema.fields[:1]
    columns = "{" + ", ".join(f"'{f.name.replace(chr(39), chr(39) * 2)}': '{f.duckdb_type}'" for f in fields) + "}"
    try:
        table = duckdb_connection().sql(
            f"SELECT * FROM read_json($files, format='newline_delimited', columns={columns}, "
            f"maximum_object_size=67108864)", params={"files": path}).to_arrow_table()
        if only is not None:
            target = schema.to_arrow()
            read = pa.schema([target.field(f.name) for f in fields])
            return with_only(table.select(read.names).cast(read), target, only)
        return table.select(schema.names).cast(schema.to_arrow())
    except (duckdb.Error, pa.ArrowInvalid, pa.ArrowTypeError):
        return None


def diagnose_json_lines(lines: list[bytes], schema: Schema) -> tuple[int | None, str]:
    """Find the first line that is not a JSON object matching `schema`; return (1-based line, reason)."""
    from ..sql import duckdb_connection
    texts = pa.array([ln.decode("utf-8", errors="replace") for ln in lines], pa.string())
    bad = first_bad_json_row(duckdb_connection(), texts, schema)
    if bad is None:
        return None, ""
    return bad[0] + 1, bad[1]


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
    arrow_schema = schema.to_arrow()
    read_opts = (pacsv.ReadOptions(autogenerate_column_names=False) if header
                 else pacsv.ReadOptions(column_names=schema.names))
    conv = pacsv.ConvertOptions(column_types=arrow_schema, include_columns=schema.names,
                                strings_can_be_null=True, timestamp_parsers=["%Y-%m-%dT%H:%M:%S%z", "%Y-%m-%d %H:%M:%S%z", pacsv.ISO8601])
    try:
        table = pacsv.read_csv(path, read_options=read_opts, convert_options=conv,
                               parse_options=pacsv.ParseOptions(delimiter=delimiter))
        return table.select(schema.names).cast(arrow_schema)
    except (pa.ArrowInvalid, pa.ArrowTypeError) as e:
        raise MalformedInputError(f"file {path}: {_csv_reason(str(e))}") from e


def _csv_reason(msg: str) -> str:
    import re
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
            table = pf.read(columns=[c for c in schema.names if columns is None or c in columns] or schema.names[:1])
    except (pa.ArrowInvalid, OSError) as e:
        raise MalformedInputError(f"file {path}: not a readable Parquet file: {e}") from e
    try:
        if columns is not None:
            target = schema.to_arrow()
            read = pa.schema([target.field(c) for c in table.column_names])
            return with_only(table.cast(read), target, columns)
        return table.select(schema.names).cast(schema.to_arrow())
    except (pa.ArrowInvalid, pa.ArrowTypeError) as e:
        raise MalformedInputError(f"file {path}: cannot cast to the declared schema ({schema}): {e}") from e
