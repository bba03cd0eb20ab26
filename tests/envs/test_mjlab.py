"""mjlab source (rllib_fast/envs/mjlab.py) against the real mjlab 1.6 (MuJoCo Warp on
CPU): the tensor contract step by step on Cartpole and Go1, exact terminal
observations checked against a twin env that is never reset, and short runs of
FastPPO and DDPGN on Go1's critic group. The learning runs on Cartpole are in
tests/envs/test_mjlab_learning.py (a file of their own: see docs/testing.md)."""
import rllib_fast  # noqa: F401  (registers everything first)

import math
import os

import gymnasium as gym
import numpy as np
import pytest
import torch

from rllib_fast.envs import make, validate_env

pytest.importorskip("mjlab")

CARTPOLE = "mjlab:Mjlab-Cartpole-Balance"
GO1 = "mjlab:Mjlab-Velocity-Flat-Unitree-Go1"


def cart_out(env, limit: float = 0.3):
    """Test termination: the cart left |x| <= limit (Cartpole-Balance only times out)."""
    return env.scene["cartpole"].data.joint_pos[:, 0].abs() > limit


def _cart_out_term():
    from mjlab.managers.termination_manager import TerminationTermCfg

    return TerminationTermCfg(func=cart_out, params={"limit": 0.3})


def _run(env, actions, steps):
    """Reset with seed 0 and step ``steps`` times; every Step, kept as returned (the
    episode log of each step in ``env.logs``)."""
    first = env.reset(seed=0)
    out, env.logs = [], []
    for t in range(steps):
        out.append(env.step(actions))
        env.logs.append(env.last_log)
    return first, out


def test_cartpole_contract_final_obs_is_the_terminal_state():
    n = 4
    push = torch.tensor([[1.0], [0.0], [1.0], [0.0]])  # envs 0 and 2 drive the cart out: terminations
    # 10-step episodes (0.5 s / 0.05 s) plus a termination when the cart leaves |x| <= 0.3
    env = make(CARTPOLE, num_envs=n, seed=0, cfg={"episode_length_s": 0.5, "terminations.cart_out": _cart_out_term()})
    validate_env(env)
    assert env.max_episode_steps == 10 and env.step_dt == pytest.approx(0.05)
    assert env.single_observation_space == gym.spaces.Box(-np.inf, np.inf, (5,), np.float32)
    assert env.single_action_space == gym.spaces.Box(-1.0, 1.0, (1,), np.float32)  # rsl_rl cfg: None -> 1.0
    assert env.normalize_obs_hint is False  # the rsl_rl config: obs_normalization=False
    assert env.single_state_space is None  # Cartpole's critic group is the actor group: not exposed
    first, steps = _run(env, push, 25)
    assert first.shape == (n, 5) and first.dtype == torch.float32
    held = [(s.obs.clone(), s.final_obs.clone(), s.reward.clone(), s.terminated.clone(), s.truncated.clone())
            for s in steps]

    # the twin: same seed and actions, never reset (no time limit within the run, no extra termination)
    twin = make(CARTPOLE, num_envs=n, seed=0, cfg={"episode_length_s": 100.0})
    _, twin_steps = _run(twin, push, 25)

    ever_reset = torch.zeros(n, dtype=torch.bool)
    n_term = n_trunc = 0
    for t, s in enumerate(steps):
        assert s.obs.shape == (n, 5) and s.obs.dtype == torch.float32 and s.reward.dtype == torch.float32
        assert s.terminated.dtype == torch.bool and s.valid is None and s.extras == {}
        assert not bool((s.terminated & s.truncated).any())
        done = s.done
        # ended envs: final_obs is the terminal observation, exactly the never-reset twin's state;
        # obs is already the first observation of the next episode
        live = ~ever_reset
        torch.testing.assert_close(s.final_obs[live], twin_steps[t].obs[live], rtol=0, atol=0)
        torch.testing.assert_close(s.reward[live], twin_steps[t].reward[live], rtol=0, atol=0)
        torch.testing.assert_close(s.final_obs[~done], s.obs[~done], rtol=0, atol=0)
        if done.any():
            assert bool((s.obs[done] != s.final_obs[done]).any(-1).all())
            assert bool((s.obs[done, 0].abs() <= 0.1 + 1e-6).all())  # reset: cart back near the centre
            # the episode log of the reset envs, as mjlab's own auto-reset writes it
            assert env.logs[t]["Episode_Termination/time_out"] == int(s.truncated.sum())
            assert env.logs[t]["Episode_Termination/cart_out"] == int(s.terminated.sum())
            assert isinstance(env.logs[t]["Episode_Reward/smooth_reward"], torch.Tensor)
        else:
            assert env.logs[t] == {}
        # time-outs are truncations (the pushed envs terminate first, the others run out of time)
        assert not bool(s.terminated[torch.tensor([1, 3])].any())
        if t == 9:
            assert bool(s.truncated[torch.tensor([1, 3])].all())
        n_term += int(s.terminated.sum())
        n_trunc += int(s.truncated.sum())
        ever_reset |= done
    assert n_term >= 4 and n_trunc >= 4
    # no aliasing: later steps (and resets) did not change what earlier steps returned
    for s, (obs, final_obs, rew, term, trunc) in zip(steps, held):
        for a, b in ((s.obs, obs), (s.final_obs, final_obs), (s.reward, rew), (s.terminated, term),
                     (s.truncated, trunc)):
            assert torch.equal(a, b)


