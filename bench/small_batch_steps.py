"""Per-step CPU of small_batches.py's runs (issue 33 item 1): where a near-empty stateful batch's CPU goes.

    .venv/bin/python bench/small_batch_steps.py RUNS memory|rocksdb files|kafka

Runs small_batches.py's own `run_query` RUNS times (after 2 warm-up runs) in this process with
thin wrappers around the protocol steps and the functions below: per batch, the CPU of the
batch's thread in each (`time.thread_time`, "[thread]" when it ran on another thread), the wall
of the top-level steps, every thread's CPU (by name) and the process CPU. The last line is the
same as JSON, for comparing builds (`bench/ab.py --base main -- bench/small_batch_steps.py 6
memory files` alternates processes). SWITCH=<seconds> sets sys.setswitchinterval first; NOSTASH=1
turns the Kafka source's rest read ahead off (consume._STASH_OFFSETS = 0: a consumer kept assigned, as before h48).
"""
import os, sys, time, tempfile, threading, re, statistics, collections, importlib
WT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, WT); sys.path.insert(0, WT + "/bench"); sys.path.insert(0, WT + "/tests")
import small_batches as sb
if os.environ.get("SWITCH"): sys.setswitchinterval(float(os.environ["SWITCH"]))
runs = int(sys.argv[1]); store = sys.argv[2]; source = sys.argv[3]
path = sb.generate(tempfile.gettempdir(), 40, 50)
kafka = None
if source == "kafka":
    from broker import create_topic, produce, start_tansu
    proc, bootstrap = start_tansu(); topic = create_topic(bootstrap)
    rows = []
    for name in sorted(os.listdir(path)):
        with open(os.path.join(path, name)) as f:
            rows += [l.rstrip("\n") for l in f]
    produce(bootstrap, topic, rows); kafka = (bootstrap, topic)
acc = collections.Counter(); wall = collections.Counter()
def wrap(mod, qual, label):
    try:
        obj = importlib.import_module(mod)
        parts = qual.split(".")
        for p in parts[:-1]: obj = getattr(obj, p)
        f = getattr(obj, parts[-1])
    except (ImportError, AttributeError):
        return                                  # not in this build
    def w(*a, **k):
        c = time.thread_time(); t = time.perf_counter()
        try: return f(*a, **k)
        finally:
          if label[0] in "012345" and not label.startswith(("3a.", "3b.", "3c.")): wall[label] += time.perf_counter() - t
          acc[label + ('' if not re.search(r'_\d+$', threading.current_thread().name) else ' [' + re.sub(r'_\d+$', '', threading.current_thread().name)[-10:] + ']')] += time.thread_time() - c
    setattr(obj, parts[-1], w)
from increments.execution import steps
wrap("increments.execution.steps", "plan_batch", "1 plan")
wrap("increments.execution.steps", "read_batch", "2 read")
wrap("increments.execution.steps", "process_batch", "3 process")
wrap("increments.execution.steps", "write_batch", "4 write")
wrap("increments.execution.steps", "commit_batch", "5 commit")
wrap("increments.execution.state_manager", "StateManager.commit_all", "3b process: state commit")
wrap("increments.operators.aggregate", "WindowAggregateOp.execute", "3a process: aggregate")
wrap("increments.execution.steps", "build_progress", "5b commit: progress")
wrap("increments.storage.local", "LocalLocation.write_bytes", "9 write_bytes (all threads on batch thread)")
wrap("pyarrow.parquet", "write_table", "4a write: pq.write_table")
wrap("increments.sinks.parquet", "ParquetSink._published", "4b write: _published")
wrap("increments.checkpoint.log", "BatchLog.write_offsets", "1a plan: write_offsets")
wrap("increments.checkpoint.log", "BatchLog.write_commit", "5a commit: write_commit")
wrap("increments.execution.steps", "check_owner", "6 check_owner")
wrap("increments.operators.aggregate", "partition_ids", "3a. partition_ids")
for fn in ["split_by_partition", "encode_keys", "decode_values", "encode_values", "time_bound"]:
    wrap("increments.operators.aggregate", fn, "3a. " + fn)
for fn in ["WindowAggregateOp._from_state", "WindowAggregateOp._result", "WindowAggregateOp._take_prepared", "WindowAggregateOp._partials", "WindowAggregateOp._partials_arrow", "WindowAggregateOp.prepare"]:
    wrap("increments.operators.aggregate", fn, "3a. " + fn)
