"""The compiled flat-JSON decoder (increments/native/_flatjson.c) against DuckDB's read_json.

Contract: for any file, the native path (file_formats._read_json_native) gives exactly the table
DuckDB's path (_read_json_duckdb) gives -- same schema, values, nulls, the bits of every double --
or declines (None), and then the DuckDB path decides (its table or its error, unchanged). Lines
within the fast path (flat objects of strings, integers, doubles, booleans and Z-suffixed
timestamps) are not declined. The module must be built: a checkout without it fails here.
"""
from __future__ import annotations

import json
import struct
import threading

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from increments.errors import MalformedInputError
from increments.sources import file_formats as ff
from increments.types import parse_schema

SCHEMA = parse_schema("s STRING, i BIGINT, n INT, sm SMALLINT, ti TINYINT, d DOUBLE, b BOOLEAN, "
                      "t TIMESTAMP, tn TIMESTAMP_NTZ")
KIND = {"s": "str", "i": "int", "n": "int", "sm": "int", "ti": "int", "d": "num", "b": "bool", "t": "ts", "tn": "ts"}


def test_the_decoder_is_built_and_used():
    """Without the build, every JSON file goes to DuckDB (correct, slower): a checkout not built
    since the decoder came fails here. Build it: pip install -e . (or python setup.py build_ext --inplace)."""
    try:
        from increments.native import _flatjson   # noqa: PLC0415 - the point of the test: importable
    except ImportError as e:
        pytest.fail(f"increments/native/_flatjson is not built ({e}): run pip install -e . in the checkout")
    assert ff._flatjson is _flatjson
    m = _flatjson
    assert ff._NATIVE_KINDS == {"VARCHAR": m.STRING, "TINYINT": m.INT8, "SMALLINT": m.INT16, "INTEGER": m.INT32,
                                "BIGINT": m.INT64, "DOUBLE": m.FLOAT64, "BOOLEAN": m.BOOL,
                                "TIMESTAMPTZ": m.TIMESTAMP, "TIMESTAMP": m.TIMESTAMP}
    assert _flatjson.decode(b'{"a": 1}\n', ((b"a", _flatjson.INT64),))[0] == 1


def _bits(table: pa.Table) -> dict:
    """The table's values, doubles as their bit patterns (so that -0.0 differs from 0.0)."""
    out = {}
    for name in table.column_names:
        col = table.column(name)
        vals = col.to_pylist()
        if pa.types.is_floating(col.type):
            vals = [None if v is None else struct.pack("<d", v) for v in vals]
        out[name] = vals
    return out


def _compare(tmp_path, content: bytes, schema=SCHEMA, only=None, must_accept=False) -> None:
    path = tmp_path / "f.json"
    path.write_bytes(content)
    native = ff._read_json_native(str(path), schema, only)
    if native is None:
        assert not must_accept, (content, ff._flatjson.decode(content, ff._native_plan(schema, only and tuple(only))[0]))
        return
    duck = ff._read_json_duckdb(str(path), schema, only)
    assert duck is not None, content
    assert native.schema == duck.schema
    assert _bits(native) == _bits(duck), content


# ---- the values of each kind: mostly within the fast path, some outside it ----
_text = st.text(st.characters(codec="utf-8"), max_size=12)


def _json_string(draw) -> str:
    t = draw(_text)
    return draw(st.sampled_from([
        json.dumps(t), json.dumps(t, ensure_ascii=False), json.dumps(t, ensure_ascii=False).replace("/", "\\/"),
        '"\\ud83d\\ude00"', '"\\u00e9\\u0000x"', '"\\ud800"', '"a\\x"', '"tab\\there"', '"\\b\\f\\r\\n\\"\\\\"',
    ]))


def _timestamp(draw) -> str:
    y = draw(st.sampled_from(["2026", "2024", "1900", "2000", "0001", "0000", "9999", "1969"]))
    mo, day = draw(st.integers(0, 13)), draw(st.integers(0, 32))
    h, mi, s = draw(st.integers(0, 25)), draw(st.integers(0, 61)), draw(st.integers(0, 61))
    frac = draw(st.sampled_from(["", ".", ".5", ".12", ".123456", ".1234567", ".000001", ".999999"]))
    sep = draw(st.sampled_from(["T", " ", "T", "t"]))
    zone = draw(st.sampled_from(["Z", "Z", "Z", "", "+00:00", "z", "+01:00"]))
    return f'"{y}-{mo:02d}-{day:02d}{sep}{h:02d}:{mi:02d}:{s:02d}{frac}{zone}"'


def _integer(draw) -> str:
    return draw(st.one_of(
        st.integers(-200, 200).map(str), st.integers(-2**70, 2**70).map(str),
        st.sampled_from(["-0", "0", "127", "128", "-128", "-129", "32767", "32768", "-32769", "2147483647",
                         "2147483648", "-2147483649", "9223372036854775807", "9223372036854775808",
                         "-9223372036854775808", "-9223372036854775809", "18446744073709551615", "01", "1.0", "1e3"]),
    ))


