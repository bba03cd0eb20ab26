"""PopPPO on the real mjlab simulator (MuJoCo Warp on CPU): K members on one shared env,
the Go1 critic group as the members' asymmetric critic input, PBT rounds, checkpoint and
exact restore."""
import rllib_fast  # noqa: F401

import math

import pytest
import torch

pytest.importorskip("mjlab")

from rllib_fast.core.stacked import member_tensors

CARTPOLE = "mjlab:Mjlab-Cartpole-Balance"
GO1 = "mjlab:Mjlab-Velocity-Flat-Unitree-Go1"


def test_popppo_cartpole_members_share_one_simulator_and_run_pbt():
    from rllib_fast.algorithms import PopPPOConfig

    cfg = (PopPPOConfig().environment(CARTPOLE, env_config={"cfg": {"episode_length_s": 1.0}})
           .training(population_size=2, num_envs_per_member=4, rollout_length=24, num_epochs=1, num_minibatches=2,
                     decorrelate_steps=0, hidden_sizes=[16], pbt_interval=1, pbt_init="sample")
           .debugging(seed=0))
    algo = cfg.build_algo()
    try:
        assert algo.env.num_envs == 8          # one simulator for both members
        for _ in range(3):
            r = algo.train()
        assert r["population"]["pbt_rounds"] >= 1
        fit = [r["population"][f"member_{m}"]["episode_return_mean"] for m in range(2)]
        assert any(math.isfinite(v) for v in fit)
        assert math.isfinite(r["env_runners"]["episode_return_mean"])
    finally:
        algo.stop()


def test_popppo_go1_critic_group_checkpoint_and_restore(tmp_path):
    from ray.rllib.algorithms.algorithm import Algorithm

    from rllib_fast.algorithms import PopPPOConfig

    cfg = (PopPPOConfig().environment(GO1)
           .training(population_size=2, num_envs_per_member=2, rollout_length=8, num_minibatches=2, num_epochs=1,
                     decorrelate_steps=0, hidden_sizes=[32, 32], asymmetric_critic=True, pbt_interval=None)
           .debugging(seed=0))
    algo = cfg.build_algo()
    try:
        assert algo.state_dim == 72 and algo.module.vf.layers[0].in_features == 72
        assert algo.module.pi.layers[0].in_features == 48
        for _ in range(2):
            r = algo.train()
        assert math.isfinite(r["learners"]["default_policy"]["vf_loss"])
        path = algo.save_to_path(str(tmp_path / "ckpt"))
        saved = [t.clone() for t in member_tensors(algo.module)]
    finally:
        algo.stop()
    restored = Algorithm.from_checkpoint(path)
    try:
        for a, b in zip(member_tensors(restored.module), saved):
            assert torch.equal(a, b)
        r = restored.train()
        assert restored.training_iteration == 3 and math.isfinite(r["learners"]["default_policy"]["vf_loss"])
        out = restored.get_module().forward_inference({"obs": restored.obs[:3]})["actions"]
        assert out.shape == (3, 12)
    finally:
        restored.stop()
