"""The fanned-out process step of a batch job (increments/execution/partitioned.py):

    read       read_batch, then split_batch: each state partition's input rows staged as a slice
               (a stateless query: row ranges of every input); one dynamic output per partition
               (mapping key p0, p1, ...)
    partition  (one op per partition; any process or machine the executor picks) opens its
               partition's state at N-1, runs the operators on its slice, commits the partition
               as version N under this attempt's token, stages its output; retried alone on
               failure (the op's RetryPolicy); the others are not redone
    join       after every partition op succeeded: outputs and tokens merged for write and commit

Every op re-loads batch N's plan and refuses unless this run owns offsets[N] (steps.load_plan);
commit writes commits[N] with every partition's token only after join, so a batch whose partition
failed for good is never committed (the query halts as for any failed step).
"""
from __future__ import annotations

from typing import Any

import dagster as dg

from increments.execution import partitioned, steps

from .celery_warm import imports_during, partition_warmth
from .ops import _rt, guarded


def make_fanout_ops(spec: Any, policy: dg.RetryPolicy) -> dict[str, dg.OpDefinition]:
    k = spec.key

    @dg.op(name=f"{k}__read_split", ins={"batch": dg.In(dict)}, out=dg.DynamicOut(dict), retry_policy=policy,
           description="Read (start, end] of every source; stage each state partition's input rows "
                       "(the stateless operators below the stateful one, hashed by its key; a stateless "
                       "query: contiguous row ranges of every input).")
    def read_split_op(context, batch: dict):
        n = batch["batch_id"]

        def run():
            rt = _rt(spec, context)
            plan = steps.load_plan(rt, n)
            info = steps.read_batch(rt, plan)
            return info, partitioned.split_batch(rt, plan)
        read, split = guarded(spec, context, "read", n, run)
        context.log.info(f"batch {n}: {read.num_input_rows} input rows; rows per state partition {split.rows}")
        for p in range(split.partitions):
            yield dg.DynamicOutput({**batch, "partition": p}, mapping_key=f"p{p}",
                                   metadata={"partition": p, "num_rows": split.rows[p]})

    @dg.op(name=f"{k}__partition", ins={"part": dg.In(dict)}, out=dg.Out(dict), retry_policy=policy,
           description="One state partition of the batch: its state N-1 -> N over its slice of the rows.")
    def partition_op(context, part: dict):
        n, p = part["batch_id"], part["partition"]

        warmth: dict = {}

        def run():
            with imports_during(warmth):                   # modules_imported: 0 in a warm process
                rt = _rt(spec, context)
                plan = steps.load_plan(rt, n)
                warmth.update(partition_warmth(rt, n, p))  # worker, state_open warm/cold (celery.py)
                return partitioned.process_partition(rt, plan, p)
        info = guarded(spec, context, f"process (partition {p})", n, run)
        return dg.Output(part, metadata={"partition": p, **warmth, "num_input_rows": info.num_input_rows,
                                         "num_output_rows": info.num_output_rows,
                                         "num_state_rows": info.num_state_rows, "duration_ms": info.process_ms})

    @dg.op(name=f"{k}__join", ins={"parts": dg.In(list)}, out=dg.Out(dict), retry_policy=policy,
           description="After every partition: merge their outputs, metrics and state tokens.")
    def join_op(context, parts: list):
        batch = {key: v for key, v in parts[0].items() if key != "partition"}
        n = batch["batch_id"]

        def run():
            rt = _rt(spec, context)
            return partitioned.join_partitions(rt, steps.load_plan(rt, n))
        info = guarded(spec, context, "process (join)", n, run)
        return dg.Output(batch, metadata={"partitions": len(parts), "duration_ms": info.process_ms,
                                          "state_versions": dg.MetadataValue.json(info.state_versions)})

    return {"read": read_split_op, "partition": partition_op, "join": join_op}
