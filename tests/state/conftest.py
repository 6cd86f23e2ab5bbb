import pytest

from state_testutil import CONFIGS, IDS, STORAGES, checkpoint_url, provider_conf

from state import make_provider

PARAMS = [(c, s) for s in STORAGES for c in CONFIGS]
PARAM_IDS = [f"{i}-{s}" for s in STORAGES for i in IDS]


@pytest.fixture(params=PARAMS, ids=PARAM_IDS)
def make(request, tmp_path):
    """make(local="w", **conf) -> provider on a checkpoint on the local disk or on S3; a new
    `local` name gives a fresh working copy (forces a rebuild from the checkpoint)."""
    (name, changelog), storage = request.param
    ckpt = checkpoint_url(request, tmp_path, storage)
    made = []

    def factory(local: str = "w", **conf):
        p = make_provider(name, ckpt, **provider_conf(name, changelog, str(tmp_path / local), **conf))
        made.append(p)
        return p

    factory.name, factory.changelog, factory.ckpt, factory.storage = name, changelog, ckpt, storage
    factory.tmp_path = tmp_path
    yield factory
    for p in made:
        p.close()
