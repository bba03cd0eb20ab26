"""RatioController under PQL's resolved slack: free-running components never
wait for each other (no max_wait_s overrides)."""
import pytest

from rllib_fast.algorithms.pql.ratio import RatioController


@pytest.mark.parametrize("beta_av,beta_pv", [(8.0, 2.0), (1.0, 5.0), (0.1, 2.0)])
def test_auto_slack_never_lets_two_components_block_each_other(beta_av, beta_pv):
    """Free-running Actor, critic and P-learner under PQL's resolved slack: no
    waiter ever needs the max_wait_s override (with 2*beta_av alone, (1, 5) and
    (0.1, 2) blocked each other and progressed only through overrides)."""
    import threading
    import time

    from rllib_fast.algorithms.pql import PQLConfig

    cfg = PQLConfig().training(beta_av=beta_av, beta_pv=beta_pv)
    slack = cfg.resolved_slack()
    c = RatioController(("actor", "critic", "policy"), [("actor", "critic", 1 / beta_av),
                                                        ("policy", "critic", 1 / beta_pv)],
                        slack=slack, depth=4 * slack, max_wait_s=0.2)
    c.arm()
    stop = threading.Event()

    def run(name):
        while not stop.is_set():
            c.gate(name)
            c.tick(name)

    threads = [threading.Thread(target=run, args=(n,)) for n in c.names]
    for t in threads:
        t.start()
    time.sleep(0.2)                                  # all started
    with c.cond:
        before, overrides = dict(c.counts), dict(c.overrides)
    time.sleep(1.0)
    with c.cond:
        after, overrides_after = dict(c.counts), dict(c.overrides)
    stop.set()
    c.close()
    for t in threads:
        t.join()
    # Blocked components would advance only through overrides, one per max_wait_s each; free ones
    # advance at the rates the ratios allow beside the busiest (thousands on an idle machine, tens to
    # hundreds beside a loaded one: the check is relative, not a speed).
    d = {n: after[n] - before[n] for n in c.names}
    assert sum(overrides_after.values()) - sum(overrides.values()) <= 2, (overrides, overrides_after)
    assert min(d.values()) >= 5, d
    for name, per_critic_update in (("actor", 1 / beta_av), ("policy", 1 / beta_pv)):
        assert d[name] >= 0.5 * per_critic_update * d["critic"] - slack, (name, d, slack)


def test_explicit_slack_that_can_deadlock_is_rejected():
    from rllib_fast.algorithms.pql import PQLConfig

    with pytest.raises(ValueError, match="`ratio_slack` = 2.0 lets the critic"):
        PQLConfig().environment("Pendulum").training(beta_av=1.0, beta_pv=5.0, ratio_slack=2.0).validate()
