"""Second code location of bench/dagster_overhead.py: the empty one-op and five-op jobs of
bench/dagster_bench_location.py, loaded the same way (the same imports and definitions: each run
pays the same code location load as the batch run), with the engine preload off
(INCREMENTS_PRELOAD=0, orchestration/preload.py): their run processes do only what Dagster does
for such a run. Only the two jobs are exposed (no sensors or schedules evaluated twice)."""
import os
import runpy

import dagster as dg

os.environ["INCREMENTS_PRELOAD"] = "0"      # this location's code server and its run processes
_bench = runpy.run_path(os.path.join(os.path.dirname(os.path.abspath(__file__)), "dagster_bench_location.py"))

defs = dg.Definitions(jobs=[_bench["empty_job"], _bench["empty5_job"]])