def _number(draw) -> str:
    return draw(st.one_of(
        st.floats(allow_nan=False, allow_infinity=False).map(repr),
        st.floats(allow_nan=False, allow_infinity=False, width=32).map(lambda f: f"{f:.9e}"),
        st.integers(-2**80, 2**80).map(str),
        st.tuples(st.integers(0, 10**20), st.integers(0, 10**25), st.integers(-330, 330)).map(
            lambda t: f"{t[0]}.{t[1]}e{t[2]}"),
        st.sampled_from(["-0", "-0.0", "0.0", "1e400", "-1e400", "1e-400", "4.9406564584124654e-324",
                         "2.4703282292062328e-324", "2.2250738585072011e-308", "1.7976931348623157e308",
                         "0.1000000000000000055511151231257827", "9007199254740993", "1E5", "1e+5", "1.", ".5"]),
    ))


_NESTED = ['{"y": [1, 2, {"z": null}]}', "[]", "{}", '[1, "a\\n", true, false, null, -2.5e3]', '{"y": 1, "y": 2}',
           "[1, 2,]", "NaN", "tru", '"unterminated']


@st.composite
def _value(draw, kind: str) -> str:
    wrong = draw(st.integers(0, 9)) == 0
    if wrong:
        kind = draw(st.sampled_from(["str", "int", "num", "bool", "ts", "nested"]))
    if draw(st.integers(0, 7)) == 0:
        return "null"
    if kind == "str":
        return _json_string(draw)
    if kind == "int":
        return _integer(draw)
    if kind == "num":
        return _number(draw)
    if kind == "bool":
        return draw(st.sampled_from(["true", "false"]))
    if kind == "ts":
        return _timestamp(draw)
    return draw(st.sampled_from(_NESTED))


@st.composite
def _line(draw) -> str:
    keys = draw(st.lists(st.sampled_from(list(KIND) + ["S", "I", "x", "y", "é", "T"]), max_size=9))
    ws = st.sampled_from(["", "", " ", "\t"])
    parts = []
    for k in keys:
        kind = KIND.get(k, "nested" if k in ("x", "y") else "str")
        parts.append(f'{draw(ws)}"{k}"{draw(ws)}:{draw(ws)}{draw(_value(kind))}{draw(ws)}')
    return draw(ws) + "{" + ",".join(parts) + "}" + draw(ws)


@st.composite
def _file(draw) -> bytes:
    lines = draw(st.lists(st.one_of(_line(), st.sampled_from(["", " ", "\t", "\r"])), max_size=8))
    end = draw(st.sampled_from(["\n", "\r\n"]))
    text = end.join(lines)
    if lines and draw(st.booleans()):
        text += end
    data = text.encode("utf-8")
    if draw(st.integers(0, 9)) == 0:
        data = b"\xef\xbb\xbf" + data
    return data


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=_file(), only=st.sampled_from([None, None, ["s", "t"], ["d"], ["i", "b", "tn"], []]))
def test_native_equals_duckdb_or_declines(tmp_path, data, only):
    _compare(tmp_path, data, only=only)


@st.composite
def _clean_line(draw) -> str:
    """A line within the fast path: declared keys once each (any order, some missing), exact
    names, values of the column's kind or null, undeclared keys with any valid JSON."""
    names = draw(st.permutations(list(KIND)))
    names = names[:draw(st.integers(1, len(names)))]
    parts = []
    for k in names:
        kind = KIND[k]
        if draw(st.integers(0, 6)) == 0:
            v = "null"
        elif kind == "str":
            v = json.dumps(draw(_text), ensure_ascii=draw(st.booleans()))
        elif kind == "int":
            lo, hi = {"i": (-2**63, 2**63 - 1), "n": (-2**31, 2**31 - 1), "sm": (-2**15, 2**15 - 1),
                      "ti": (-128, 127)}[k]
            v = str(draw(st.integers(lo, hi)))
        elif kind == "num":
            v = draw(st.one_of(st.floats(allow_nan=False, allow_infinity=False).map(repr),
                               st.integers(-2**70, 2**70).map(str)))
        elif kind == "bool":
            v = draw(st.sampled_from(["true", "false"]))
        else:
            v = (f'"{draw(st.integers(1, 9999)):04d}-{draw(st.integers(1, 12)):02d}-{draw(st.integers(1, 28)):02d}'
                 f'{draw(st.sampled_from("T "))}{draw(st.integers(0, 23)):02d}:{draw(st.integers(0, 59)):02d}:'
                 f'{draw(st.integers(0, 59)):02d}{draw(st.sampled_from(["", ".1", ".123456", ".05"]))}Z"')
        parts.append(f'"{k}": {v}')
    if draw(st.booleans()):
        parts.insert(draw(st.integers(0, len(parts))), f'"extra": {draw(st.sampled_from(_NESTED[:5]))}')
    return "{" + ", ".join(parts) + "}"


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(lines=st.lists(_clean_line(), max_size=6), only=st.sampled_from([None, ["s", "d", "t"]]),
       crlf=st.booleans())
def test_fast_path_lines_are_decoded_natively(tmp_path, lines, only, crlf):
    _compare(tmp_path, ("\r\n" if crlf else "\n").join(lines).encode(), only=only, must_accept=True)


