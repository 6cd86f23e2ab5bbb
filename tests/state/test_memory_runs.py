"""state.memory_runs.remove_keys and in_order against a model of the runs as Python lists."""
import random

import pyarrow as pa

from state import memory_runs as mr


def test_remove_keys_matches_a_model():
    rnd = random.Random(5)
    for trial in range(40):
        runs, model = [], []
        n = 0
        for r in range(rnd.randrange(0, 4)):
            ks = [b"k%06d" % (n + i) for i in range(rnd.randrange(0, 300))]
            n += len(ks)
            rnd.shuffle(ks)
            vs = [b"v" + k for k in ks]
            new = r == 2
            runs.append((pa.array(ks, pa.binary()), pa.array(vs, pa.binary()), new))
            model.append((ks, vs, new))
        everything = [k for ks, _, _ in model for k in ks]
        absent = [b"x%d" % i for i in range(rnd.randrange(0, 20))]
        keys = rnd.sample(everything, rnd.randrange(0, len(everything) + 1)) + absent
        rnd.shuffle(keys)
        kept, (nk, nv), others, (rest, pos) = mr.remove_keys(runs, pa.array(keys, pa.binary()))
        gone = set(keys)
        want_kept = [([k for k in ks if k not in gone], new) for ks, _, new in model]
        assert [(k.to_pylist(), new) for k, _, new in kept] == [(ks, new) for ks, new in want_kept if ks]
        assert all(v.to_pylist() == [b"v" + x for x in k.to_pylist()] for k, v, _ in kept)
        own = [k for ks, _, new in model if new for k in ks if k in gone]
        assert sorted(nk.to_pylist() if nk is not None else []) == sorted(own)
        assert (nv.to_pylist() if nv is not None else []) == [b"v" + k for k in (nk.to_pylist() if nk is not None else [])]
        assert rest.to_pylist() == [k for k in keys if k in absent]
        assert [keys[i] for i in pos] == rest.to_pylist()
        other = [k for k in keys if k not in absent and k not in own]
        if others is None:
            assert other == []
            continue
        parts = [others, (rest, pa.array([b"d" + k for k in rest.to_pylist()], pa.binary()), pos)]
        ok, ov = mr.in_order(parts)            # the removed keys of other runs and the rest, in the order given
        assert ok.to_pylist() == [k for k in keys if k not in own]
        assert ov.to_pylist() == [(b"d" if k in absent else b"v") + k for k in keys if k not in own]
