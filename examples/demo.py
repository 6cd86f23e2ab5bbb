"""The README's demo: the hourly-clicks query on the embedded defaults (SQLite log, local Delta).

    bash dev.sh demo

Generates click files under demo_output/clicks/, runs the query with trigger(available_now=True)
one file per batch, prints each batch's progress (offsets, watermark, state rows, Delta version),
then prints the resulting Delta table. Run it again: nothing new, nothing reprocessed; add files
and run again: only the new ones are read.
"""
from __future__ import annotations

import os
import shutil
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from generate_clicks import generate  # noqa: E402
from hourly_clicks import hourly_clicks_query  # noqa: E402

import increments as inc  # noqa: E402


def main() -> None:
    root = os.path.abspath(os.environ.get("DEMO_DIR", "demo_output"))
    fresh = "--keep" not in sys.argv
    if fresh and os.path.exists(root):
        shutil.rmtree(root)
    clicks, chk, table = (os.path.join(root, p) for p in ("clicks", "chk/hourly_clicks", "lake/gold/hourly_clicks"))
    if fresh:
        n = generate(clicks)
        print(f"generated {n} click events in {len(os.listdir(clicks))} files under {clicks}")

    class Show(inc.StreamingQueryListener):
        def on_query_progress(self, p):
            op = (p["state_operators"] or [{}])[0]
            print(f"batch {p['batch_id']}: {p['num_input_rows']:5d} rows in, {p['sink']['num_output_rows']:3d} out, "
                  f"watermark {p['event_time'].get('watermark')}, state rows {op.get('num_rows_total')}, "
                  f"late dropped {op.get('num_rows_dropped_by_watermark')}, delta version {p['sink'].get('version')}")

    q = hourly_clicks_query(clicks, chk).listener(Show()).start(table)
    q.await_termination()
    from deltalake import DeltaTable
    from increments.sinks.console import format_table
    from increments.sql import run_sql
    result = run_sql("SELECT \"window\".start AS window_start, \"window\".end AS window_end, campaign_id, count "
                     "FROM t ORDER BY window_start, campaign_id", {"t": DeltaTable(table).to_pyarrow_table()})
    print(f"\nDelta table {table} (version {DeltaTable(table).version()}): {result.num_rows} closed hourly windows")
    print(format_table(result, num_rows=100))
    print(f"\nbatch history: {increments_command()} history hourly_clicks --checkpoint {chk}")


def increments_command() -> str:
    """The `increments` command as it runs when pasted here: the name when it is on PATH, else the
    venv's script (relative to the working directory when under it), else `python -m increments.cli`."""
    if shutil.which("increments"):
        return "increments"
    script = os.path.join(os.path.dirname(sys.executable), "increments")
    if os.path.exists(script):
        rel = os.path.relpath(script)
        return rel if not rel.startswith("..") else script
    return f"{sys.executable} -m increments.cli"


if __name__ == "__main__":
    main()
