"""format("console"): prints each batch like Spark's console sink (up to `num_rows` rows).

Not idempotent by nature: a replayed batch prints again (with the same batch id).
"""
from __future__ import annotations

import sys

import pyarrow as pa

from .base import Sink, SinkResult


class ConsoleSink(Sink):
    def __init__(self, num_rows: int = 20, truncate: bool = True, stream=None):
        self.num_rows, self.truncate = int(num_rows), truncate
        self.stream = stream

    @property
    def description(self) -> str:
        return "ConsoleSink"

    def add_batch(self, batch_id: int, table: pa.Table) -> SinkResult:
        out = self.stream or sys.stdout
        out.write("-" * 45 + f"\nBatch: {batch_id}\n" + "-" * 45 + "\n")
        out.write(format_table(table, self.num_rows, self.truncate) + "\n")
        out.flush()
        return SinkResult(table.num_rows)


def format_table(table: pa.Table, num_rows: int = 20, truncate: bool = True) -> str:
    """Spark's show() layout: +---+ borders, right-aligned cells, 20-char truncation."""
    names = table.column_names
    rows = table.slice(0, num_rows).to_pylist()

    def cell(v) -> str:
        if v is None:
            s = "null"
        elif isinstance(v, dict):
            s = "{" + ", ".join(cell(x) for x in v.values()) + "}"
        elif hasattr(v, "isoformat") and hasattr(v, "hour"):
            s = v.strftime("%Y-%m-%d %H:%M:%S")
        else:
            s = str(v)
        return s[:17] + "..." if truncate and len(s) > 20 else s
    cells = [[cell(r[n]) for n in names] for r in rows]
    widths = [max([len(n)] + [len(c[i]) for c in cells]) for i, n in enumerate(names)]
    sep = "+" + "+".join("-" * w for w in widths) + "+"
    lines = [sep, "|" + "|".join(n.rjust(w) for n, w in zip(names, widths)) + "|", sep]
    lines += ["|" + "|".join(c.rjust(w) for c, w in zip(r, widths)) + "|" for r in cells]
    lines.append(sep)
    if table.num_rows > num_rows:
        lines.append(f"only showing top {num_rows} rows")
    return "\n".join(lines)
