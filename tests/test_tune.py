"""Tune integration: Tuner, legacy tune.run, PBT (lr really applied), Optuna."""
import pytest
import ray
from ray import tune
from ray.tune.schedulers import PopulationBasedTraining

from rllib_fast.algorithms.ppo import FastPPOConfig

RET = "env_runners/episode_return_mean"


@pytest.fixture(scope="module", autouse=True)
def ray_session():
    import rllib_fast

    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, ignore_reinit_error=True)
    rllib_fast.register()  # Tune's registry is per Ray session
    yield
    ray.shutdown()


def _cfg(**kw):
    return FastPPOConfig().environment("CartPole", num_envs=16).training(rollout_length=16, **kw)


def test_tuner_by_name_with_checkpoint(tmp_path):
    from ray.rllib.algorithms.algorithm import Algorithm

    tuner = tune.Tuner("FastPPO", param_space=_cfg(), run_config=tune.RunConfig(
        storage_path=str(tmp_path), stop={"training_iteration": 3},
        checkpoint_config=tune.CheckpointConfig(checkpoint_at_end=True)))
    results = tuner.fit()
    assert not results.errors
    best = results.get_best_result(metric=RET, mode="max")
    assert best.metrics["training_iteration"] == 3 and best.metrics["num_env_steps_sampled_lifetime"] > 0
    algo = Algorithm.from_checkpoint(best.checkpoint)
    assert algo.training_iteration == 3
    algo.stop()


def test_legacy_tune_run_with_grid_search(tmp_path):
    cfg = _cfg().to_dict()
    cfg["lr"] = tune.grid_search([1e-3, 3e-4])
    analysis = tune.run("FastPPO", config=cfg, stop={"training_iteration": 2}, storage_path=str(tmp_path),
                        verbose=0)
    assert len(analysis.trials) == 2 and all(t.status == "TERMINATED" for t in analysis.trials)
    assert {t.config["lr"] for t in analysis.trials} == {1e-3, 3e-4}


@pytest.mark.parametrize("reuse_actors", [True, False])
def test_pbt_mutates_lr_and_algorithm_applies_it(tmp_path, reuse_actors):
    initial = [1e-4, 3e-3]
    # a fixed lr (FastPPO's default adapts it to the epoch KL): the optimizer must run with the trial's lr
    param_space = _cfg(adaptive_lr_kl_target=None).to_dict()
    param_space["lr"] = tune.grid_search(initial)
    pbt = PopulationBasedTraining(time_attr="training_iteration", perturbation_interval=2,
                                  hyperparam_mutations={"lr": tune.loguniform(1e-5, 1e-2)},
                                  quantile_fraction=0.5, resample_probability=0.0, synch=True)
    seen = []

    class Record(tune.Callback):
        def on_trial_result(self, iteration, trials, trial, result, **info):
            seen.append((result["config"]["lr"], result["learners"]["default_policy"]["curr_lr"]))

    tuner = tune.Tuner("FastPPO", param_space=param_space, tune_config=tune.TuneConfig(
        scheduler=pbt, metric=RET, mode="max", reuse_actors=reuse_actors),
        # exploits after iteration 2: iterations 3 and 4 run with the mutated lr
        run_config=tune.RunConfig(storage_path=str(tmp_path), stop={"training_iteration": 4},
                                  callbacks=[Record()], checkpoint_config=tune.CheckpointConfig(
                                      checkpoint_frequency=2)))
    results = tuner.fit()
    assert not results.errors
    mutated = [(cfg_lr, algo_lr) for cfg_lr, algo_lr in seen if cfg_lr not in initial]
    assert mutated, f"PBT never exploited/explored: {seen}"
    for cfg_lr, algo_lr in seen:  # after every exploit the optimizer runs with the trial's lr
        assert algo_lr == pytest.approx(cfg_lr, rel=1e-9)


def test_optuna_search_three_trials(tmp_path):
    from ray.tune.search.optuna import OptunaSearch

    space = _cfg().to_dict()
    space["lr"] = tune.loguniform(1e-4, 3e-3)
    space["clip_param"] = tune.uniform(0.1, 0.3)
    tuner = tune.Tuner("FastPPO", param_space=space, tune_config=tune.TuneConfig(
        search_alg=OptunaSearch(seed=0), metric=RET, mode="max", num_samples=3),
        run_config=tune.RunConfig(storage_path=str(tmp_path), stop={"training_iteration": 2}))
    results = tuner.fit()
    assert not results.errors and len(results) == 3
    lrs = {r.config["lr"] for r in results}
    assert len(lrs) == 3 and all(1e-4 <= lr <= 3e-3 for lr in lrs)


def test_register_survives_a_new_ray_session():
    import rllib_fast
    from ray.tune.registry import get_trainable_cls

    ray.shutdown()
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    rllib_fast.register()
    assert get_trainable_cls("FastPPO").__name__ == "FastPPO"


@pytest.mark.parametrize("name", ["FastDQN", "Rainbow", "EpsRainbow"])
def test_dqn_family_runs_under_tune_by_name(tmp_path, name):
    from rllib_fast.algorithms import CONFIGS

    cfg = CONFIGS[name]().environment("CartPole", num_envs=4).training(
        buffer_size=1000, batch_size=16, learning_starts=16, hidden_sizes=[16], v_min=0.0, v_max=100.0)
    cfg.min_sample_timesteps_per_iteration = 64
    results = tune.Tuner(name, param_space=cfg, run_config=tune.RunConfig(
        storage_path=str(tmp_path), stop={"training_iteration": 2})).fit()
    assert not results.errors
    r = results[0].metrics
    assert r["learners"]["default_policy"]["num_updates_lifetime"] > 0
