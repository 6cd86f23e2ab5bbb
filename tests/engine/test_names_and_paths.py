"""Names and paths (issue 28.8): one source directory however its path is spelled (also on
checkpoints written before the paths were normalized); duplicated column names and unusable query
names refused where they are declared, saying what is allowed; PostgreSQL table and column names
with any character (`:param`, quotes) are identifiers, never bind parameters or SQL."""
from __future__ import annotations

import json

import pytest
import sqlalchemy as sa

import increments as inc
from increments.identifiers import InvalidNameError

SCHEMA = "id BIGINT"


def _run(path, chk, got):
    q = (inc.read_stream.files(path, "json", SCHEMA).select("id").write_stream
         .foreach_batch(lambda t, b: got.extend(t.column("id").to_pylist()))
         .checkpoint_location(str(chk)).trigger(available_now=True).start())
    q.await_termination()


def test_one_source_however_its_path_is_written(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "a.json").write_text('{"id": 1}\n')
    got: list = []
    _run("in/", tmp_path / "chk", got)                            # relative, trailing slash
    (tmp_path / "in" / "b.json").write_text('{"id": 2}\n')
    _run(str(tmp_path / "in"), tmp_path / "chk", got)             # absolute
    (tmp_path / "in" / "c.json").write_text('{"id": 3}\n')
    _run("./in", tmp_path / "chk", got)
    assert got == [1, 2, 3]
    conf = json.loads((tmp_path / "chk" / "conf.json").read_text())
    assert conf["plan"]["sources"] == [f"FileStreamSource[{tmp_path / 'in'}]"]


def test_a_checkpoint_that_recorded_the_path_as_given_still_starts(tmp_path, monkeypatch):
    """Earlier releases recorded the path as written ("in/"): a start with the absolute path is the
    same source (normalized when compared; conf.json is left as it is)."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "a.json").write_text('{"id": 1}\n')
    got: list = []
    _run("in/", tmp_path / "chk", got)
    conf_file = tmp_path / "chk" / "conf.json"
    conf = json.loads(conf_file.read_text())
    conf["plan"]["sources"] = ["FileStreamSource[in/]"]           # as an earlier release wrote it
    conf_file.write_text(json.dumps(conf))
    (tmp_path / "in" / "b.json").write_text('{"id": 2}\n')
    _run(str(tmp_path / "in") + "/", tmp_path / "chk", got)
    assert got == [1, 2]
    (tmp_path / "other").mkdir()                                  # another directory is still another source
    with pytest.raises(inc.IncompatibleCheckpointError, match="sources: checkpoint has"):
        _run(str(tmp_path / "other"), tmp_path / "chk", got)


@pytest.mark.parametrize("declare", [
    lambda d: inc.read_stream.files(d, "json", "id BIGINT, name STRING, id STRING"),
    lambda d: inc.read_stream.memory("id BIGINT, name STRING, id STRING"),
    lambda d: inc.read_stream.memory("v STRING").parse_json("id BIGINT, name STRING, id STRING", "v"),
])
def test_a_duplicated_column_is_refused_where_the_schema_is_declared(tmp_path, declare):
    with pytest.raises(ValueError, match="the column 'id' is declared twice; give each column its own name"):
        declare(str(tmp_path))


def test_columns_differing_only_in_case_are_one_name(tmp_path):
    with pytest.raises(ValueError, match="the columns 'id' and 'ID' are one name"):
        inc.read_stream.memory("id BIGINT, ID STRING")


@pytest.mark.parametrize("name", ["../../x", "a b", "", "q/1", "-lead", "x" * 129, "naïve"])
def test_unusable_query_names_are_refused_at_definition(name):
    w = inc.read_stream.memory("id BIGINT").write_stream
    with pytest.raises(InvalidNameError, match="a query name is 1 to 128 letters, digits, '_' and '-'"):
        w.query_name(name)
    with pytest.raises(InvalidNameError, match="letters, digits, '_' and '-'"):
        w.format("memory").option("queryName", name).start()


def test_a_usable_query_name_is_kept():
    w = inc.read_stream.memory("id BIGINT").write_stream.query_name("clicks_per-hour2")
    assert w.settings.query_name == "clicks_per-hour2"


@pytest.mark.parametrize("table", [":param", 'odd"name', "x:y:z"])
def test_postgres_table_and_column_names_are_identifiers(tmp_path, pg_url, table):
    mem = inc.read_stream.memory("k STRING, v BIGINT")
    agg = mem.group_by("k").agg(inc.functions.sum("v").alias(":total"))
    q = (agg.write_stream.format("postgres").output_mode("update").option("url", pg_url).option("table", table)
         .checkpoint_location(str(tmp_path / "chk")).start())
    mem.add_data([{"k": "a", "v": 1}, {"k": "b", "v": 2}])
    q.process_all_available()
    mem.add_data([{"k": "a", "v": 10}])
    q.process_all_available()
    q.stop()
    quoted = '"' + table.replace('"', '""') + '"'
    eng = sa.create_engine(pg_url, poolclass=sa.pool.NullPool)
    with eng.connect() as c:       # the driver's SQL directly: no bind-parameter parsing of the names
        rows = sorted(c.exec_driver_sql(f'SELECT k, ":total" FROM {quoted}').all())
    eng.dispose()
    assert rows == [("a", 11), ("b", 2)]
    # append mode (COPY) too
    mem2 = inc.read_stream.memory("k STRING")
    q = (mem2.select("k", "k AS \":c\"").write_stream.format("postgres").option("url", pg_url)
         .option("table", table + "_a").checkpoint_location(str(tmp_path / "chk2")).start())
    mem2.add_data([{"k": "x"}])
    q.process_all_available()
    q.stop()
    quoted = '"' + (table + "_a").replace('"', '""') + '"'
    eng = sa.create_engine(pg_url, poolclass=sa.pool.NullPool)
    with eng.connect() as c:
        assert c.exec_driver_sql(f'SELECT k, ":c" FROM {quoted}').all() == [("x", "x")]
    eng.dispose()


def test_auto_cdc_postgres_table_named_like_a_bind_parameter(tmp_path, pg_url):
    import pyarrow as pa

    from increments.sinks.auto_cdc_postgres import AutoCdcPostgresSink
    from increments.sinks.base import SinkContext
    sink = AutoCdcPostgresSink({"url": pg_url, "table": ":cdc"}, 1, ["id"])
    sink.open(SinkContext("qid-1", "q", "append", str(tmp_path / "chk")))
    schema = pa.schema([("id", pa.int64()), (":name", pa.string()), ("__action", pa.string())])
    sink.add_batch(0, pa.Table.from_pylist([{"id": 1, ":name": "a", "__action": "upsert"},
                                            {"id": 2, ":name": "b", "__action": "upsert"}], schema=schema))
    sink.add_batch(1, pa.Table.from_pylist([{"id": 1, ":name": "a2", "__action": "upsert"},
                                            {"id": 2, ":name": None, "__action": "delete"}], schema=schema))
    with sink.engine().connect() as c:
        assert c.exec_driver_sql('SELECT id, ":name" FROM ":cdc"').all() == [(1, "a2")]
    sink.close()
