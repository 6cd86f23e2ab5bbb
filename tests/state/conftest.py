import pytest

from state_testutil import CONFIGS, IDS, provider_conf

from state import make_provider


@pytest.fixture(params=CONFIGS, ids=IDS)
def make(request, tmp_path):
    """make(local="w", **conf) -> provider on tmp_path/ckpt; a new `local` name gives a fresh
    working copy (forces a rebuild from the checkpoint)."""
    name, changelog = request.param
    made = []

    def factory(local: str = "w", **conf):
        p = make_provider(name, str(tmp_path / "ckpt"),
                          **provider_conf(name, changelog, str(tmp_path / local), **conf))
        made.append(p)
        return p

    factory.name, factory.changelog, factory.ckpt = name, changelog, str(tmp_path / "ckpt")
    yield factory
    for p in made:
        p.close()
