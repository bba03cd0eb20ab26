"""``benchmarks/pql.py``'s mjlab report (no simulator needed): the greedy evaluation's
cadence is part of the time-to-target reading (a 1 s grain on 3-6 s runs moved the
PQL/DDPG(n) ratio from 1.59x to 1.35x), so the header states the cadence each row was
measured at, and records older than the cadence note count at the old 1 s."""
from tests._benchmarks import load_benchmark


def _bench():
    return load_benchmark("pql.py", "rllib_fast_bench_pql_test")


def _rec(key, label, every=None):
    return dict(mode="learn", key=key, label=label, notes={} if every is None else {"eval_every_s": every})


def test_one_cadence_is_stated_once():
    b = _bench()
    recs = [_rec("mj-pqlsac-balance-256", "PQL", 0.25), _rec("mj-ddpgn-balance-256", "DDPG(n)", 0.25),
            _rec("mj-rslrl-balance-256", "rsl_rl", None)]   # rsl_rl reads its training return: no cadence
    assert b._cadences(recs) == "0.25 s"


def test_rows_at_another_cadence_are_named():
    b = _bench()
    recs = [_rec("mj-pqlsac-balance-256", "PQL 256", 0.25), _rec("mj-ddpgn-balance-256", "DDPG(n) 256", 0.25),
            _rec("mj-ddpgn-balance-64", "DDPG(n) 64", None), _rec("mj-sacn-balance-256", "SAC(n) 256", 0.25)]
    assert b._cadences(recs) == "0.25 s (1 s for: DDPG(n) 64)"
