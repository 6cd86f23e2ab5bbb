"""A/B of two builds in one command: a bench script run against the working tree and against a
commit, alternating rounds, each run in its own process (the build is whatever PYTHONPATH finds first).

    .venv/bin/python bench/ab.py --base <commit> [--rounds 3] [--match REGEX] -- bench/high_cardinality.py --only count

The base tree is ``git archive <commit>`` extracted to a temp directory; the bench script is the
working tree's, copied into the base tree (bench scripts put their own tree first on sys.path), so
both builds run the same measurement. Every run's output lines that
match ``--match`` (default: lines with a time in seconds or ms) are printed with the build's name,
then a summary: per matching line label, the median over rounds of each build and new/base.
The load average is printed beside every run.
"""
from __future__ import annotations

import argparse
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
NUM = re.compile(r"(-?\d+(?:\.\d+)?)\s*(s|ms)\b")


def extract(commit: str) -> str:
    d = tempfile.mkdtemp(prefix=f"ab-{commit[:8]}-")
    archive = subprocess.run(["git", "-C", ROOT, "archive", commit], check=True, capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", d], input=archive, check=True)
    return d


def load() -> str:
    return "load %.1f/%.1f/%.1f" % os.getloadavg()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--base", required=True, help="the commit to compare with (git archive)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--match", default=r"\d\s*(s|ms)\b")
    ap.add_argument("cmd", nargs=argparse.REMAINDER)
    a = ap.parse_args()
    cmd = [c for c in a.cmd if c != "--"]
    trees = {"base": extract(a.base), "new": ROOT}
    # the working tree's bench script, copied into the base tree: bench scripts put their own tree
    # first on sys.path, so each build must run its own copy
    shutil.copyfile(os.path.join(ROOT, cmd[0]), os.path.join(trees["base"], cmd[0]))
    values: dict[tuple[str, str], list[float]] = {}
    pat = re.compile(a.match)
    for r in range(a.rounds):
        for name in (("base", "new") if r % 2 == 0 else ("new", "base")):
            env = dict(os.environ, PYTHONPATH=os.pathsep.join([trees[name], os.path.join(trees[name], "tests")]))
            p = subprocess.run([sys.executable, os.path.join(trees[name], cmd[0])] + cmd[1:], env=env, capture_output=True, text=True,
                               cwd=trees[name])
            print(f"--- round {r} {name} (exit {p.returncode}, {load()})", flush=True)
            if p.returncode:
                print(p.stderr[-3000:])
            for line in p.stdout.splitlines():
                if pat.search(line):
                    print(f"  {name}: {line}")
                    prefix, at = None, 0
                    for m in NUM.finditer(line):       # "label 1.2 s   cpu 3.4 s": label, label cpu
                        text = line[at:m.start()].strip(" :|,(")
                        label = text if prefix is None else f"{prefix} {text}"
                        prefix = prefix or text
                        at = m.end()
                        v = float(m.group(1)) * (0.001 if m.group(2) == "ms" else 1)
                        values.setdefault((label, name), []).append(v)
    print(f"\nsummary, medians of {a.rounds} rounds ({load()}):")
    for label in dict.fromkeys(k for k, _ in values):
        b, n = values.get((label, "base")), values.get((label, "new"))
        if b and n:
            mb, mn = statistics.median(b), statistics.median(n)
            print(f"  {label:60s} base {mb:8.3f} s  new {mn:8.3f} s  new/base {mn / mb:5.2f}x")


if __name__ == "__main__":
    main()
