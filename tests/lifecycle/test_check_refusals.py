"""`increments check` on a writer that cannot start says what is missing or wrong (exit 1), without a
traceback (issue 27.6)."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

BIN = os.path.join(os.path.dirname(sys.executable), "increments")
HERE = os.path.dirname(__file__)


@pytest.mark.parametrize("fn,says", [
    ("no_table_path", "format(\"delta\")` needs a table path: .start('lake/gold/table'), .option('path', ...) or "
                      "@streaming_query(path=...)"),
    ("misspelled_option", "unknown option 'state_partition'; did you mean 'state_partitions'?"),
    ("misspelled_source_option", "unknown keyword option 'max_file_per_trigger'; did you mean "
                                 "'max_files_per_trigger'?"),
])
def test_check_says_what_is_wrong(tmp_path, fn, says):
    (tmp_path / "in").mkdir()
    env = dict(os.environ, REFUSE_IN=str(tmp_path / "in"), REFUSE_CHK=str(tmp_path / "chk"),
               REFUSE_OUT=str(tmp_path / "out"), PYTHONPATH=HERE + os.pathsep + os.environ.get("PYTHONPATH", ""))
    r = subprocess.run([BIN, "check", f"refusal_queries:{fn}"], env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 1, r.stdout + r.stderr
    assert "Traceback" not in r.stderr, r.stderr[-3000:]
    assert says in r.stdout + r.stderr
    assert not (tmp_path / "chk").exists() and not (tmp_path / "out").exists()