wrap("increments.operators.accumulators", "Accumulators.merge_columns", "3a. merge_columns")
wrap("increments.operators.stateless", "WatermarkOp.execute", "3a. WatermarkOp.execute")
wrap("increments.operators.base", "BatchContext.stores", "3a. ctx.stores")
wrap("state.memory", "MemoryStateStore.multi_get", "3a. multi_get")
wrap("state.memory", "MemoryStateStore.put_many", "3a. put_many")
wrap("state.memory", "MemoryStateStore.range_scan", "3a. range_scan")
wrap("state.memory", "MemoryStateStore.delete_range", "3a. delete_range")
wrap("state.memory", "MemoryStateStore.commit", "3b. MemoryStateStore.commit")
wrap("increments.execution.steps", "_state_progress", "3c. _state_progress")
wrap("increments.execution.state_manager", "StateManager.tokens", "3c. tokens")
wrap("increments.execution.state_manager", "StateManager.release", "3c. release")
wrap("increments.execution.state_manager", "StateManager.begin", "3c. begin")
wrap("increments.sources.files", "FileSource.latest_offset", "1b plan: latest_offset")
wrap("increments.sources.files", "FileSource.has_new_data", "1c plan: has_new_data")
wrap("increments.execution.steps", "plan_sizes", "1d plan: plan_sizes")
wrap("increments.execution.steps", "_time_based_work", "1e plan: _time_based_work")
wrap("increments.sources.files", "FileSource.read", "2a read: FileSource.read")
wrap("increments.execution.steps", "source_lineage", "2b read: lineage")
wrap("increments.sources.files", "FileSource.commit", "5c commit: src.commit")
K = "increments.sources.kafka.source"
wrap(K, "KafkaSource.latest_offset", "1b plan: latest_offset")
wrap(K, "KafkaSource.has_new_data", "1c plan: has_new_data")
wrap(K, "KafkaSource._recreated", "1f plan: kafka _recreated")
wrap(K, "KafkaSource.read", "2a read: KafkaSource.read")
wrap(K, "KafkaSource._consume_range", "2c read: kafka _consume_range")
wrap(K, "KafkaSource.take_parsed", "2e kafka take_parsed")
wrap(K, "KafkaSource.commit", "5c commit: src.commit")
for fn in ["_holds", "_assign"]:
    wrap("increments.sources.kafka.consume", fn, "2f kafka " + fn)
wrap("increments.sources.kafka.topics", "request_topic_ids", "2g kafka request_topic_ids")
wrap("increments.sources.kafka.topics", "topic_ids", "1g plan: kafka topic_ids")
wrap("increments.operators.parse_json", "ParseJsonOp.execute", "3a. ParseJsonOp.execute")
for fn in ["_parsed_while_reading", "_arrow_fast_path", "_transform", "_with_kept"]:
    wrap("increments.operators.parse_json", "ParseJsonOp." + fn, "3a. ParseJsonOp." + fn)
wrap("increments.execution.runtime", "writer_options", "7 writer_options")
wrap("increments.execution.steps", "expectations_report", "3d expectations_report")
wrap("increments.execution.steps", "next_watermarks", "5d commit: next_watermarks")
wrap("increments.execution.staging", "MemoryStaging.clear", "5e commit: staging.clear")
wrap("increments.execution.staging", "MemoryStaging.put_json", "8 put_json")
wrap("increments.execution.runtime", "QueryRuntime.emit", "8 emit")
wrap("increments.execution.query", "StreamingQuery._run", "0 batch thread total")
thr = collections.Counter()
orig_run = threading.Thread.run
def run(self):
    c = time.thread_time()
    try: orig_run(self)
    finally:
        g = re.sub(r"[0-9a-f]{8}-[0-9a-f-]{27}", "X", self.name); g = re.sub(r"_\d+$", "", g)
        thr[g] += time.thread_time() - c
threading.Thread.run = run
if os.environ.get("NOSTASH"):
    import increments.sources.kafka.consume as kc; kc._STASH_OFFSETS = 0
sb.run_query(source, store, path, kafka, 50); sb.run_query(source, store, path, kafka, 50)
acc.clear(); thr.clear(); wall.clear()
nb = 0; c0 = time.process_time(); mt = 0.0; per = []
for i in range(runs):
    c = time.process_time(); m0 = time.thread_time()
    secs, b = sb.run_query(source, store, path, kafka, 50)
    mt += time.thread_time() - m0; nb += b; per.append((time.process_time() - c) / b)
cpu = time.process_time() - c0
time.sleep(0.2)
print(f"{source} {store}: {nb} batches, process CPU {cpu/nb*1000:.2f} ms/batch (median run {statistics.median(per)*1000:.2f}), load {os.getloadavg()[0]:.2f}")
for k in sorted(acc): print(f"   {k:28s} {acc[k]/nb*1000:6.3f} ms" + (f"   wall {wall[k]/nb*1000:6.3f}" if k in wall else ""))
print(f"   {'main thread (start, join)':28s} {mt/nb*1000:6.3f} ms")
for k, v in thr.most_common(): print(f"   thread {k:21s} {v/nb*1000:6.3f} ms")
if kafka: proc.kill()
import json as _j
res = {k: acc[k] / nb * 1000 for k in acc}
res.update({"wall " + k: wall[k] / nb * 1000 for k in wall})
res.update({"thread " + k: v / nb * 1000 for k, v in thr.items()})
res["process CPU"] = cpu / nb * 1000
res["main thread"] = mt / nb * 1000
print("JSON " + _j.dumps(res))
