"""The simulator's own training state in checkpoints (``TensorVecEnv.get_training_state``):
mjlab's ``common_step_counter``, which schedules its curricula, is saved and restored, so a
resumed run continues the curriculum instead of restarting it. Against the real mjlab Go1
velocity task (its command-range curriculum), on CPU."""
import rllib_fast  # noqa: F401  (registers everything first)

import pytest

from rllib_fast.envs.base import TensorVecEnv

pytest.importorskip("mjlab")

GO1 = "mjlab:Mjlab-Velocity-Flat-Unitree-Go1"
STAGE_AT = 10   # the second curriculum stage starts at this env step count
STAGES = [{"step": 0, "lin_vel_x": (-1.0, 1.0), "ang_vel_z": (-0.5, 0.5)},
          {"step": STAGE_AT, "lin_vel_x": (-1.5, 2.0), "ang_vel_z": (-0.7, 0.7)}]


def test_sources_without_training_state_save_none():
    assert TensorVecEnv.get_training_state(object()) is None


def _counter(algo) -> int:
    return int(algo.env._base.common_step_counter)


def _lin_vel_x_range(algo) -> tuple:
    return tuple(algo.env._base.command_manager.get_term("twist").cfg.ranges.lin_vel_x)


def test_resumed_mjlab_run_continues_its_curriculum(tmp_path):
    from ray.rllib.algorithms.algorithm import Algorithm

    from rllib_fast.algorithms.ppo import FastPPOConfig

    # 5-step episodes: every env resets (and mjlab's curriculum terms run) every 5 steps
    env_config = {"cfg": {"episode_length_s": 0.1, "curriculum.command_vel.params.velocity_stages": STAGES}}
    cfg = (FastPPOConfig().environment(GO1, num_envs=2, env_config=env_config)
           .training(rollout_length=4, num_minibatches=1, num_epochs=1, decorrelate_steps=0,
                     hidden_sizes=[16])
           .debugging(seed=0))
    algo = cfg.build_algo()
    try:
        algo.train()
        saved = _counter(algo)   # the setup's 2 validation steps + one 4-step rollout
        assert saved == 6 and _lin_vel_x_range(algo) == (-1.0, 1.0)
        assert algo.env.get_training_state() == {"common_step_counter": saved}
        path = algo.save_to_path(str(tmp_path / "ckpt"))
    finally:
        algo.stop()
    restored = Algorithm.from_checkpoint(path)
    try:
        assert _counter(restored) == saved   # restored, not the fresh build's count (2)
        for _ in range(2):
            restored.train()
        # the envs reset 5 steps into the resumed run, at count 11 >= STAGE_AT: they drew their
        # commands from the second stage's range (a restarted count would be 2 + 5 = 7 there: the first stage)
        assert _counter(restored) == saved + 2 * 4
        assert _lin_vel_x_range(restored) == (-1.5, 2.0)
        assert restored.get_state()["env_training"] == {"common_step_counter": saved + 8}
    finally:
        restored.stop()
