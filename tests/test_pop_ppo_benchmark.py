"""benchmarks/pop_ppo.py's report logic on synthetic records: the issue's goal ratios (best
rsl_rl N, arms that did not reach the target) and the shared-simulator throughput line."""
import os
import sys

import pytest

BENCH = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "benchmarks")


@pytest.fixture(scope="module")
def bench():
    sys.path.insert(0, BENCH)
    try:
        import pop_ppo
        yield pop_ppo
    finally:
        sys.path.remove(BENCH)


def _learn(key, t, steps=1e5, n=256):
    reached = None if t is None else {"t": t, "steps": steps, "cpu": t}
    return {"mode": "learn", "key": key, "label": key, "family": key, "num_envs": n, "target": 9.0,
            "budget_s": 600.0, "reached": reached, "status": "ok", "best_return": 9.5 if t else 5.0}


def _tput(n, sps):
    return {"mode": "throughput", "key": f"raw-{n}", "family": "raw", "num_envs": n, "tput_overall": sps,
            "status": "ok"}


def test_goal_ratios_use_the_best_rsl_rl_n_and_say_met_or_not(bench):
    import _report as R

    records = [_learn("rsl_rl-256", 60.0), _learn("rsl_rl-1024", 40.0), _learn("popppo4-256", 55.0),
               _learn("pbt-256", 160.0), _learn("popppo8-pend", 90.0), _learn("fastppo-pend", 40.0)]
    goals = bench.goals(R.aggregate_learn(records))
    assert goals[0][1:] == ["1.38x", "<= 1.5x", "met"]          # 55 / min(60, 40)
    assert goals[1][1:] == ["2.91x", ">= 2.5x", "met"]          # 160 / 55
    assert goals[2][1:] == ["2.25x", "<= 2x", "not met"]        # 90 / 40


def test_an_arm_that_did_not_reach_gives_no_ratio(bench):
    import _report as R

    goals = bench.goals(R.aggregate_learn([_learn("rsl_rl-256", 60.0), _learn("popppo4-256", None)]))
    assert goals[0][1] == "–" and goals[0][3] == "–"


def test_shared_simulator_line_and_report_build(bench):
    records = [_tput(256, 10000.0), _tput(1024, 20000.0), _learn("popppo4-256", 55.0, n=1024)]
    line = bench.shared_vs_separate(records)
    assert "2.00x" in line and "1024 envs" in line
    md = bench.build_report(records, {"date": "d", "machine": "m", "threads": 1, "seeds": [0], "budget": 600,
                                      "quick": True})
    assert "## Goals" in md and "## mjlab Cartpole balance" in md and "not a measurement" in md
