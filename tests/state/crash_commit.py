"""Test-only helper: commit one batch in a subprocess and SIGKILL it at a chosen step.

usage: python crash_commit.py PROVIDER CHANGELOG(0|1) CHECKPOINT LOCAL_DIR VERSION SNAP_INTERVAL PARENT_TOKEN [ROWS_SNAPSHOT_MAX]
(PARENT_TOKEN "-": the only candidate of VERSION-1; ROWS_SNAPSHOT_MAX: rocksdb only). Prints the new token on success.
env CRASH_AT="<target>:<before|after>:<nth call>" where target is a provider method
(_write_snapshot, _apply_local, _upload_snapshot, _cleanup) or "put" (the create-only write
of state.files). The hook is installed here by monkeypatching; the product code has no crash
hooks. Without CRASH_AT the commit completes and the script exits 0.
"""
import inspect
import os
import signal
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

from state import files, make_provider  # noqa: E402
from state.encoding import encode_key  # noqa: E402


def apply_batch(store, version: int) -> None:
    """The deterministic changes of batch ``version`` (mirrored by model_batch in the tests)."""
    for i in range(5):
        store.put(encode_key((version, i)), f"{version}-{i}".encode())
    store.delete(encode_key((version - 2, 0)))
    store.put(encode_key((0, 1)), f"upd{version}".encode())


def model_batch(model: dict, version: int) -> None:
    for i in range(5):
        model[encode_key((version, i))] = f"{version}-{i}".encode()
    model.pop(encode_key((version - 2, 0)), None)
    model[encode_key((0, 1))] = f"upd{version}".encode()


def _install(provider_cls, spec: str) -> None:
    target, when, nth = spec.split(":")
    nth = int(nth)
    calls = [0]

    def hook(orig):
        def wrapped(*a, **kw):
            calls[0] += 1
            hit = calls[0] == nth
            if hit and when == "before":
                os.kill(os.getpid(), signal.SIGKILL)
            out = orig(*a, **kw)
            if hit and when == "after":
                os.kill(os.getpid(), signal.SIGKILL)
            return out
        return wrapped

    if target == "put":
        files.put = hook(files.put)
        return
    static = isinstance(inspect.getattr_static(provider_cls, target), staticmethod)
    orig = getattr(provider_cls, target)
    setattr(provider_cls, target, staticmethod(hook(orig)) if static else hook(orig))


def main() -> None:
    name, changelog, ckpt, local, version, interval, parent = sys.argv[1:8]
    version = int(version)
    conf = {"changelog_checkpointing": changelog == "1", "snapshot_interval": int(interval)}
    if len(sys.argv) > 8:
        conf["rows_snapshot_max"] = int(sys.argv[8])
    provider = make_provider(name, ckpt, local_dir=local, **conf)
    if os.environ.get("CRASH_AT"):
        _install(type(provider), os.environ["CRASH_AT"])
    store = provider.open("op", 0, version - 1, None if parent == "-" else parent)
    apply_batch(store, version)
    store.commit(version)
    provider.close()
    print(store.token)


if __name__ == "__main__":
    main()
