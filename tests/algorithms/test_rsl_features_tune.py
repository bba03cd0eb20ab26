"""The rsl_rl-feature keys through Tune and the CLI: FastPPO with ``symmetry``
and ``rnd`` and PopPPO with ``symmetry`` in a ``tune.Tuner`` (restored from
their checkpoints with the extensions), and ``rllib train file`` running the
shipped distillation example. All run on one local Ray for the module (the CLI
uses a Ray that is already up)."""
import json

import pytest
import ray
from ray import tune

from rllib_fast.algorithms.ppo import FastPPOConfig

PENDULUM_MIRROR = "rllib_fast.algorithms.extensions:pendulum_mirror"


@pytest.fixture(scope="module")
def ray_session():
    import rllib_fast

    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, ignore_reinit_error=True)
    rllib_fast.register()   # Tune's registry is per Ray session
    yield
    ray.shutdown()


def test_tuner_runs_and_restores_fastppo_with_symmetry_and_rnd(tmp_path, ray_session):
    from ray.rllib.algorithms.algorithm import Algorithm

    cfg = (FastPPOConfig().environment("Pendulum", num_envs=8)
           .training(rollout_length=16, decorrelate_steps=0,
                     symmetry={"mirror_fn": PENDULUM_MIRROR, "use_data_augmentation": True},
                     rnd={"weight": 0.5, "obs_indices": [0, 1]}))
    results = tune.Tuner("FastPPO", param_space=cfg, run_config=tune.RunConfig(
        storage_path=str(tmp_path), stop={"training_iteration": 2},
        checkpoint_config=tune.CheckpointConfig(checkpoint_at_end=True))).fit()
    assert not results.errors
    best = results.get_best_result(metric="training_iteration", mode="max")
    learner = best.metrics["learners"]["default_policy"]
    assert "symmetry_loss" in learner and "rnd_loss" in learner
    algo = Algorithm.from_checkpoint(best.checkpoint)
    assert algo.symmetry is not None and algo.rnd is not None and algo.rnd.env_steps == 32
    algo.stop()


def test_tuner_runs_and_restores_popppo_with_symmetry(tmp_path, ray_session):
    import rllib_fast
    from ray.rllib.algorithms.algorithm import Algorithm

    from rllib_fast.algorithms import PopPPOConfig

    rllib_fast.register()
    cfg = (PopPPOConfig().environment("Pendulum")
           .training(population_size=2, num_envs_per_member=4, rollout_length=16, decorrelate_steps=0,
                     symmetry={"mirror_fn": PENDULUM_MIRROR, "use_data_augmentation": True,
                               "use_mirror_loss": True, "mirror_loss_coeff": 0.1}))
    results = tune.Tuner("PopPPO", param_space=cfg, run_config=tune.RunConfig(
        storage_path=str(tmp_path), stop={"training_iteration": 2},
        checkpoint_config=tune.CheckpointConfig(checkpoint_at_end=True))).fit()
    assert not results.errors
    best = results.get_best_result(metric="training_iteration", mode="max")
    assert "symmetry_loss" in best.metrics["learners"]["default_policy"]
    algo = Algorithm.from_checkpoint(best.checkpoint)
    assert algo.symmetry is not None and algo.num_updates == 2
    algo.stop()


@pytest.mark.usefixtures("isolated_run")
def test_rllib_train_file_runs_the_shipped_distillation_example(tmp_path, capsys):
    from pathlib import Path

    from rllib_fast.cli import main

    teacher = FastPPOConfig().environment("CartPole", num_envs=8).training(rollout_length=8).build_algo()
    teacher.train()
    path = teacher.save_to_path(str(tmp_path / "teacher"))
    teacher.stop()
    example = Path(__file__).resolve().parents[2] / "tune_configs" / "cartpole-distillation.yaml"
    rc = main(["train", "file", str(example), "--stop", '{"training_iteration": 2}', "--no-mlflow",
               "--config", json.dumps({"teacher_checkpoint": path, "num_envs": 8}), "--ray-num-cpus", "2"])
    out = capsys.readouterr().out
    assert rc == 0, out[-3000:]
    assert "2 iterations" in out, out[-3000:]
