"""Where a small Kafka batch's CPU goes, per OS thread and in the broker (issue 33 item 1, h46).

    .venv/bin/python bench/kafka_batch_cpu.py RUNS [memory|rocksdb]

Runs small_batches.py's `run_query` (Kafka, 50 offsets a batch, 2,000 clicks) RUNS times after 2
warm-up runs in this process. Per batch: the process CPU, the CPU of every OS thread grouped by its
name (/proc/self/task/*/schedstat, Python's name for Python threads; librdkafka's native threads are named rdk:*), sampled just before the
source closes its consumers (their threads end then); the Tansu broker's CPU (its /proc/<pid>/stat
around the runs); the batch wall. CONF='{"fetch.wait.max.ms": 100}' adds librdkafka settings to read()'s consumers. The last line is JSON (bench/ab.py compares builds).
"""
import collections, json, os, re, statistics, sys, tempfile, threading, time
WT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, WT); sys.path.insert(0, WT + "/bench"); sys.path.insert(0, WT + "/tests")
import small_batches as sb  # noqa: E402
from increments.sources.kafka import source as ksrc  # noqa: E402

TICK = os.sysconf("SC_CLK_TCK")


def _stat(path):
    with open(path) as f:
        s = f.read()
    r = s.rsplit(")", 1)[1].split()
    return (int(r[11]) + int(r[12])) / TICK     # utime + stime


def tasks():
    pynames = {t.native_id: re.sub(r"_\d+$", "", t.name) for t in threading.enumerate()}
    out = {}
    for tid in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{tid}/comm") as f:
                name = f.read().strip()
            with open(f"/proc/self/task/{tid}/schedstat") as f:
                ns = int(f.read().split()[0])          # on-CPU time in ns (stat's ticks are 10 ms)
            out[int(tid)] = (pynames.get(int(tid), name), ns / 1e9)
        except OSError:
            pass
    return out


seen: dict = {}          # tid -> (name, cpu) last seen
def snap():
    for tid, v in tasks().items():
        seen[tid] = v


orig_close = ksrc.KafkaSource.close
def close(self):
    snap()
    orig_close(self)
ksrc.KafkaSource.close = close
if os.environ.get("CONF"):     # experiments: extra librdkafka settings for read()'s consumers, as JSON
    _extra = json.loads(os.environ["CONF"])
    _orig_new = ksrc.KafkaSource._new_consumer
    def _new(self, kind=ksrc.Consumer):
        if kind is not ksrc._Reader:
            return _orig_new(self, kind)
        saved, self.client_config = self.client_config, {**self.client_config, **_extra}
        try:
            return _orig_new(self, kind)
        finally:
            self.client_config = saved
    ksrc.KafkaSource._new_consumer = _new

runs = int(sys.argv[1]); store = sys.argv[2] if len(sys.argv) > 2 else "memory"
path = sb.generate(tempfile.gettempdir(), 40, 50)
from broker import create_topic, produce, start_tansu  # noqa: E402
parts = int(os.environ.get("PARTS", "1"))   # PARTS=4: the 2,000 clicks over 4 partitions (50 offsets a batch in all)
proc, bootstrap = start_tansu(); topic = create_topic(bootstrap, partitions=parts)
rows = []
for name in sorted(os.listdir(path)):
    with open(os.path.join(path, name)) as f:
        rows += [l.rstrip("\n") for l in f]
if parts == 1:
    produce(bootstrap, topic, rows)
else:
    for i in range(parts):
        produce(bootstrap, topic, rows[i::parts], partition=i)
kafka = (bootstrap, topic)
bstat = f"/proc/{proc.pid}/stat"
for _ in range(2):
    sb.run_query("kafka", store, path, kafka, 50)
snap(); base = dict(seen)
nb = 0; walls = []; b0 = _stat(bstat); c0 = time.process_time()
for _ in range(runs):
    secs, b = sb.run_query("kafka", store, path, kafka, 50)
    nb += b; walls.append(secs / b)
cpu = time.process_time() - c0; bcpu = _stat(bstat) - b0
snap()
groups = collections.Counter()
for tid, (name, c) in seen.items():
    g = re.sub(r"\d+$", "", name) if name.startswith("rdk:") else re.sub(r"[0-9a-f]{8}-[0-9a-f-]{27}", "X", name)
    groups[g] += c - base.get(tid, (name, 0.0))[1]
proc.kill()
res = {"process CPU": cpu / nb * 1000, "broker CPU": bcpu / nb * 1000,
       "wall": statistics.median(walls) * 1000}
res.update({"thread " + k: v / nb * 1000 for k, v in groups.items() if v > 0})
print(f"kafka {store}: {nb} batches, load {os.getloadavg()[0]:.2f}")
for k, v in sorted(res.items(), key=lambda kv: -kv[1]):
    print(f"   {k:34s} {v:7.3f} ms")
print("JSON " + json.dumps(res))
