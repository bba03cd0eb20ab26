"""HTSPPO under Tune: registered by name, and a trial whose iteration is still
running when Tune's time budget expires shuts down without hanging."""
import time

import ray
from ray import tune

from rllib_fast.algorithms.hts import HTSPPOConfig
from rllib_fast.envs.variable_time import VariableTimeCreator


def test_tune_stops_a_trial_mid_iteration_without_deadlock(tmp_path):
    import rllib_fast

    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, ignore_reinit_error=True)
    try:
        rllib_fast.register()
        # one iteration = 2 rounds of 60 steps of ~20 ms: Tune's 3 s budget expires inside the second iteration
        cfg = (HTSPPOConfig().environment(VariableTimeCreator("CartPole", mean_s=0.02, std_s=0.02), num_envs=4)
               .training(num_executors=2, sync_interval=60, rounds_per_iteration=2, decorrelate_steps=0,
                         validate_env_on_setup=False))
        t0 = time.monotonic()
        results = tune.Tuner("HTSPPO", param_space=cfg, tune_config=tune.TuneConfig(time_budget_s=3.0),
                             run_config=tune.RunConfig(storage_path=str(tmp_path), verbose=0)).fit()
        assert time.monotonic() - t0 < 60
        assert not results.errors
        metrics = results[0].metrics or {}            # (no result at all if the trial was still starting)
        if "hts" in metrics and metrics["training_iteration"] > 1:
            assert metrics["hts"]["policy_lag_max"] == 1.0
    finally:
        ray.shutdown()
