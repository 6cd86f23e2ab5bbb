"""md5_block.md5_words against hashlib, and partition_ids through it against the row-by-row md5."""
import hashlib

import numpy as np
import pyarrow as pa

from increments.operators import md5_block, partitioning
from increments.operators.md5_block import md5_words


def _hashlib_words(values: list[bytes]) -> np.ndarray:
    return np.frombuffer(b"".join(hashlib.md5(v).digest() for v in values), "<u4").reshape(-1, 4)


def test_md5_words_are_hashlibs():
    rng = np.random.default_rng(7)
    texts = ([str(x) for x in rng.integers(-10 ** 18, 10 ** 18, 3000)] + ["", "a" * 55, "é" * 27, "x\x00y"]
             + ["".join(map(chr, rng.integers(32, 0x2FF, int(k)))) for k in rng.integers(0, 20, 500)])
    arr = pa.array(texts)
    assert (md5_words(arr) == _hashlib_words([t.encode() for t in texts])).all()
    raw = [rng.bytes(int(k)) for k in rng.integers(0, 56, 2000)]
    assert (md5_words(pa.array(raw, pa.binary())) == _hashlib_words(raw)).all()
    sliced = pa.array(texts).slice(100, 1000)                      # an array with an offset
    assert (md5_words(sliced) == _hashlib_words([t.encode() for t in texts[100:1100]])).all()
    chunked = pa.chunked_array([pa.array(texts[:10]), pa.array(texts[10:])])
    assert (md5_words(chunked) == _hashlib_words([t.encode() for t in texts])).all()


def test_md5_words_refuses_what_it_does_not_hash():
    assert md5_words(pa.array(["a" * 56])) is None                  # two MD5 blocks
    assert md5_words(pa.array(["a", None])) is None
    assert md5_words(pa.array([1, 2])) is None
    assert md5_words(pa.array([], pa.string())) is None


def test_partition_ids_are_the_same_either_way(monkeypatch):
    rng = np.random.default_rng(3)
    t = pa.table({"k": pa.array(rng.integers(-10 ** 15, 10 ** 15, 5000)),
                  "s": pa.array([f"event-{x}" for x in rng.integers(0, 10 ** 9, 5000)])})
    for cols in (["k"], ["s"], ["k", "s"]):
        for n in (2, 3, 200):
            fast = partitioning.partition_ids(t, cols, n)
            monkeypatch.setattr(partitioning, "md5_words", lambda arr: None)
            slow = partitioning.partition_ids(t, cols, n)
            monkeypatch.setattr(partitioning, "md5_words", md5_block.md5_words)
            assert fast.equals(slow)


def test_partition_ids_of_a_few_rows_by_python_equal_arrows(monkeypatch):
    """Up to _PYTHON_MAX rows the key texts are built in Python: the same ids as the Arrow path, for
    integers of every width and sign, strings (empty, non-ASCII, the separator), and NULLs."""
    rng = np.random.default_rng(5)
    n = partitioning._PYTHON_MAX
    t = pa.table({"k": pa.array([int(x) for x in rng.integers(-10 ** 15, 10 ** 15, n - 4)] + [None, 0, -1, 2 ** 62]),
                  "i8": pa.array([int(x) for x in rng.integers(-128, 128, n)], pa.int8()),
                  "u": pa.array([2 ** 64 - 1, 2 ** 63, None] + [int(x) for x in rng.integers(0, 1000, n - 3)], pa.uint64()),
                  "s": pa.array(["", "é", None, "a\x1fb"] + [f"event-{x}" for x in rng.integers(0, 10 ** 9, n - 4)]),
                  "ls": pa.array(["x", None] + [f"c{x}" for x in rng.integers(0, 9, n - 2)], pa.large_string())})
    for cols in (["k"], ["s"], ["k", "s"], ["i8", "u", "ls"], ["u"]):
        for parts in (2, 3, 200):
            for rows in (1, 7, n):
                few = t.slice(0, rows)
                python = partitioning.partition_ids(few, cols, parts)
                monkeypatch.setattr(partitioning, "_PYTHON_MAX", 0)
                arrow = partitioning.partition_ids(few, cols, parts)
                monkeypatch.setattr(partitioning, "_PYTHON_MAX", n)
                assert python.equals(arrow), (cols, parts, rows)
