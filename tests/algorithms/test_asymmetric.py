"""Asymmetric actor-critic: the critic (and its input normaliser) read the
source's privileged ``states``, the actor reads the observation.

The Isaac stand-ins have 6-dim observations and 8-dim states (position,
velocity, target - position; states add the target itself)."""
import rllib_fast  # noqa: F401  (registers everything first)

import math

import gymnasium as gym
import pytest
import torch

from rllib_fast.algorithms import CONFIGS
from rllib_fast.envs.base import Step, TensorVecEnv

VECTASK = ("isaacgym:PointReach", {"task_class": "rllib_fast.envs.standins.vectask:PointReachTask",
                                   "cfg": {"env": {"episodeLength": 16}}})
LAB = ("isaaclab:PointReach-Direct-v0", {"env_class": "rllib_fast.envs.standins.isaaclab:PointReachLabEnv",
                                         "cfg": {"episode_length_s": 0.8}})
OBS_DIM, STATE_DIM = 6, 8
ON_POLICY = ("FastPPO", "FastA2C", "HTSPPO", "HTSA2C")


def _in_features(net: torch.nn.Module) -> int:
    return next(m for m in net.modules() if isinstance(m, torch.nn.Linear)).in_features


def _on_policy(name, source, num_envs=8, **kw):
    env, env_config = source
    training = dict(rollout_length=8, decorrelate_steps=4, **kw)
    if name.startswith("HTS"):
        training.update(num_executors=2)
    if name.endswith("PPO"):
        training.update(num_minibatches=2, num_epochs=2)
    return (CONFIGS[name]().environment(env, num_envs=num_envs, env_config=env_config)
            .training(**training).debugging(seed=0))


@pytest.mark.parametrize("name", ON_POLICY)
@pytest.mark.parametrize("source", [VECTASK, LAB], ids=["isaacgym", "isaaclab"])
def test_on_policy_auto_uses_states_for_the_critic(name, source):
    algo = _on_policy(name, source).build_algo()
    try:
        assert algo.config.asymmetric_critic == "auto"
        m = algo.module
        assert _in_features(m.vf) == STATE_DIM and _in_features(m.pi) == OBS_DIM
        assert m.state_norm.mean.shape == (STATE_DIM,)
        assert algo.storage["states"].shape[-1] == STATE_DIM
        for _ in range(2):   # HTS consumes its first batch in the second round
            r = algo.train()
        learner = r["learners"]["default_policy"]
        assert math.isfinite(learner["policy_loss"]) and math.isfinite(learner["vf_loss"])
        # the critic's input statistics absorbed the states (count grew past its epsilon start)
        assert float(m.state_norm.count) > algo.env.num_envs
        # inference is the actor's: observations only
        out = algo.get_module().forward_inference({"obs": torch.zeros(3, OBS_DIM)})
        assert out["actions"].shape == (3, 2)
        values = m.compute_values({"obs": torch.zeros(3, OBS_DIM), "states": torch.zeros(3, STATE_DIM)})
        assert values.shape == (3,)
        with pytest.raises(KeyError, match="states"):
            m.compute_values({"obs": torch.zeros(3, OBS_DIM)})
    finally:
        algo.stop()


def test_asymmetric_false_keeps_the_critic_on_observations():
    algo = _on_policy("FastPPO", VECTASK, asymmetric_critic=False).build_algo()
    try:
        assert _in_features(algo.module.vf) == OBS_DIM and "states" not in algo.storage.data
        assert not hasattr(algo.module, "state_norm")
        algo.train()
    finally:
        algo.stop()


def test_asymmetric_true_requires_states():
    algo = _on_policy("FastA2C", VECTASK, asymmetric_critic=True).build_algo()
    assert _in_features(algo.module.vf) == STATE_DIM
    algo.stop()
    # auto on a source without states: the ordinary symmetric critic
    cfg = CONFIGS["FastPPO"]().environment("CartPole", num_envs=4).training(rollout_length=8, num_minibatches=2)
    algo = cfg.build_algo()
    assert _in_features(algo.module.vf) == 4
    algo.stop()
    with pytest.raises(ValueError) as err:
        cfg.training(asymmetric_critic=True).build_algo()
    msg = str(err.value)
    assert "\n" not in msg and "`asymmetric_critic` = True" in msg and "allowed: 'auto' or False" in msg


def test_asymmetric_critic_validation():
    with pytest.raises(ValueError, match="asymmetric_critic.*allowed: 'auto', True or False"):
        CONFIGS["FastPPO"]().environment("CartPole").training(asymmetric_critic="yes").validate()
    with pytest.raises(ValueError, match="asymmetric_critic"):
        CONFIGS["FastPPO"]().environment("CartPole").training(asymmetric_critic=1).validate()


