"""The declared options: one registry per scope (the query, each sink format, each source kind)
with each option's type, default and meaning in one place.

Contract:
* ``writer_options(settings)`` checks every ``.option(key, value)`` of a write_stream writer against
  the query's scope plus its sink format's, before anything is opened or any batch runs: a key no
  scope declares is refused naming the nearest valid key (difflib), a value of the wrong type or
  out of range is refused naming the option, the type it takes and what it does, a sink's missing
  required option (a Delta table's path, PostgreSQL's url and table) is refused saying how to give
  it. Spark's camelCase spellings (checkpointLocation, queryName, partitionBy, numRows, dbtable)
  are aliases of the snake_case names. Keys under a declared prefix (``kafka.`` of the Kafka sink)
  pass through to the client that owns them.
* The result is an ``Options`` mapping: canonical name -> converted value, defaults filled in.
  Reading a name that no scope of it declares is a KeyError (a programming error, not a user's).
* ``source_options(kind, options, where)`` does the same for the keyword options of a
  ``read_stream.<kind>(...)`` source.
* increments/options_doc.py renders the scopes for README.md; tests/engine/test_options.py checks
  the README's tables against the registry.
"""
from __future__ import annotations

import difflib
import json
import os
from dataclasses import dataclass
from typing import Any, Iterable, Mapping

from .durations import parse_duration_ms
from .errors import AnalysisException
from .identifiers import check_query_name

_TRUE = ("true", "1", "yes", "on")
_FALSE = ("false", "0", "no", "off")


class OptionError(AnalysisException, ValueError):
    """An option is unknown, of the wrong type, out of range or missing (named, with what to do)."""


@dataclass(frozen=True)
class Option:
    """One declared option. kind: int, bool, str, path, choice, duration, dict, json_dict, columns,
    int_or_auto. `default_doc` is how the README shows a default computed elsewhere."""
    name: str
    kind: str
    default: Any = None
    doc: str = ""
    aliases: tuple[str, ...] = ()
    choices: tuple[str, ...] = ()
    minimum: int | None = None
    required: str | None = None     # a missing value's message (how to give it), when required
    default_doc: str | None = None

    @property
    def takes(self) -> str:
        k = self.kind
        if k == "choice":
            return " or ".join(repr(c) for c in self.choices)
        if k in ("int", "int_or_auto"):
            lo = f" >= {self.minimum}" if self.minimum is not None else ""
            return f"an integer{lo}" + (" or 'auto'" if k == "int_or_auto" else "")
        return {"bool": "true or false", "str": "a string", "path": "a path or URL",
                "duration": "a duration such as '30 seconds'", "dict": "a dict",
                "json_dict": "a dict (or its JSON text)", "columns": "a column list ('a,b' or ['a', 'b'])"}.get(k, k)

    def convert(self, value: Any, where: str) -> Any:
        """`value` as this option's type, or OptionError naming the option and what it takes."""
        def bad(why: str = "") -> OptionError:
            return OptionError(f"{where}: option {self.name}={value!r}{why}: it takes {self.takes} ({self.doc})")
        k = self.kind
        if value is None:
            return None
        if k in ("int", "int_or_auto"):
            if k == "int_or_auto" and isinstance(value, str) and value.strip().lower() == "auto":
                return "auto"
            if isinstance(value, bool) or not isinstance(value, (int, str)):
                raise bad()
            try:
                v = int(value.strip()) if isinstance(value, str) else value
            except ValueError:
                raise bad() from None
            if self.minimum is not None and v < self.minimum:
                raise bad()
            return v
        if k == "bool":
            if isinstance(value, bool):
                return value
            if isinstance(value, int) and value in (0, 1):
                return bool(value)
            if isinstance(value, str) and value.strip().lower() in _TRUE + _FALSE:
                return value.strip().lower() in _TRUE
            raise bad()
        if k == "str":
            if not isinstance(value, str):
                raise bad()
            return value
        if k == "query_name":
            return check_query_name(value, f"{where}: option query_name")
        if k == "path":
            if not isinstance(value, (str, os.PathLike)):
                raise bad()
            return os.fspath(value)
        if k == "choice":
            if not isinstance(value, str) or value.strip().lower() not in self.choices:
                raise bad()
            return value.strip().lower()
        if k == "duration":
            if isinstance(value, bool) or not isinstance(value, (str, int, float)):
                raise bad()
            try:
                ms = parse_duration_ms(value)
            except ValueError:
                raise bad() from None
            if ms <= 0:
                raise bad(" (not positive)")
            return value
        if k == "dict":
            if not isinstance(value, Mapping):
                raise bad()
            return dict(value)
        if k == "json_dict":
            if isinstance(value, str):
                try:
                    value = json.loads(value)
                except ValueError:
                    raise bad(" (not JSON)") from None
            if not isinstance(value, Mapping):
                raise bad()
            return dict(value)
        if k == "columns":
            if isinstance(value, str):
                cols = [c.strip() for c in value.split(",") if c.strip()]
            elif isinstance(value, (list, tuple)) and all(isinstance(c, str) for c in value):
                cols = list(value)
            else:
                raise bad()
            return cols or None
        return value


