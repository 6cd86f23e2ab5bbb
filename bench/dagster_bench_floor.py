"""Second code location of bench/dagster_overhead.py: Dagster's floor, an empty one-op job and an
empty five-op job (the batch graph's shape, values passed between ops, no work), in a location
that builds no increments definitions, so their run processes do exactly what Dagster alone does
(no engine preload: orchestration/preload.py starts from build_definitions)."""
import dagster as dg


@dg.op
def noop():
    return None


@dg.job(executor_def=dg.in_process_executor)
def empty_job():
    noop()


@dg.op
def step(x):
    return x


@dg.job(executor_def=dg.in_process_executor)
def empty5_job():
    step.alias("commit")(step.alias("write")(step.alias("process")(step.alias("read")(noop.alias("plan")()))))


defs = dg.Definitions(jobs=[empty_job, empty5_job])