class _MarkedStates(TensorVecEnv):
    """Obs 2, states 3; every env truncates every 3rd step. ``states`` count the
    steps; ``final_states`` of a truncation carry a marker (-1) in their last
    column so the test can see which states the critic bootstraps from."""

    def __init__(self, num_envs=4, with_final=True):
        self.num_envs, self.device = num_envs, torch.device("cpu")
        self.single_observation_space = gym.spaces.Box(-10, 10, (2,))
        self.single_action_space = gym.spaces.Box(-1, 1, (1,))
        self.single_state_space = gym.spaces.Box(-100, 100, (3,))
        self.with_final = with_final
        self.t = 0

    def _states(self):
        return torch.full((self.num_envs, 3), float(self.t % 3))

    def reset(self, seed=None):
        self.t = 0
        self.states = self._states()
        return torch.zeros(self.num_envs, 2)

    def step(self, actions):
        self.t += 1
        trunc = torch.full((self.num_envs,), self.t % 3 == 0)
        final = self._states()
        final[:, 2] = torch.where(trunc, torch.tensor(-1.0), final[:, 2])
        self.states = self._states()
        extras = {"states": self.states, **({"final_states": final} if self.with_final else {})}
        return Step(obs=torch.zeros(self.num_envs, 2), reward=torch.ones(self.num_envs),
                    terminated=torch.zeros(self.num_envs, dtype=torch.bool), truncated=trunc,
                    final_obs=torch.zeros(self.num_envs, 2), valid=None, extras=extras)


@pytest.mark.parametrize("with_final", [True, False])
def test_rollout_stores_states_and_bootstraps_from_final_states(with_final):
    algo = (CONFIGS["FastA2C"]().environment(lambda ctx: _MarkedStates(ctx["num_envs"], with_final), num_envs=4)
            .training(rollout_length=6, decorrelate_steps=0, normalize_obs=False)
            .debugging(seed=0)).build_algo()
    try:
        algo._rollout()
        st = algo.storage
        # states[t] are the states the action was taken in: t % 3 (the env starts at t = 0)
        assert torch.equal(st["states"][:, 0, 0], torch.tensor([0., 1., 2., 0., 1., 2.]))
        done = st["done"][:, 0]
        assert done.tolist() == [False, False, True, False, False, True]
        fs = st["final_states"][:, 0]
        # not done: the next step's states; truncated: the source's final_states if given, else extras["states"]
        for t in (0, 1, 3, 4):
            assert torch.equal(fs[t], st["states"][t + 1, 0])
        for t in (2, 5):
            assert fs[t, :2].tolist() == [0.0, 0.0] and fs[t, 2].item() == (-1.0 if with_final else 0.0)
    finally:
        algo.stop()


def test_checkpoint_round_trip_keeps_states_and_state_statistics(tmp_path):
    cfg = _on_policy("FastPPO", LAB)
    algo = cfg.build_algo()
    try:
        algo.train()
        algo.save_to_path(str(tmp_path))
        sd = {k: v.clone() for k, v in algo.module.state_dict().items()}
        states = algo.states.clone()
        r1 = algo.train()
    finally:
        algo.stop()
    fresh = cfg.build_algo()
    try:
        fresh.restore_from_path(str(tmp_path))
        for k, v in fresh.module.state_dict().items():
            assert torch.equal(v, sd[k]), k
        assert "state_norm.mean" in sd and torch.equal(fresh.states, states)
        r2 = fresh.train()
        assert math.isfinite(r2["learners"]["default_policy"]["vf_loss"])
        assert r1["num_env_steps_sampled_lifetime"] == r2["num_env_steps_sampled_lifetime"]
    finally:
        fresh.stop()


def test_hts_checkpoint_round_trip_with_states(tmp_path):
    cfg = _on_policy("HTSPPO", VECTASK)
    algo = cfg.build_algo()
    try:
        algo.train()
        algo.save_to_path(str(tmp_path))
        states = algo.states.clone()
        pending = algo.buffers.read["states"].clone()
    finally:
        algo.stop()
    fresh = cfg.build_algo()
    try:
        fresh.restore_from_path(str(tmp_path))
        assert torch.equal(fresh.states, states)
        assert torch.equal(fresh.buffers.read["states"], pending) and pending.abs().sum() > 0
        r = fresh.train()
        assert math.isfinite(r["learners"]["default_policy"]["vf_loss"])
    finally:
        fresh.stop()


def test_fastppo_learns_with_an_asymmetric_critic():
    """The stand-in task of tests/envs/test_isaac_algorithms.py, now with the critic on states."""
    env, env_config = VECTASK
    env_config = {**env_config, "cfg": {"env": {"episodeLength": 64}}}
    cfg = (CONFIGS["FastPPO"]().environment(env, num_envs=32, env_config=env_config)
           .training(rollout_length=32, lr=1e-3, num_epochs=5, num_minibatches=4, adaptive_lr_kl_target=0.01)
           .debugging(seed=0))
    algo = cfg.build_algo()
    try:
        assert _in_features(algo.module.vf) == STATE_DIM
        best = -math.inf
        for _ in range(40):
            ret = algo.train()["env_runners"].get("episode_return_mean", math.nan)
            if ret == ret:
                best = max(best, ret)
            if best >= 35.0:   # random policy ~5, steering to the target ~48
                break
    finally:
        algo.stop()
    assert best >= 35.0