@dataclass(frozen=True)
class Scope:
    """The options of one scope; `prefixes`: keys starting with one of them pass through."""
    name: str
    title: str
    options: tuple[Option, ...]
    prefixes: tuple[str, ...] = ()
    passthrough: str = ""          # what else the scope takes (documentation)

    def find(self, key: str) -> Option | None:
        for o in self.options:
            if key == o.name or key in o.aliases:
                return o
        return None

    def names(self) -> list[str]:
        return [o.name for o in self.options]


def _o(name: str, kind: str, default: Any = None, doc: str = "", **kw: Any) -> Option:
    return Option(name, kind, default, doc, **kw)


QUERY = Scope("query", "every query (`write_stream.option`)", (
    _o("checkpoint_location", "path", None, "the checkpoint; same as .checkpoint_location(path)",
       aliases=("checkpointLocation",), default_doc="none (required except for memory and console)"),
    _o("path", "path", None, "the sink's table or directory; same as .start(path)"),
    _o("query_name", "query_name", None, "the query's name (letters, digits, `_`, `-`); same as .query_name(name)",
       aliases=("queryName",)),
    _o("log_url", "str", None, "SQLAlchemy URL of the offsets/commits log, e.g. `postgresql+psycopg://user@host/db`; "
       "required (PostgreSQL) with a remote checkpoint",
       default_doc="env `INCREMENTS_LOG_URL`, else `sqlite:///<checkpoint>/log.sqlite`"),
    _o("storage_options", "dict", None, "object-store options (delta-rs' names) for the checkpoint, the sink and "
       "sources that set none; over the cloud's environment", default_doc="`{}`"),
    _o("local_dir", "path", None, "private local directory for caches (RocksDB working copies, objects fetched "
       "by the file source); a symbolic link at it or planted below it is refused",
       default_doc="env `INCREMENTS_LOCAL_DIR`, else `$TMPDIR/increments-<uid>`"),
    _o("state_store", "choice", "rocksdb", "`rocksdb` or `memory` (fixed at the first run)", choices=("rocksdb", "memory")),
    _o("state_partitions", "int", 4, "state partitions per stateful operator (fixed at the first run); the unit "
       "of parallelism", minimum=1),
    _o("changelog_checkpointing", "bool", None, "upload only each batch's changes plus periodic snapshots",
       default_doc="on for rocksdb"),
    _o("multiple_watermark_policy", "choice", "min", "`min` or `max` over several watermarked inputs",
       choices=("min", "max")),
    _o("target_batch_duration", "duration", "30 seconds", "what `max_files_per_trigger=\"auto\"` / "
       "`max_offsets_per_trigger=\"auto\"` size batches toward (below)"),
    _o("max_state_rows", "int", None, "Dagster asset check `state_rows`: fails above this many state rows",
       minimum=0, default_doc="none"),
    _o("max_kafka_lag", "int", None, "Dagster asset check `kafka_lag`: fails above this many records behind",
       minimum=0, default_doc="none"),
    _o("max_watermark_lag", "duration", None, "Dagster asset check `watermark_lag`: fails when the watermark "
       "trails the batch's timestamp by more", default_doc="none"),
))

