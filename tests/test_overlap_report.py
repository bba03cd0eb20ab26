"""``benchmarks/overlap.py``'s report logic (no simulator needed): issue 25 part 2 is judged
on the seeds both arms ran, with an unreached seed counted as infinite, and on the median
per-round ratio of loop rate to the raw simulator's."""
from tests._benchmarks import load_benchmark


def _bench():
    return load_benchmark("overlap.py", "rllib_fast_bench_overlap_test")


def _run(arm, seed, steps, reached=True, task="balance"):
    return dict(task=task, arm=arm, seed=seed, n=256, reached=reached, env_steps=steps, time_s=10.0,
                startup_s=0.5)


def test_an_unreached_seed_counts_as_infinite_in_the_median():
    b = _bench()
    assert b.median_steps([_run("sync", 0, 100), _run("sync", 1, 300), _run("sync", 2, 999, reached=False)]) == 300
    assert b.median_steps([_run("sync", 0, 100), _run("sync", 1, 5, reached=False),
                           _run("sync", 2, 5, reached=False)]) is None
    assert b.median_steps([]) is None


def test_arms_are_compared_on_the_seeds_both_ran_and_a_rerun_seed_replaces_the_old_run():
    b = _bench()
    recs = [_run("sync", 0, 100), _run("sync", 1, 200), _run("sync", 2, 300), _run("overlap", 0, 110),
            _run("overlap", 1, 999), _run("overlap", 1, 210), _run("sync", 0, 1, task="swingup")]
    runs = b.paired(recs, "balance")
    assert [r["seed"] for r in runs["sync"]] == [0, 1] == [r["seed"] for r in runs["overlap"]]
    assert [r["env_steps"] for r in runs["overlap"]] == [110, 210]
    assert b.paired(recs, "swingup") == {"sync": [], "overlap": []}


def test_the_rate_ratio_is_the_median_of_per_round_ratios():
    b = _bench()
    rounds = {"raw": [10.0, 20.0, 10.0], "sync": [8.0, 16.0, 7.0], "overlap": [9.0, 19.0, 10.0]}
    assert b.rate_ratio(rounds, "sync") == 0.8
    assert b.rate_ratio(rounds, "overlap") == 0.95


def test_the_recipe_arms_differ_only_in_learn_while_stepping():
    b = _bench()
    for task in b.TASKS:
        sync, over = b.recipe(task, "sync"), b.recipe(task, "overlap")
        assert sync.pop("learn_while_stepping") is False and over.pop("learn_while_stepping") is True
        assert sync == over and sync["compile"] is False
