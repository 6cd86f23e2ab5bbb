"""frame.map_in_arrow(fn, schema) and frame.map_in_pandas(fn, schema): a Python function over each
batch's rows as an iterator of Arrow record batches (or pandas DataFrames), stateless, as Spark's
mapInArrow / mapInPandas.

Contract, per batch:
- the batch's rows (in order) are cut into record batches of at most MAX_RECORDS_PER_BATCH rows
  (Spark's spark.sql.execution.arrow.maxRecordsPerBatch, 10,000) and `fn(iterator)` is called
  once; it yields pyarrow.RecordBatch (or Table) objects for map_in_arrow, pandas DataFrames for
  map_in_pandas, any number of rows each. A batch without rows calls nothing;
- the output is the concatenation of what it yields, conformed to `schema`: columns matched by
  name (by position when a DataFrame's labels are not strings), cast to the declared types; a
  missing column or a value that does not convert fails the batch;
- like any stateless step it may come before a stateful operator (its output rows are that
  operator's input in the same batch). Its output columns are new columns, as in Spark: a
  with_watermark below it does not carry over (declare with_watermark after it);
- an exception raised by fn fails the batch uncommitted with a PythonUdfError naming the query,
  batch, function, the input record batch it was handed last (index, rows) and that batch's
  first row.
"""
from __future__ import annotations

from typing import Any, Iterator

import pyarrow as pa

from ..errors import AnalysisException
from ..plan.udf_nodes import MapBatches
from ..types import Schema
from ..udf import PythonUdfError, code_hash, qualified_name
from .base import BatchContext, PhysicalOp

MAX_RECORDS_PER_BATCH = 10_000
KINDS = ("arrow", "pandas")


class MapBatchesOp(PhysicalOp):
    def __init__(self, child: PhysicalOp, node: MapBatches):
        schema: Schema = node.schema
        super().__init__([child], schema.to_arrow())
        self.func, self.kind = node.func, node.kind
        self.event_time_cols = {}     # new columns (Spark: the output attributes carry no watermark)
        self.qualified_name = qualified_name(node.func)
        self._schema_text = str(schema)

    def udf_descriptions(self) -> list[str]:
        return [f"map_in_{self.kind} {self.qualified_name} -> {self._schema_text} "
                f"[code {code_hash(self.func)}]"]

    def describe(self) -> str:
        return f"MapIn{self.kind.capitalize()}[{self.qualified_name} -> {', '.join(self.schema.names)}]"

    def execute(self, ctx: BatchContext) -> pa.Table:
        table = self.children[0].execute(ctx)
        if table.num_rows == 0:
            return self.schema.empty_table()
        batches = table.combine_chunks().to_batches(max_chunksize=MAX_RECORDS_PER_BATCH)
        fed = _Feed(batches, self.kind)
        out: list[pa.RecordBatch] = []
        try:
            for i, piece in enumerate(self.func(iter(fed))):
                out.append(self._conform(ctx, piece, i))
        except PythonUdfError:
            raise
        except Exception as e:  # noqa: BLE001 - user code
            raise self._fail(ctx, fed, f"raised {type(e).__name__}: {e}") from e
        if not out:
            return self.schema.empty_table()
        return pa.Table.from_batches(out, self.schema)

    def _fail(self, ctx: BatchContext, fed: "_Feed", what: str) -> PythonUdfError:
        where, first = "", None
        if fed.last is not None:
            b = fed.batches[fed.last]
            start = sum(len(x) for x in fed.batches[:fed.last])
            first = b.slice(0, 1).to_pylist()[0] if len(b) else None
            where = (f" while at input record batch {fed.last} (rows {start}..{start + len(b) - 1} of the batch; "
                     f"its first row {first!r})")
        msg = ctx.where(f"map_in_{self.kind} function {self.qualified_name} {what}{where}. Fix the function (or the "
                        "data); nothing of this batch was committed, and a restart runs it again.")
        return PythonUdfError(msg, function=self.qualified_name, batch_id=ctx.batch_id, row=None, input=first)

    def _conform(self, ctx: BatchContext, piece: Any, i: int) -> pa.RecordBatch:
        if self.kind == "pandas":
            import pandas as pd  # noqa: PLC0415 - optional extra increments[pandas]: pandas only when used
            if not isinstance(piece, pd.DataFrame):
                raise self._fail_out(ctx, i, f"yielded a {type(piece).__name__}, not a pandas.DataFrame")
            if not all(isinstance(c, str) for c in piece.columns):   # by position (Spark)
                piece = piece.set_axis(self.schema.names[:len(piece.columns)], axis=1)
            piece = pa.Table.from_pandas(piece, preserve_index=False)
        if isinstance(piece, pa.Table):
            piece = piece.combine_chunks()
            piece = piece.to_batches()[0] if piece.num_rows else pa.RecordBatch.from_pylist([], piece.schema)
        if not isinstance(piece, pa.RecordBatch):
            raise self._fail_out(ctx, i, f"yielded a {type(piece).__name__}, not a pyarrow.RecordBatch")
        missing = [f.name for f in self.schema if f.name not in piece.schema.names]
        if missing:
            raise self._fail_out(ctx, i, f"yielded columns {piece.schema.names}: missing {missing} of the declared "
                                 f"schema ({self.schema.names})")
        cols = []
        for f in self.schema:
            col = piece.column(piece.schema.get_field_index(f.name))
            try:
                cols.append(col if col.type == f.type else col.cast(f.type))
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError) as e:
                raise self._fail_out(ctx, i, f"yielded column {f.name!r} of type {col.type}, which does not "
                                     f"convert to {f.type}: {e}") from e
        return pa.RecordBatch.from_arrays(cols, schema=self.schema)

    def _fail_out(self, ctx: BatchContext, i: int, what: str) -> PythonUdfError:
        return PythonUdfError(ctx.where(f"map_in_{self.kind} function {self.qualified_name}: output {i} {what}. "
                                        "Yield values of the declared schema."),
                              function=self.qualified_name, batch_id=ctx.batch_id)


class _Feed:
    """The input record batches (as DataFrames for pandas), remembering the last one handed out."""

    def __init__(self, batches: list[pa.RecordBatch], kind: str):
        self.batches, self.kind, self.last = batches, kind, None

    def __iter__(self) -> Iterator[Any]:
        for i, b in enumerate(self.batches):
            self.last = i
            yield b.to_pandas() if self.kind == "pandas" else b


def build_map_batches(compiler: Any, node: MapBatches) -> PhysicalOp:
    child = compiler.build(node.child)
    if not node.schema.fields:
        raise AnalysisException(f"map_in_{node.kind}: the schema has no columns")
    return MapBatchesOp(child, node)