_PATH_NEEDED = ".start('lake/gold/table'), .option('path', ...) or @streaming_query(path=...)"
SINKS: dict[str, Scope] = {
    "delta": Scope("delta", "`format(\"delta\")`", (
        _o("partition_by", "columns", None, "partition columns of a table the sink creates", aliases=("partitionBy",)),
        _o("table_properties", "dict", None, "Delta table properties set when the sink creates the table, e.g. "
           "`{\"delta.enableChangeDataFeed\": \"true\"}` so other queries can read its change feed"),
    )),
    "parquet": Scope("parquet", "`format(\"parquet\")`", ()),
    "postgres": Scope("postgres", "`format(\"postgres\")`", (
        _o("url", "str", None, "SQLAlchemy URL of the database, e.g. `postgresql+psycopg://user@host/db`",
           required=".option('url', 'postgresql+psycopg://user@host/db')"),
        _o("table", "str", None, "the table (`schema.table` or `table`)", aliases=("dbtable",),
           required=".option('table', 'name')"),
    )),
    "iceberg": Scope("iceberg", "`format(\"iceberg\")`", (
        _o("table", "str", None, "the table, `namespace.table` (or .start('namespace.table'))"),
        _o("catalog", "json_dict", None, "the PyIceberg catalog's properties, e.g. `{\"type\": \"sql\", \"uri\": ..., "
           "\"warehouse\": ...}`"),
        _o("partition_by", "columns", None, "partition columns of a table the sink creates", aliases=("partitionBy",)),
    )),
    "kafka": Scope("kafka", "`format(\"kafka\")`", (
        _o("topic", "str", None, "the topic of every row (overrides a topic column)"),
        _o("delivery_guarantee", "choice", "exactly_once", "`exactly_once` (one Kafka transaction per batch) or "
           "`at_least_once` (an idempotent producer without transactions)", choices=("exactly_once", "at_least_once")),
        _o("marker_topic", "str", "increments_sink_markers", "where the batch marker lives"),
        _o("transactional_id_prefix", "str", "increments-", "prefix of the transactional id and marker group"),
    ), prefixes=("kafka.",), passthrough="any `kafka.<property>` of the producer, librdkafka's names"),
    "memory": Scope("memory", "`format(\"memory\")`", ()),
    "console": Scope("console", "`format(\"console\")`", (
        _o("num_rows", "int", 20, "rows shown per batch", aliases=("numRows",), minimum=1),
        _o("truncate", "bool", True, "cut cells to 20 characters"),
    )),
    "foreach_batch": Scope("foreach_batch", "`foreach_batch(fn)` and `.sink(obj)`", ()),
}
SINKS["postgresql"] = SINKS["postgres"]

SOURCES: dict[str, Scope] = {
    "files": Scope("files", "`read_stream.files` (json, csv, parquet)", (
        _o("max_files_per_trigger", "int_or_auto", None, "files per batch (`\"auto\"`: sized toward "
           "target_batch_duration)", aliases=("maxFilesPerTrigger",), minimum=1, default_doc="all"),
        _o("fail_on_data_loss", "bool", True, "fail when a file read before is gone or changed",
           aliases=("failOnDataLoss",)),
        _o("header", "bool", False, "CSV: the first line names the columns"),
        _o("delimiter", "str", ",", "CSV: the field separator", aliases=("sep",)),
        _o("storage_options", "dict", None, "object-store options of this source (over the query's)"),
        _o("wait_for_path", "bool", False, "an absent path is an empty source until it appears"),
        _o("changed_files_window", "int", 10_000, "the most recently read files checked for changes at every plan "
           "(0: only the previous batch's)", minimum=0),
    )),
    "kafka": Scope("kafka", "`read_stream.kafka`", (
        _o("starting_offsets", "any", "earliest", "earliest, latest, or a JSON of per-partition offsets",
           aliases=("startingOffsets",)),
        _o("max_offsets_per_trigger", "int_or_auto", None, "records per batch", aliases=("maxOffsetsPerTrigger",),
           minimum=1, default_doc="all"),
        _o("fail_on_data_loss", "bool", True, "fail when offsets the query needs expired", aliases=("failOnDataLoss",)),
        _o("fetch_timeout_ms", "int", 60_000, "how long a read waits for the batch's end offsets", minimum=1),
    ), passthrough="any librdkafka consumer property, `_` for `.`: `group_id`, `security_protocol`, ..."),
    "delta": Scope("delta", "`read_stream.delta`", (
        _o("max_files_per_trigger", "int_or_auto", None, "files per batch", aliases=("maxFilesPerTrigger",),
           minimum=1, default_doc="all"),
        _o("storage_options", "dict", None, "object-store options of this source (over the query's)"),
        _o("ignore_changes", "bool", False, "re-read rewritten files instead of failing (as Spark's ignoreChanges)",
           aliases=("ignoreChanges",)),
    )),
    "delta_change_feed": Scope("delta_change_feed", "`read_stream.delta(read_change_feed=True)`", (
        _o("max_files_per_trigger", "int_or_auto", None, "files per batch", aliases=("maxFilesPerTrigger",),
           minimum=1, default_doc="all"),
        _o("max_bytes_per_trigger", "any", None, "bytes per batch (e.g. '64 MiB')", aliases=("maxBytesPerTrigger",)),
        _o("fail_on_data_loss", "bool", True, "fail when versions the query needs were vacuumed",
           aliases=("failOnDataLoss",)),
        _o("storage_options", "dict", None, "object-store options of this source (over the query's)"),
    )),
    "iceberg": Scope("iceberg", "`read_stream.iceberg`", (
        _o("max_files_per_trigger", "int_or_auto", None, "files per batch", minimum=1, default_doc="all"),
        _o("max_rows_per_trigger", "int", None, "rows per batch", minimum=1, default_doc="all"),
        _o("skip_overwrite_snapshots", "bool", False, "skip overwrite snapshots instead of failing"),
        _o("skip_delete_snapshots", "bool", False, "skip delete snapshots instead of failing"),
        _o("starting_snapshot_id", "int", None, "start after this snapshot", minimum=0),
        _o("storage_options", "dict", None, "object-store options of the table's files"),
    )),
}


