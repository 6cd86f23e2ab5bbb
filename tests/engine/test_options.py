"""Declared options (increments/options.py): unknown keys and wrong value types are refused before
anything is opened or any batch runs, naming the nearest valid key; aliases and defaults as
documented; the README's tables are the registry's (issues 27.6 and 34.2)."""
from __future__ import annotations

import os
import re

import pytest

import increments as inc
from increments.options import OptionError
from increments.options_doc import markdown_all, readme_block

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _input(tmp_path, rows=3):
    d = tmp_path / "in"
    d.mkdir(exist_ok=True)
    (d / "a.json").write_text("".join(f'{{"id": {i}}}\n' for i in range(rows)))
    return d


def _refused(writer, tmp_path, *, path=None):
    """Start the writer; assert it is refused before the checkpoint exists or a batch ran."""
    with pytest.raises(OptionError) as ei:
        writer.start(path) if path else writer.start()
    assert not (tmp_path / "chk").exists(), "the checkpoint was created before the refusal"
    return str(ei.value)


def test_misspelled_writer_option_is_refused_naming_the_nearest(tmp_path):
    seen = []
    w = (inc.read_stream.files(str(_input(tmp_path)), "json", "id BIGINT").group_by("id").count()
         .write_stream.foreach_batch(lambda t, b: seen.append(b)).output_mode("update")
         .option("state_partition", 7).checkpoint_location(str(tmp_path / "chk")).trigger(available_now=True))
    msg = _refused(w, tmp_path)
    assert "unknown option 'state_partition'; did you mean 'state_partitions'?" in msg
    assert seen == []


@pytest.mark.parametrize("key,value,says", [
    ("state_partitions", "seven", "option state_partitions='seven': it takes an integer >= 1"),
    ("state_partitions", 1.5, "option state_partitions=1.5: it takes an integer >= 1"),
    ("state_partitions", 0, "option state_partitions=0: it takes an integer >= 1"),
    ("state_store", "lsm", "option state_store='lsm': it takes 'rocksdb' or 'memory'"),
    ("changelog_checkpointing", "sometimes", "it takes true or false"),
    ("target_batch_duration", "soon", "option target_batch_duration='soon': it takes a duration"),
    ("storage_options", "AWS_REGION=x", "option storage_options='AWS_REGION=x': it takes a dict"),
])
def test_wrong_value_types_are_refused_naming_the_option(tmp_path, key, value, says):
    w = (inc.read_stream.files(str(_input(tmp_path)), "json", "id BIGINT").write_stream.format("parquet")
         .option(key, value).checkpoint_location(str(tmp_path / "chk")))
    msg = _refused(w, tmp_path, path=str(tmp_path / "out"))
    assert says in msg
    assert not (tmp_path / "out").exists()


def test_sink_options_belong_to_their_format(tmp_path):
    src = inc.read_stream.files(str(_input(tmp_path)), "json", "id BIGINT")
    w = src.write_stream.format("delta").option("partitionby", "id").checkpoint_location(str(tmp_path / "chk"))
    assert "unknown option 'partitionby'; did you mean 'partition_by'?" in _refused(w, tmp_path,
                                                                                    path=str(tmp_path / "t"))
    # a Delta option on a Parquet sink: not silently ignored
    w = src.write_stream.format("parquet").option("table_properties", {"a": "b"}).checkpoint_location(
        str(tmp_path / "chk"))
    msg = _refused(w, tmp_path, path=str(tmp_path / "out"))
    assert "format('parquet'): unknown option 'table_properties'" in msg and "Valid options here:" in msg
    w = src.write_stream.format("detla").checkpoint_location(str(tmp_path / "chk"))
    assert "unknown sink format 'detla'; did you mean 'delta'?" in _refused(w, tmp_path, path=str(tmp_path / "t"))