def test_cartpole_exact_final_obs_off_keeps_mjlab_auto_reset():
    """exact_final_obs=False: mjlab resets inside its step (no extra forward); the same
    episodes as the exact adapter, but final_obs of an ended env is the observation the
    action was taken from."""
    n = 4
    push = torch.tensor([[1.0], [0.0], [1.0], [0.0]])
    cfg = {"episode_length_s": 0.5, "terminations.cart_out": _cart_out_term()}
    env = make(CARTPOLE, num_envs=n, seed=0, cfg=dict(cfg), exact_final_obs=False)
    validate_env(env)
    assert env._base.cfg.auto_reset and env.single_state_space is None
    exact = make(CARTPOLE, num_envs=n, seed=0, cfg=dict(cfg))
    first, steps = _run(env, push, 25)
    _, exact_steps = _run(exact, push, 25)
    prev, n_done = first, 0
    for t, (s, e) in enumerate(zip(steps, exact_steps)):
        done = s.done
        assert torch.equal(s.terminated, e.terminated) and torch.equal(s.truncated, e.truncated)
        torch.testing.assert_close(s.reward, e.reward, rtol=0, atol=1e-6)
        torch.testing.assert_close(s.obs, e.obs, rtol=0, atol=1e-6)  # reset rows: the same reset state
        torch.testing.assert_close(s.final_obs[done], prev[done], rtol=0, atol=0)  # s_t, not the terminal obs
        torch.testing.assert_close(s.final_obs[~done], s.obs[~done], rtol=0, atol=0)
        if done.any():
            assert env.logs[t]["Episode_Termination/time_out"] == int(s.truncated.sum())
        prev, n_done = s.obs, n_done + int(done.sum())
    assert n_done >= 8
    with pytest.raises(ValueError, match="exact_final_obs='no'; allowed: True or False"):
        make(CARTPOLE, num_envs=1, exact_final_obs="no")
    from rllib_fast.envs.mjlab import MjlabVecEnv
    with pytest.raises(ValueError, match="exact_final_obs=True needs an env built with cfg.auto_reset=False"):
        MjlabVecEnv(env.env)


def test_cartpole_reset_semantics_and_overrides():
    env = make(CARTPOLE, num_envs=3, seed=1, cfg={"episode_length_s": 0.5})
    a = env.reset(seed=5)
    for _ in range(4):
        s = env.step(torch.ones(3, 1))
    assert not torch.equal(s.obs, a)
    b = env.reset(seed=5)  # a full reset: same seed, same start states; episode clocks back to 0
    torch.testing.assert_close(a, b, rtol=0, atol=0)
    assert int(env._base.episode_length_buf.sum()) == 0
    assert all(not bool(env.step(torch.zeros(3, 1)).done.any()) for _ in range(9))
    assert bool(env.step(torch.zeros(3, 1)).truncated.all())  # step 10: the time limit
    with pytest.raises(ValueError, match="episode_lenght_s"):
        make(CARTPOLE, num_envs=1, cfg={"episode_lenght_s": 1.0})
    with pytest.raises(ValueError, match="unknown task 'Mjlab-Nope'.*Mjlab-Cartpole-Balance"):
        make("mjlab:Mjlab-Nope", num_envs=1)
    # actions beyond the bound are clipped (a policy sample outside [-1, 1] acts as +-1)
    env.reset(seed=5)
    big = env.step(torch.full((3, 1), 7.0)).obs
    env.reset(seed=5)
    torch.testing.assert_close(env.step(torch.ones(3, 1)).obs, big, rtol=0, atol=0)