class Options(Mapping):
    """Resolved options: canonical name -> value (converted, defaults filled in); `passthrough`
    holds the prefixed keys as given; `given` the names the user set."""

    def __init__(self, values: dict[str, Any], scopes: Iterable[Scope], given: set[str],
                 passthrough: dict[str, Any]):
        self._values, self._scopes, self.given, self.passthrough = values, tuple(scopes), given, passthrough

    def __getitem__(self, name: str) -> Any:
        if name not in self._values:
            raise KeyError(f"option {name!r} is not declared in {[s.name for s in self._scopes]} (increments/options.py)")
        return self._values[name]

    def get(self, name: str, default: Any = None) -> Any:
        """As [name], with `default` for a declared option that is None; an undeclared name is a KeyError."""
        v = self[name]
        return default if v is None else v

    def __iter__(self):
        return iter(self._values)

    def __len__(self) -> int:
        return len(self._values)


def _nearest(key: str, candidates: list[str]) -> str:
    near = difflib.get_close_matches(key, candidates, n=1, cutoff=0.6) or \
        difflib.get_close_matches(key.lower(), [c.lower() for c in candidates], n=1, cutoff=0.6)
    if not near:
        return "."
    hit = next(c for c in candidates if c.lower() == near[0].lower())
    return f"; did you mean {hit!r}?"


def refuse_unknown(keys: Iterable[str], valid: Iterable[str], where: str, what: str = "option") -> None:
    """OptionError for the first of `keys` not in `valid`, naming the nearest valid one (for the
    option sets declared elsewhere: @streaming_query's, in orchestration/factory.py)."""
    valid = sorted(valid)
    for key in keys:
        if key not in valid:
            raise OptionError(f"{where}: unknown {what} {key!r}{_nearest(key, valid)} Valid {what}s here: "
                              f"{', '.join(valid)}")


def resolve(raw: Mapping[str, Any], scopes: Iterable[Scope], where: str, what: str = "option",
            required: bool = True) -> Options:
    """Check `raw` against `scopes` (module doc); OptionError on the first problem. required=False:
    a missing required option is not refused (a reader of the query-level options only)."""
    scopes = tuple(scopes)
    values: dict[str, Any] = {}
    given: set[str] = set()
    passthrough: dict[str, Any] = {}
    for key, value in raw.items():
        key = str(key)
        opt = next((o for s in scopes if (o := s.find(key)) is not None), None)
        if opt is None:
            if any(key.startswith(p) for s in scopes for p in s.prefixes):
                passthrough[key] = value
                continue
            names = sorted({n for s in scopes for o in s.options for n in (o.name, *o.aliases)})
            valid = ", ".join(o.name for s in scopes for o in s.options)
            prefixes = [p for s in scopes for p in s.prefixes]
            raise OptionError(f"{where}: unknown {what} {key!r}{_nearest(key, names)} Valid {what}s here: {valid}"
                              + (f" (and {', '.join(repr(p) + '...' for p in prefixes)})" if prefixes else ""))
        if opt.name in given:
            raise OptionError(f"{where}: {what} {opt.name!r} is given twice (as {key!r} and another spelling)")
        given.add(opt.name)
        values[opt.name] = opt.convert(value, where)
    for s in scopes:
        for o in s.options:
            values.setdefault(o.name, o.default)
            if required and o.required and values[o.name] is None:
                raise OptionError(f"{where}: {s.title} needs the {what} {o.name!r}: {o.required}")
    return Options(values, scopes, given, passthrough)