def test_a_sink_without_what_it_needs_says_how_to_give_it(tmp_path):
    src = inc.read_stream.memory("id BIGINT")
    w = src.write_stream.format("postgres").option("table", "t").checkpoint_location(str(tmp_path / "chk"))
    assert "needs the option 'url': .option('url', 'postgresql+psycopg://" in _refused(w, tmp_path)
    w = src.write_stream.format("delta").checkpoint_location(str(tmp_path / "chk"))
    assert "needs a table path: .start('lake/gold/table'), .option('path', ...)" in _refused(w, tmp_path)


def test_spark_spellings_are_aliases(tmp_path, capsys):
    d = _input(tmp_path, rows=25)         # one file: maxFilesPerTrigger=1 makes one batch
    q = (inc.read_stream.files(str(d), "json", "id BIGINT", maxFilesPerTrigger=1).write_stream.format("console")
         .option("numRows", "2").option("truncate", "false").option("checkpointLocation", str(tmp_path / "chk"))
         .trigger(available_now=True).start())
    q.await_termination()
    out = capsys.readouterr().out
    assert out.count("only showing top 2 rows") == 1, out      # one batch of 25 rows, 2 shown
    assert (tmp_path / "chk").exists()


def test_the_same_option_twice_under_two_spellings_is_refused(tmp_path):
    w = (inc.read_stream.memory("id BIGINT").write_stream.format("parquet")
         .option("checkpointLocation", str(tmp_path / "chk")).option("checkpoint_location", str(tmp_path / "chk")))
    assert "'checkpoint_location' is given twice" in _refused(w, tmp_path, path=str(tmp_path / "out"))


@pytest.mark.parametrize("read,says", [
    (lambda d: inc.read_stream.files(d, "json", "id BIGINT", max_file_per_trigger=2),
     "unknown keyword option 'max_file_per_trigger'; did you mean 'max_files_per_trigger'?"),
    (lambda d: inc.read_stream.files(d, "csv", "id BIGINT", header="maybe"),
     "option header='maybe': it takes true or false"),
    (lambda d: inc.read_stream.files(d, "json", "id BIGINT", max_files_per_trigger="two"),
     "option max_files_per_trigger='two': it takes an integer >= 1 or 'auto'"),
    (lambda d: inc.read_stream.delta(d, ignore_change=True),
     "unknown keyword option 'ignore_change'; did you mean 'ignore_changes'?"),
    (lambda d: inc.read_stream.kafka("127.0.0.1:9", topic="t", max_offset_per_trigger=10),
     "unknown keyword option 'max_offset_per_trigger'; did you mean 'max_offsets_per_trigger'?"),
    (lambda d: inc.read_stream.kafka("127.0.0.1:9", topic="t", group_idd="g"),
     "No such configuration property: \"group.idd\""),
])
def test_source_keyword_options_are_checked(tmp_path, read, says):
    with pytest.raises(OptionError) as ei:
        read(str(tmp_path))
    assert says in str(ei.value)


def test_kafka_client_properties_pass_through():
    src = inc.read_stream.kafka("127.0.0.1:9", topic="t", group_id="g", max_offsets_per_trigger="auto")
    assert src is not None


def test_readme_tables_are_the_registry():
    with open(os.path.join(ROOT, "README.md")) as f:
        block = readme_block(f.read())
    assert block is not None, "README.md lost its options markers"
    assert block == markdown_all(), "README.md's options tables differ: run python -m increments.options_doc README.md"


def test_writer_options_are_read_only_through_the_registry():
    """No module reads the writer's raw options dict (settings.options.get(...)): every read is a
    declared option of increments/options.py."""
    raw = re.compile(r"\b(settings|s|w\._s)\.options\.(get|pop)\(|\bsettings\.options\[")
    hits = []
    for top in ("increments", "orchestration"):
        for dirpath, _, files in os.walk(os.path.join(ROOT, top)):
            for f in files:
                if f.endswith(".py") and f != "options.py":
                    with open(os.path.join(dirpath, f)) as fh:
                        hits += [f"{f}:{i}" for i, line in enumerate(fh, 1) if raw.search(line)]
    assert hits == []
