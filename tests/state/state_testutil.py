"""Shared helpers of the state tests (a uniquely named module: `conftest` is ambiguous)."""
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

# (provider name, changelog checkpointing)
CONFIGS = [("memory", True), ("rocksdb", True), ("rocksdb", False)]
IDS = ["memory", "rocksdb-changelog", "rocksdb-snapshots"]


def provider_conf(name: str, changelog: bool, local_dir: str, **conf) -> dict:
    conf = dict(conf, changelog_checkpointing=changelog)
    if name == "rocksdb":
        conf["local_dir"] = local_dir
    return conf
