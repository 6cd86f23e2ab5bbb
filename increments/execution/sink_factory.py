"""format(...) name -> Sink instance (its options checked by increments/options.py first)."""
from __future__ import annotations

from typing import Any

from ..errors import AnalysisException
from ..options import Options, writer_options


def make_sink(settings: Any):
    fmt = (settings.format or "").lower()
    opts = writer_options(settings)
    if settings.apply_changes is not None:
        return _auto_cdc_sink(settings, fmt, opts)
    if settings.foreach_batch is not None:
        from ..sinks.foreach_batch import ForeachBatchSink  # noqa: PLC0415 - one branch: only the sink module of the query's format loads
        return ForeachBatchSink(settings.foreach_batch)
    if fmt == "memory":
        from ..sinks.memory import MemorySink  # noqa: PLC0415 - one branch: only the sink module of the query's format loads
        return MemorySink(settings.query_name or opts["query_name"])
    if fmt == "console":
        from ..sinks.console import ConsoleSink  # noqa: PLC0415 - one branch: only the sink module of the query's format loads
        return ConsoleSink(opts["num_rows"], opts["truncate"])
    if fmt == "parquet":
        from ..sinks.parquet import ParquetSink  # noqa: PLC0415 - one branch: only the sink module of the query's format loads
        return ParquetSink(settings.path or opts["path"])
    if fmt == "delta":
        from ..sinks.delta import DeltaSink  # noqa: PLC0415 - one branch: only the sink module of the query's format loads
        return DeltaSink(settings.path or opts["path"], opts)
    if fmt in ("postgres", "postgresql"):
        from ..sinks.postgres import PostgresSink  # noqa: PLC0415 - one branch: only the sink module of the query's format loads
        return PostgresSink(opts)
    if fmt == "iceberg":
        from ..sinks.iceberg import IcebergSink  # noqa: PLC0415 - one branch: only the sink module of the query's format loads
        return IcebergSink(settings.path or opts["path"] or opts["table"], opts)
    if fmt == "kafka":
        from ..sinks.kafka import KafkaSink  # noqa: PLC0415 - one branch: only the sink module of the query's format loads
        return KafkaSink(opts)
    raise AnalysisException(f"unknown sink format {settings.format!r}; use delta, iceberg, parquet, postgres, kafka, memory, "
                            "console or foreach_batch(fn)")


def _auto_cdc_sink(settings: Any, fmt: str, opts: Options):
    """write_stream.apply_changes(...): the AUTO CDC sinks (Delta, PostgreSQL)."""
    spec = settings.apply_changes
    if settings.foreach_batch is not None or settings.sink is not None or fmt not in ("delta", "postgres", "postgresql"):
        raise AnalysisException(f"apply_changes writes to format('delta') or format('postgres'), not "
                                f"{'foreach_batch' if settings.foreach_batch else settings.format!r}")
    if fmt == "delta":
        from ..sinks.auto_cdc import AutoCdcDeltaSink  # noqa: PLC0415 - one branch: only the sink module of the query's format loads
        return AutoCdcDeltaSink(settings.path or opts["path"], opts, spec.stored_as_scd_type, list(spec.keys))
    from ..sinks.auto_cdc_postgres import AutoCdcPostgresSink  # noqa: PLC0415 - one branch: only the sink module of the query's format loads
    return AutoCdcPostgresSink(opts, spec.stored_as_scd_type, list(spec.keys))