@pytest.mark.parametrize("text", [
    '{"i": 3.7}', '{"i": true}', '{"i": "42"}', '{"b": "yes"}', '{"n": 2147483648}', '{"s": 1}',
    '{"t": "2026-02-30T00:00:00Z"}', '{"i": 1, "i": 2}', '{"i": 1}{"i": 2}', '[1]', '{"i": 1,}',
])
def test_a_declined_file_gets_the_duckdb_paths_result_or_error(tmp_path, text):
    """A file the decoder declines reads as before: DuckDB's table, or the same MalformedInputError
    (naming the file and line) as without the decoder."""
    path = tmp_path / "f.json"
    path.write_text('{"i": 1}\n' + text + "\n")
    assert ff._read_json_native(str(path), SCHEMA) is None
    try:
        expected = ff._read_json_duckdb(str(path), SCHEMA)
    except Exception as e:   # noqa: BLE001 - whichever it is, read_json_lines must raise the same
        expected = e
    saved = ff._flatjson
    try:
        results = []
        for decoder in (saved, None):
            ff._flatjson = decoder
            try:
                results.append(ff.read_json_lines(str(path), SCHEMA))
            except MalformedInputError as e:
                results.append(str(e))
    finally:
        ff._flatjson = saved
    assert isinstance(results[0], str) == isinstance(results[1], str)
    assert results[0] == results[1] if isinstance(results[0], str) else results[0].equals(results[1])
    if expected is not None and not isinstance(expected, Exception):
        assert results[0].equals(expected)


def test_many_files_and_pruned_columns(tmp_path):
    """read_json_lines_many: the files' rows in order, each file decoded alone (a last line without
    its newline stays a line of its file); `columns` leaves the others null, as DuckDB's path."""
    paths = []
    for k in range(3):
        p = tmp_path / f"{k}.json"
        p.write_bytes(b"".join(b'{"s": "f%d-%d", "i": %d, "t": "2026-11-01T00:00:0%dZ"}\n' % (k, j, j, j)
                               for j in range(k + 1)).rstrip(b"\n"))
        paths.append(str(p))
    for columns in (None, ["s"], ["i", "t"]):
        native = ff.read_json_lines_many(paths, SCHEMA, columns)
        saved, ff._flatjson = ff._flatjson, None
        try:
            duck = ff.read_json_lines_many(paths, SCHEMA, columns)
        finally:
            ff._flatjson = saved
        assert native.schema == duck.schema and native.to_pylist() == duck.to_pylist()
        assert native.num_rows == 6
        assert ff._read_json_native(paths, SCHEMA, columns) is not None


def test_types_outside_the_decoder_go_to_duckdb(tmp_path):
    path = tmp_path / "f.json"
    path.write_text('{"a": 1, "d": "2026-11-01"}\n')
    schema = parse_schema("a BIGINT, d DATE")
    assert ff._read_json_native(str(path), schema) is None
    assert ff._read_json_native(str(path), schema, ["a"]) is not None   # DATE pruned: not declared to the scan
    assert ff.read_json_lines(str(path), schema).to_pylist()[0]["a"] == 1


def test_decodes_run_in_parallel_threads(tmp_path):
    """The decode releases the GIL (the file source's read-ahead threads decode concurrently);
    results from several threads at once are each file's own."""
    paths = []
    for k in range(4):
        p = tmp_path / f"{k}.json"
        p.write_text("".join(f'{{"s": "v{k}-{j}", "i": {j * k}}}\n' for j in range(20000)))
        paths.append(str(p))
    results = [None] * 4

    def work(k):
        results[k] = ff.read_json_lines(paths[k], SCHEMA, ["s", "i"])
    threads = [threading.Thread(target=work, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for k, table in enumerate(results):
        assert table.num_rows == 20000
        assert table.column("s")[19999].as_py() == f"v{k}-19999" and table.column("i")[7].as_py() == 7 * k


def test_short_lines_grow_the_buffers(tmp_path):
    """Lines shorter than the decoder's first guess of a row's size (its buffers grow), with
    booleans, nulls and strings across the growth."""
    lines = [f'{{"i":{k},"b":{"true" if k % 3 else "false"},"s":{"null" if k % 5 == 0 else json.dumps(str(k))}}}'
             if k % 7 else '{"i":1}' for k in range(20000)]
    _compare(tmp_path, "\n".join(lines).encode(), must_accept=True)
    _compare(tmp_path, b'{"b":true}\n' + b"\n" * 5000 + b'{"b":false}\r\n', must_accept=True)


def test_a_duplicate_key_with_non_ascii_text_names_the_line(tmp_path):
    """DuckDB's error for this line is cut inside a character (its Python binding then raises
    UnicodeDecodeError); the scan counts as failed, and the error names the file, line and key."""
    path = tmp_path / "f.json"
    path.write_bytes(b'{"s": "ok"}\n{"s":"0000\\u001f\\u001f\\u0800","s":"0000\\u001f\\u001f\\u0800"}\n')
    with pytest.raises(MalformedInputError, match=r"line 2: the JSON object has the key 's' twice"):
        ff.read_json_lines(str(path), SCHEMA)