def test_go1_contract_states_and_final_states():
    n = 2
    act = torch.zeros(n, 12)
    env = make(GO1, num_envs=n, seed=0, cfg={"episode_length_s": 0.1})  # 5 steps of 0.02 s
    validate_env(env)
    assert env.obs_shape == (48,) and env.single_state_space.shape == (72,)
    assert env.single_action_space == gym.spaces.Box(-1.0, 1.0, (12,), np.float32)
    assert env.normalize_obs_hint is True  # the robots' rsl_rl configs normalise observations
    first, steps = _run(env, act, 5)
    assert first.shape == (n, 48) and env.states.shape == (n, 72) and env.states.dtype == torch.float32
    for s in steps[:4]:
        assert not bool(s.done.any()) and set(s.extras) == {"states", "final_states"}
        assert torch.equal(s.extras["final_states"], s.extras["states"])
    last = steps[4]
    assert bool(last.truncated.all()) and not bool(last.terminated.any())  # standing still: time-outs only
    assert not torch.equal(last.extras["final_states"], last.extras["states"])
    assert torch.equal(env.states, last.extras["states"])
    # the twin, never reset: its observation and critic observation at step 5 are the terminal ones
    twin = make(GO1, num_envs=n, seed=0, cfg={"episode_length_s": 10.0})
    _, twin_steps = _run(twin, act, 5)
    torch.testing.assert_close(last.final_obs, twin_steps[4].obs, rtol=0, atol=0)
    torch.testing.assert_close(last.extras["final_states"], twin_steps[4].extras["states"], rtol=0, atol=0)
    assert math.isfinite(float(last.reward.sum()))


def test_mjlab_tune_configs_validate():
    import glob

    import yaml

    from rllib_fast.cli import resolve_algorithm, validate_config

    root = os.path.join(os.path.dirname(__file__), "..", "..")
    seen = set()
    for path in sorted(glob.glob(os.path.join(root, "tune_configs", "mjlab-*.yaml"))):
        for spec in yaml.safe_load(open(path)).values():
            config = dict(spec["config"])
            if not torch.cuda.is_available():  # the GPU configs are checked for everything else
                config["env_device"] = "cpu"
                if spec["run"] == "PQL":  # its replay lives on the GPU there: half an H100's memory
                    config.setdefault("max_replay_bytes", 40 << 30)
            validate_config(resolve_algorithm(spec["run"]), {**config, "env": spec["env"]})
            seen.add((spec["run"], spec["env"]))
    tasks = ("mjlab:Mjlab-Cartpole-Balance", "mjlab:Mjlab-Cartpole-Swingup", "mjlab:Mjlab-Velocity-Flat-Unitree-Go1")
    assert {(algo, t) for algo in ("FastPPO", "PQL") for t in tasks} <= seen


def _params(module):
    return torch.cat([p.detach().flatten() for p in module.parameters()])


def test_go1_fastppo_smoke_with_critic_group_checkpoint_and_restore(tmp_path):
    from ray.rllib.algorithms.algorithm import Algorithm

    from rllib_fast.algorithms.ppo import FastPPOConfig

    cfg = (FastPPOConfig().environment(GO1, num_envs=4)
           .training(rollout_length=8, num_minibatches=2, num_epochs=1, decorrelate_steps=0, hidden_sizes=[32, 32])
           .debugging(seed=0))
    algo = cfg.build_algo()
    try:
        # asymmetric_critic='auto': the critic reads the critic group (72 dims, privileged terms), the actor
        # the policy group (48)
        assert algo.config.asymmetric_critic == "auto"
        assert algo.module.vf[0].in_features == 72 and algo.module.pi[0].in_features == 48
        for _ in range(2):
            r = algo.train()
        learner = r["learners"]["default_policy"]
        assert math.isfinite(learner["policy_loss"]) and math.isfinite(learner["vf_loss"])
        assert r["num_env_steps_sampled_lifetime"] == 2 * 8 * 4
        assert algo.storage["final_states"].shape[-1] == 72
        path = algo.save_to_path(str(tmp_path / "ckpt"))
        saved = _params(algo.module)
    finally:
        algo.stop()
    restored = Algorithm.from_checkpoint(path)
    try:
        assert restored.training_iteration == 2 and restored.env.single_state_space.shape == (72,)
        torch.testing.assert_close(_params(restored.module), saved, rtol=0, atol=0)
        r = restored.train()
        assert restored.training_iteration == 3 and math.isfinite(r["learners"]["default_policy"]["vf_loss"])
    finally:
        restored.stop()


def test_go1_ddpgn_critics_read_the_critic_group():
    """The PQL family's asymmetric critic on a real task: the critic reads the critic group
    (72 dims) with the action, the actor the policy group (48)."""
    from rllib_fast.algorithms.pql import DDPGNConfig

    algo = (DDPGNConfig().environment(GO1, num_envs=4)
            .training(hidden_sizes=[32, 32], batch_size=16, learning_starts=16, steps_per_iteration=8)
            .debugging(seed=0)).build_algo()
    try:
        assert algo.env.obs_shape == (48,) and algo.env.single_state_space.shape == (72,)
        first_linear = [next(m for m in net.modules() if isinstance(m, torch.nn.Linear))
                        for net in (algo.v.critic.q1, algo.actor.policy.net)]
        assert first_linear[0].in_features == 72 + algo.dims.act_dim and first_linear[1].in_features == 48
        for _ in range(2):
            r = algo.train()["learners"]["default_policy"]
        assert math.isfinite(r["critic_loss"])
    finally:
        algo.stop()
