"""A drain backfill's partition list (orchestration/chain.py): it starts as the estimate of each
source's backlog over its rate limit, grows when a drain needs more batches (the trailing no-data
batch of time-based work, a short estimate) and ends exact: trimmed to the batches that ran."""
from __future__ import annotations

import os
import time

import dagster as dg

from orch_testutil import write_files

import increments as inc
from orchestration import chain, runner
from orchestration import dagster_internals as di


def _query(root: str, max_files: int):
    def est_copy():
        frame = inc.read_stream.files(os.path.join(root, "landing"), format="json", schema="id BIGINT, name STRING",
                                      max_files_per_trigger=max_files)
        return (frame.write_stream.format("parquet").output_mode("append")
                .checkpoint_location(os.path.join(root, "chk")).query_name("est_copy").trigger(available_now=True))
    return est_copy


def test_the_estimate_is_the_backlog_over_the_rate_limit(tmp_path):
    root = str(tmp_path)
    write_files(root, "", 5)
    for max_files, batches in ((2, 3), (1, 5), (10, 1)):
        rt = runner.build_runtime(_query(root, max_files), os.path.join(root, "lake"), staging="memory")
        try:
            assert chain.estimate_batches(rt) == batches
        finally:
            runner.close_quietly(rt)


def test_the_partition_list_grows_and_ends_exact(tmp_path):
    inst = dg.DagsterInstance.local_temp(str(tmp_path))
    bf = di.get("PartitionBackfill")(
        backfill_id="drainabc", status=di.get("BulkActionStatus").REQUESTED, from_failure=False, tags={},
        backfill_timestamp=time.time(), partition_names=[chain.partition_name(b) for b in (4, 5, 6)],
        last_submitted_partition_name=chain.partition_name(6))
    inst.add_backfill(bf)
    chain._extend(inst, "drainabc", 8)                  # the estimate was short: batches 7 and 8 join
    got = inst.get_backfill("drainabc")
    assert got.partition_names == ["batch 4", "batch 5", "batch 6", "batch 7", "batch 8"]
    assert got.last_submitted_partition_name == "batch 8"      # the daemon has nothing left to submit
    chain._extend(inst, "drainabc", 6)                  # already listed: unchanged
    assert inst.get_backfill("drainabc").partition_names[-1] == "batch 8"
    chain._trim(inst, "drainabc", 7)                    # the drain ended at batch 7
    got = inst.get_backfill("drainabc")
    assert got.partition_names == ["batch 4", "batch 5", "batch 6", "batch 7"]
    assert got.last_submitted_partition_name == "batch 7"
    assert di.backfill_state(got) == "open"
