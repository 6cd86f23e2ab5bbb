"""Write requirements.lock: the exact versions the suite was tested with (issue 34 item 7).

    .venv/bin/python .ci/lock.py            # rewrite requirements.lock from this environment
    .venv/bin/python .ci/lock.py --check    # exit 1 when requirements.lock differs from it

The lock is the closure of `increments[dev]` (which holds every extra the deploy image installs:
dagster-k8s, dagster-celery, celery[redis]) over the distributions installed in the running
environment: each requirement with its extras and environment markers, down to the leaves, as
`name==version`. `bash dev.sh` (demo, test, ui) and deploy/Dockerfile install with
`-c requirements.lock`, so the demo, CI and the image get the versions that were tested. Run it
after a dependency change, in the venv the suite passed in.
"""
from __future__ import annotations

import sys
import tomllib
from importlib import metadata
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parent.parent
LOCK = ROOT / "requirements.lock"
HEADER = ("# The versions the test suite passed with (python .ci/lock.py writes this file from the venv of\n"
          "# `bash dev.sh test`). Installed with -c by dev.sh and deploy/Dockerfile. Python {py}.\n")


def closure() -> dict[str, str]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    todo = [(Requirement(r), set()) for r in project["dependencies"]]
    todo += [(Requirement(r), set()) for r in project["optional-dependencies"]["dev"]]
    seen: dict[str, str] = {}
    done: set[tuple[str, frozenset[str]]] = set()
    while todo:
        req, _ = todo.pop()
        name = canonicalize_name(req.name)
        key = (name, frozenset(req.extras))
        if key in done:
            continue
        done.add(key)
        try:
            dist = metadata.distribution(req.name)
        except metadata.PackageNotFoundError:
            raise SystemExit(f"{req.name} is required but not installed here: run .ci/lock.py in the tested venv")
        seen[name] = dist.version
        for spec in dist.requires or []:
            sub = Requirement(spec)
            envs = [{"extra": e} for e in (req.extras or {""})]
            if sub.marker is None or any(sub.marker.evaluate(env) for env in envs):
                todo.append((sub, set()))
    seen.pop("increments", None)
    return seen


def render() -> str:
    py = ".".join(map(str, sys.version_info[:2]))
    return HEADER.format(py=py) + "".join(f"{n}=={v}\n" for n, v in sorted(closure().items()))


def main(argv: list[str]) -> int:
    text = render()
    if "--check" in argv:
        if LOCK.read_text() != text:
            print(f"{LOCK.name} differs from this environment: run python .ci/lock.py", file=sys.stderr)
            return 1
        return 0
    LOCK.write_text(text)
    print(f"wrote {LOCK} ({text.count(chr(10)) - 2} packages)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
