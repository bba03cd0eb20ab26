"""Tune PBT across trials whose every trial is a whole population (paper settings preset)."""
import pytest
import ray
from ray import tune

from rllib_fast.algorithms.population import PopTD3Config
from rllib_fast.tune.pbt import PAPER_QUANTILE, PAPER_RESAMPLE, default_mutations, paper_pbt, pbt_tuner


@pytest.fixture(scope="module", autouse=True)
def ray_session():
    import rllib_fast

    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, ignore_reinit_error=True)
    rllib_fast.register()
    yield
    ray.shutdown()


def test_paper_preset_settings():
    pbt = paper_pbt(algo="PopTD3")
    assert pbt._quantile_fraction == PAPER_QUANTILE == 0.3
    assert pbt._resample_probability == PAPER_RESAMPLE == 1.0
    assert {"actor_lr", "critic_lr", "policy_delay", "gamma"} <= set(default_mutations("PopTD3"))
    assert "lr" in default_mutations("FastDQN")          # single-agent trials of any of our algorithms
    with pytest.raises(ValueError, match="allowed"):
        default_mutations("NoSuchAlgo")


def test_tune_pbt_across_two_population_trials(tmp_path):
    cfg = PopTD3Config().environment("Pendulum").training(
        population_size=4, hidden_sizes=[16], batch_size=16, learning_starts=0, rollout_length=200,
        updates_per_step=0.05, buffer_size=2000, pbt_init="config", pbt_interval=10, pbt_fraction=0.25,
        hyperparam_mutations={"exploration_noise": [0.1, 0.2, 0.3]}).debugging(seed=0)
    space = cfg.to_dict()
    space["seed"] = tune.grid_search([0, 1])
    seen = []

    class Record(tune.Callback):
        def on_trial_result(self, iteration, trials, trial, result, **info):
            members = [result["population"][f"member_{m}"]["actor_lr"] for m in range(4)]
            seen.append((result["config"]["actor_lr"], members, result["population"]["pbt_rounds"]))

    tuner = pbt_tuner("PopTD3", space, num_trials=1, stop={"training_iteration": 3}, perturbation_interval=1,
                      storage_path=str(tmp_path), hyperparam_mutations={"actor_lr": tune.loguniform(1e-4, 1e-2)},
                      reuse_actors=True, synch=True, callbacks=[Record()])
    results = tuner.fit()
    assert not results.errors
    assert len(results) == 2
    assert all(r.metrics["training_iteration"] == 3 for r in results)
    assert any(cfg_lr != 3e-4 for cfg_lr, _, _ in seen), "Tune PBT never exploited/explored"
    for cfg_lr, members, _ in seen:          # a trial-level mutation reaches every member
        assert members == pytest.approx([cfg_lr] * 4, rel=1e-6)
    assert max(r for _, _, r in seen) >= 1   # in-trial PBT ran inside the trials too
