"""benchmarks/mjlab.py --recipes: its report logic on synthetic records (the goal ratio
against rsl_rl's best N with unreached seeds counted as infinite, the time split and the
physics floor)."""
import importlib.util
import math
import os
import sys

import pytest

BENCH = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "benchmarks")


@pytest.fixture(scope="module")
def bench():
    """The file under a name of its own (as ``mjlab`` it would shadow the package)."""
    spec = importlib.util.spec_from_file_location("bench_mjlab_recipes", os.path.join(BENCH, "mjlab.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    yield mod
    sys.path[:] = [p for p in sys.path if os.path.abspath(p) != BENCH]


def _learn(key, family, ts, n, sps=(8000.0, 10000.0)):
    return [{"mode": "learn", "key": key, "label": key, "family": family, "num_envs": n, "target": 9.0,
             "budget_s": 400.0, "reached": None if t is None else {"t": t, "steps": 1e5, "cpu": t},
             "status": "ok", "best_return": 9.5 if t else 5.0, "sps_overall": sps[0], "sps_sampling": sps[1]}
            for t in ts]


def _busy(key, n, sps):
    return {"mode": "throughput", "key": f"raw_busy_{key}-{n}", "family": f"raw busy {key}", "num_envs": n,
            "tput_overall": sps, "status": "ok"}


def test_arms_cover_every_rsl_rl_n_and_the_shipped_recipe(bench):
    keys = [a.key for a in bench.recipe_arms("swingup")]
    assert [f"rsl_rl_swingup-{n}" for n in (64, 128, 256, 1024)] == keys[:4]
    n, over = bench._recipe_schedule("mjlab-cartpole-swingup-fast")
    assert f"recipe_swingup-{n}" in keys and f"raw_busy_swingup-{n}" in keys
    (recipe,) = [a for a in bench.recipe_arms("balance") if a.family == "recipe"]
    assert recipe.kwargs["file"] == "mjlab-cartpole-balance-fast"


def test_rsl_rl_gets_the_recipes_schedule_as_its_own_config_keys(bench):
    """The peer's side of the sweep: every schedule setting of the recipe that differs from
    mjlab's registered config, under rsl_rl's name for it."""
    n, over = bench._recipe_schedule("mjlab-cartpole-balance-fast")
    assert (n, over) == (256, {"num_steps_per_env": 4})
    (arm,) = [a for a in bench.recipe_arms("balance") if a.key == "rsl_rl_recipe_balance-256"]
    assert arm.kwargs["overrides"] == {"num_steps_per_env": 4} and "4 steps/env" in arm.label
    import yaml

    with open(os.path.join(os.path.dirname(BENCH), "tune_configs", "mjlab-cartpole-swingup-fast.yaml")) as f:
        (exp,) = yaml.safe_load(f).values()
    cfg = exp["config"]
    n, over = bench._recipe_schedule("mjlab-cartpole-swingup-fast")
    expect = {rsl: cfg[ours] for ours, (rsl, default) in bench.RSL_SCHEDULE.items() if cfg.get(ours, default) != default}
    assert over == expect and (n, over.get("algorithm.gamma")) == (cfg["num_envs"], cfg["gamma"])
    keys = {a.key: a for a in bench.recipe_arms("swingup")}
    assert keys[f"rsl_rl_recipe_swingup-{n}"].kwargs["overrides"] == over
    if cfg.get("compile"):   # a compiled recipe runs with torch's compile cache warm and cold
        assert keys[f"recipe_cold_swingup-{n}"].kwargs["compile_cache"] == "cold"
        assert "compile_cache" not in keys[f"recipe_swingup-{n}"].kwargs


def test_median_counts_a_seed_that_did_not_reach_as_infinite(bench):
    assert bench._median_with_misses({"t_reach_all": [10.0, None, 20.0]}) == 20.0
    assert bench._median_with_misses({"t_reach_all": [10.0, None, None]}) == math.inf


def test_goal_line_takes_rsl_rls_best_n_and_says_met_or_not(bench):
    records = (_learn("rsl_rl_balance-64", "rsl_rl", [30.0, 31.0, 29.0], 64)
               + _learn("rsl_rl_balance-256", "rsl_rl", [22.0, 24.0, None], 256)   # median 24 (inf counts)
               + _learn("recipe_balance-128", "recipe", [15.0, 16.0, 17.0], 128)
               + [_busy("balance", 128, 9000.0), _busy("balance", 256, 16000.0)])
    text = "\n".join(bench.recipe_goal_lines("balance", records))
    assert "recipe median 16.0 s" in text and "rsl_rl_balance-256" in text and "1.50x sooner" in text
    assert "**met**" in text
    # time split: simulator share = overall / raw busy; the floor = 200 steps x N / raw busy
    assert "89%" in text and "2.8 s" in text      # recipe: 8000 / 9000; 200 * 128 / 9000
    # rsl_rl given the recipe's schedule is reported beside the goal, not as the goal's reference
    tuned = records + _learn("rsl_rl_recipe_balance-128", "rsl_rl", [20.0, 20.0, 21.0], 128)
    text = "\n".join(bench.recipe_goal_lines("balance", tuned))
    assert "1.50x sooner" in text and "**met**" in text
    assert "recipe's own schedule" in text and "1.25x sooner (below 1.5x" in text
    slower = [r for r in records if r["family"] != "recipe"] + _learn("recipe_balance-128", "recipe", [20.0] * 3, 128)
    assert "1.20x sooner" in "\n".join(bench.recipe_goal_lines("balance", slower))
    assert "**not met**" in "\n".join(bench.recipe_goal_lines("balance", slower))