def sink_options(fmt: str, options: Mapping[str, Any] | None, where: str) -> Options:
    """A sink's options: the writer's, already resolved (an Options), or a plain dict (a sink
    built by hand) checked against the query's scope and the format's."""
    if isinstance(options, Options):
        return options
    return resolve(dict(options or {}), (QUERY, SINKS[fmt]), where)


def sink_scope(settings: Any) -> Scope:
    """The scope of the writer's sink: its format's, or foreach_batch's for foreach_batch(fn) and .sink(obj)."""
    if settings.foreach_batch is not None or settings.sink is not None:
        return SINKS["foreach_batch"]
    fmt = (settings.format or "memory").lower()
    if fmt not in SINKS:
        names = sorted(k for k in SINKS if k != "foreach_batch")
        raise OptionError(f"unknown sink format {settings.format!r}{_nearest(fmt, names)} Use one of {', '.join(names)}, "
                          "or foreach_batch(fn)")
    return SINKS[fmt]


def writer_options(settings: Any, where: str | None = None, required: bool = True) -> Options:
    """The writer's options checked against the query's scope and its sink's (module doc).
    required=False: what the sink needs to be built (a path, a url) is not asked for (the CLI's
    history, migrate-log and check read the query-level options of a writer with this)."""
    scope = sink_scope(settings)
    name = settings.query_name or settings.options.get("query_name") or settings.options.get("queryName")
    where = where or (f"query {name!r}" if name else "write_stream") + (
        f", format({settings.format!r})" if scope.name != "foreach_batch" else "")
    opts = resolve(settings.options, (QUERY, scope), where, required=required)
    if not required:
        return opts
    if scope.name in ("delta", "parquet") and not (settings.path or opts["path"]):
        raise OptionError(f"{where}: {scope.title} needs a table path: {_PATH_NEEDED}" if scope.name == "delta" else
                          f"{where}: {scope.title} needs a path: .start('out/dir') or .option('path', ...)")
    if scope.name == "iceberg" and not (settings.path or opts["path"] or opts["table"]):
        raise OptionError(f"{where}: {scope.title} needs a table: .start('namespace.table') or .option('table', ...)")
    if scope.name == "kafka" and not opts.passthrough.get("kafka.bootstrap.servers"):
        raise OptionError(f"{where}: {scope.title}: option 'kafka.bootstrap.servers' must be specified for "
                          "configuring the Kafka producer: .option('kafka.bootstrap.servers', 'host:9092')")
    return opts


def source_options(kind: str, options: Mapping[str, Any], where: str) -> dict[str, Any]:
    """The keyword options of read_stream.<kind>(...) checked against its scope (module doc), as
    keyword arguments for the source's constructor: only the options given, canonical names."""
    scope = SOURCES[kind]
    if kind == "kafka":       # Kafka client properties pass through; librdkafka checks their names
        declared = {k: v for k, v in options.items() if scope.find(k) is not None}
        out = resolve(declared, (scope,), where, "keyword option")
        client = {k: v for k, v in options.items() if k not in declared}
        _check_kafka_properties(client, [n for o in scope.options for n in (o.name, *o.aliases)], where)
        return {**{n: out[n] for n in out.given}, **client}
    out = resolve(options, (scope,), where, "keyword option")
    return {n: out[n] for n in out.given}


def _check_kafka_properties(client: dict[str, Any], ours: list[str], where: str) -> None:
    """Refuse a name librdkafka does not know (it says so when a client is configured; no
    connection is made), naming our nearest option when it looks like a misspelling of one. Only
    the name is checked here: values are the consumer's to judge when the source opens."""
    if not client:
        return
    from confluent_kafka import Consumer, KafkaException     # noqa: PLC0415 - only with client properties
    conf = {"group.id": "increments-option-check"}
    for k, v in client.items():
        prop = k.replace("_", ".")
        try:
            Consumer({**conf, prop: v}).close()
        except KafkaException as e:
            reason = e.args[0].str() if e.args and hasattr(e.args[0], "str") else str(e)
            if "No such configuration property" in reason:
                raise OptionError(f"{where}: unknown keyword option {k!r}{_nearest(k, ours)} It is not one of "
                                  f"{', '.join(o.name for o in SOURCES['kafka'].options)} nor a Kafka consumer "
                                  f"property ({reason})") from None
            # another complaint (a file named by an ssl.* property that exists only where the query
            # runs, a value that needs another property): the consumer reports it when the source opens
