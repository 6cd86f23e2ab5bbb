"""The declared minimum versions as pip constraints (issue 34 item 7), for .ci/min-versions.

    python .ci/min_constraints.py            # print name==floor for every dependency of
                                             # [project].dependencies that declares a floor (>=)
    python .ci/min_constraints.py --check    # exit 1 naming each installed version that differs

A floor is the lowest version pyproject.toml admits; installing exactly it (not just allowing it)
is what makes the job test what the floor claims.
"""
from __future__ import annotations

import re
import sys
import tomllib
from importlib import metadata
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
_REQ = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)\s*(?:\[[^\]]*\])?\s*(.*)$")


def floors() -> dict[str, str]:
    deps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    out = {}
    for dep in deps:
        m = _REQ.match(dep.split(";")[0])
        if not m:
            raise SystemExit(f"cannot read the requirement {dep!r} of pyproject.toml")
        name, spec = m.group(1).lower(), m.group(2)
        low = [v.strip() for op, v in re.findall(r"(>=|==)\s*([^,\s]+)", spec)]
        if low:
            out[name] = low[0]
    return out


def main(argv: list[str]) -> int:
    want = floors()
    if "--check" not in argv:
        print("\n".join(f"{n}=={v}" for n, v in sorted(want.items())))
        return 0
    bad = []
    for name, v in sorted(want.items()):
        try:
            got = metadata.version(name)
        except metadata.PackageNotFoundError:
            bad.append(f"{name}: not installed (floor {v})")
            continue
        if _norm(got) != _norm(v):
            bad.append(f"{name}: {got} installed, floor {v}")
    if bad:
        print("not at the declared minimum versions:\n  " + "\n  ".join(bad), file=sys.stderr)
        return 1
    print(f"{len(want)} dependencies at their declared minimum versions")
    return 0


def _norm(v: str) -> tuple[int, ...]:
    parts = [int(p) for p in re.findall(r"\d+", v)]
    while parts and parts[-1] == 0:
        parts.pop()
    return tuple(parts)


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
