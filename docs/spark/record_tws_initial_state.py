"""Record Spark 4.3's transformWithState with initialState for tests/operators/test_tws_initial_state.py.

Run by hand in a separate venv with pandas<3, pyarrow, protobuf, grpcio (see record_chain.py):
TZ=UTC PYSPARK_PYTHON=/tmp/sparkvenv/bin/python /tmp/sparkvenv/bin/python
docs/spark/record_tws_initial_state.py. Input: two files of keys (one per batch); initial state: rows
(k, n) with two rows for key c and a key z that never gets input. The processor adds the initial rows'
n to a per-key count, then counts input rows and emits (k, count).
"""
import json
import os
import tempfile

from pyspark.sql import Row, SparkSession
from pyspark.sql.streaming.stateful_processor import StatefulProcessor

FILES = [["a", "b"], ["a", "c"], ["z"]]
INIT = [("a", 10), ("c", 100), ("c", 5), ("z", 7)]


class Count(StatefulProcessor):
    def init(self, handle):
        self.count = handle.getValueState("count", "n BIGINT")

    def handleInitialState(self, key, initialState, timerValues):
        cur = self.count.get()[0] if self.count.exists() else 0
        self.count.update((cur + initialState.n,))

    def handleInputRows(self, key, rows, timerValues):
        n = (self.count.get()[0] if self.count.exists() else 0) + sum(1 for _ in rows)
        self.count.update((n,))
        yield Row(k=key[0], n=n)

    def close(self):
        pass


def main():
    spark = (SparkSession.builder.master("local[2]").config("spark.sql.shuffle.partitions", "2")
             .config("spark.sql.streaming.stateStore.providerClass",
                     "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider")
             .config("spark.ui.enabled", "false").getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    base = tempfile.mkdtemp()
    d = os.path.join(base, "in")
    os.makedirs(d)
    for i, keys in enumerate(FILES):
        p = os.path.join(d, f"part-{i:04d}.json")
        with open(p, "w") as f:
            f.writelines(json.dumps({"k": k}) + "\n" for k in keys)
        os.utime(p, (1_700_000_000 + i, 1_700_000_000 + i))
    init = spark.createDataFrame(INIT, "k STRING, n BIGINT").groupBy("k")
    src = spark.readStream.schema("k STRING").option("maxFilesPerTrigger", 1).json(d)
    out = {}

    def fe(df, bid):
        out[bid] = sorted(tuple(r) for r in df.collect())
    q = (src.groupBy("k").transformWithState(Count(), "k STRING, n BIGINT", "Append", "None", initialState=init)
         .writeStream.foreachBatch(fe).option("checkpointLocation", os.path.join(base, "chk"))
         .trigger(availableNow=True).start())
    q.awaitTermination()
    print("batches", out)
    print("state", [[(o["operatorName"], o["numRowsTotal"], o["numRowsUpdated"]) for o in p["stateOperators"]]
                    for p in q.recentProgress])


if __name__ == "__main__":
    main()
