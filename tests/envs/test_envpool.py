"""envpool sources for real (rllib_fast/envs/envpool.py): MuJoCo Ant and Atari Pong,
short runs."""
import rllib_fast  # noqa: F401  (registers everything first)

import math

import pytest
import torch

envpool = pytest.importorskip("envpool")

from rllib_fast.envs import make, validate_env  # noqa: E402


def test_ant_next_step_autoreset_is_masked():
    env = make("envpool:Ant-v4", num_envs=4, seed=0, max_episode_steps=20)
    validate_env(env)
    assert env.max_episode_steps == 20 and str(env.single_action_space.dtype) == "float32"
    assert env.single_observation_space.shape == (27,) and env.obs_shape == (27,)
    obs = env.reset(seed=0)
    assert obs.dtype == torch.float32
    prev_done = torch.zeros(4, dtype=torch.bool)
    n_trunc = 0
    gen = torch.Generator().manual_seed(0)
    for _ in range(45):
        s = env.step(torch.rand((4, 8), generator=gen) * 2 - 1)
        assert torch.equal(~s.valid, prev_done)  # the step after an end returns the reset obs
        assert bool((s.reward[~s.valid] == 0).all()) and not bool((s.done & ~s.valid).any())
        assert not bool((s.terminated & s.truncated).any())
        torch.testing.assert_close(s.final_obs, s.obs)
        n_trunc += int(s.truncated.sum())
        prev_done = s.done.clone()
    assert n_trunc >= 4  # everyone timed out at least once (20-step limit)


def test_reseeding_rebuilds_the_pool_reproducibly():
    env = make("envpool:HalfCheetah-v4", num_envs=3, seed=1)
    a = torch.zeros(3, 6)

    def run(seed):
        out = [env.reset(seed=seed)]
        out += [env.step(a).obs for _ in range(3)]
        return torch.cat(out)
    first = run(5)
    torch.testing.assert_close(run(5), first, rtol=0, atol=0)
    assert not torch.equal(run(6), first)


def test_pong_frames_stay_uint8():
    env = make("envpool:Pong-v5", num_envs=2, seed=0)
    obs = env.reset()
    assert obs.dtype == torch.uint8 and obs.shape == (2, 4, 84, 84) and env.max_episode_steps == 27000
    s = env.step(torch.tensor([0, 1]))
    assert s.obs.dtype == torch.uint8 and s.reward.dtype == torch.float32 and s.final_obs is s.obs
    with pytest.raises(ValueError, match="batch_size"):
        make("envpool:Pong-v5", num_envs=2, batch_size=1)


def test_fastppo_runs_on_envpool_ant():
    from rllib_fast.algorithms.ppo import FastPPOConfig

    algo = (FastPPOConfig().environment("envpool:Ant-v4", num_envs=4, env_config={"max_episode_steps": 16})
            .training(rollout_length=16, num_epochs=1, decorrelate_steps=0).debugging(seed=0)).build_algo()
    try:
        r = algo.train()
        assert algo.any_invalid and math.isfinite(r["learners"]["default_policy"]["policy_loss"])
    finally:
        algo.stop()


# -- MuJoCo Playground's robot tasks: dict observations, the critic group, reward terms -----------
GO1 = "envpool:Go1JoystickFlatTerrain-v1"
GO1_OBS, GO1_STATES = 48, 123


def _go1(num_envs=3, **kw):
    return make(GO1, num_envs=num_envs, seed=0, num_threads=1, **kw)


def _actions(steps, n, act_dim=12, seed=0):
    gen = torch.Generator().manual_seed(seed)
    return [torch.rand((n, act_dim), generator=gen) * 2 - 1 for _ in range(steps)]


def test_go1_groups_and_exact_terminal_observations_against_a_twin():
    """The state group is the observation, privileged_state the critic's states; at a
    time-out the step's observation and states are the true terminal ones (equal to a
    twin pool's without the time limit, same seed and actions), it is a truncation, and
    the next step is the straddling one carrying both groups' reset rows."""
    n, acts = 3, _actions(7, 3)
    env, twin = _go1(n, max_episode_steps=5), _go1(n)
    validate_env(env)
    assert env.obs_shape == (GO1_OBS,) and env.single_state_space.shape == (GO1_STATES,)
    assert str(env.single_state_space.dtype) == "float32" and env.single_action_space.shape == (12,)
    obs, twin_obs = env.reset(seed=0), twin.reset(seed=0)
    assert obs.shape == (n, GO1_OBS) and env.states.shape == (n, GO1_STATES) and env.states.dtype == torch.float32
    assert torch.equal(obs, twin_obs) and torch.equal(env.states, twin.states)
    # privileged_state starts with the (noisy) state it extends
    torch.testing.assert_close(env.states[:, :GO1_OBS], obs, rtol=0, atol=0)
    for t in range(5):
        s, w = env.step(acts[t]), twin.step(acts[t])
        assert set(s.extras) == {"states"} and s.extras["states"].shape == (n, GO1_STATES)
        assert s.final_obs is s.obs and torch.equal(env.states, s.extras["states"])
        torch.testing.assert_close(s.final_obs, w.obs, rtol=0, atol=0)
        torch.testing.assert_close(s.extras["states"], w.extras["states"], rtol=0, atol=0)
        assert not bool(s.terminated.any()) and bool(s.truncated.all()) == (t == 4) and bool(s.valid.all())
    s, w = env.step(acts[5]), twin.step(acts[5])
    assert not bool(s.valid.any()) and not bool(s.done.any()) and bool((s.reward == 0).all())
    assert not torch.equal(s.obs, w.obs) and not torch.equal(s.extras["states"], w.extras["states"])  # reset rows
    assert bool(env.step(acts[6]).valid.all())
    env.close(), twin.close()


@pytest.mark.parametrize("task, dims", [("G1JoystickFlatTerrain-v1", (103, 216, 29)),
                                         ("LeapCubeReorient-v1", (57, 128, 16))])
def test_other_playground_tasks_expose_their_groups(task, dims):
    env = make(f"envpool:{task}", num_envs=2, seed=0, num_threads=1)
    validate_env(env)
    obs_dim, state_dim, act_dim = dims
    assert env.obs_shape == (obs_dim,) and env.single_state_space.shape == (state_dim,)
    assert env.single_action_space.shape == (act_dim,) and env.max_episode_steps == 1000
    s = env.step(torch.zeros(2, act_dim))
    assert s.extras["states"].shape == (2, state_dim) and torch.equal(env.states, s.extras["states"])
    env.close()


def test_go1_reward_terms_are_per_episode_means_of_envpool_infos():
    n, steps = 2, 9   # episodes of 4 steps: two end per env (steps 4 and 9), step 5 straddles
    env = _go1(n, max_episode_steps=4)
    env.reset(seed=0)
    assert env.episode_metrics() == {}
    want = {}   # term -> list of per-episode means, computed here from envpool's own infos
    run = {}
    for t, a in enumerate(_actions(steps, n)):
        s = env.step(a)
        infos = env.last_infos
        for k in (k for k in infos if k.startswith("reward_")):
            acc = run.setdefault(k, [[] for _ in range(n)])
            for i in range(n):
                if bool(s.valid[i]):
                    acc[i].append(float(infos[k][i]))
                if bool(s.done[i]):
                    want.setdefault(k, []).append(sum(acc[i]) / len(acc[i]))
                    acc[i] = []
    got = env.episode_metrics()
    assert {f"reward_terms/{k[len('reward_'):]}" for k in want} == set(got)
    assert len(got) == 16 and "reward_terms/tracking_lin_vel" in got and "reward_terms/feet_air_time" in got
    for k, means in want.items():
        assert len(means) == 2 * n
        assert got[f"reward_terms/{k[len('reward_'):]}"] == pytest.approx(sum(means) / len(means), rel=1e-12)
    assert env.episode_metrics() == {}   # handed out once
    env.close()


def test_humanoid_falls_are_terminations_and_time_limits_truncations():
    """Plain Box-observation MuJoCo tasks through envpool: no critic group; a fall
    (Humanoid's healthy-height check) is a termination, the step limit a truncation."""
    n = 4
    env = make("envpool:Humanoid-v4", num_envs=n, seed=0, max_episode_steps=40)
    assert env.single_state_space is None and env.obs_shape == (376,)
    env.reset(seed=0)
    n_term = n_trunc = 0
    for a in _actions(90, n, act_dim=17):
        s = env.step(a * 0.4)
        assert "states" not in s.extras and env.states is None
        assert not bool((s.terminated & s.truncated).any()) and not bool((s.done & ~s.valid).any())
        n_term += int(s.terminated.sum())
        n_trunc += int(s.truncated.sum())
        if bool(s.truncated.any()):
            assert bool((env.last_infos["elapsed_step"][s.truncated.numpy()] == 40).all())
        if bool(s.terminated.any()):
            assert bool((env.last_infos["elapsed_step"][s.terminated.numpy()] < 40).all())
    assert n_term >= 1 and n_trunc >= 1   # seed 0: 11 falls, 1 time-out
    env.close()


@pytest.mark.parametrize("name", ["FastPPO", "SACN", "PopPPO"])
def test_algorithms_use_the_privileged_critic_and_report_reward_terms(name):
    from rllib_fast.algorithms import CONFIGS

    env_config = {"max_episode_steps": 8, "num_threads": 1}
    if name == "PopPPO":   # 2 members x 2 envs on one pool
        cfg = CONFIGS[name]().environment(GO1, env_config=env_config).training(
            population_size=2, num_envs_per_member=2, rollout_length=16, num_epochs=1, num_minibatches=2,
            decorrelate_steps=0, hidden_sizes=[32, 32])
    else:
        cfg = CONFIGS[name]().environment(GO1, num_envs=4, env_config=env_config)
    if name == "FastPPO":
        cfg = cfg.training(rollout_length=16, num_epochs=1, num_minibatches=2, decorrelate_steps=0,
                           hidden_sizes=[32, 32])
    elif name == "SACN":
        small = dict(hidden_sizes=[32, 32], batch_size=32, steps_per_iteration=16, learning_starts=32)
        cfg = cfg.training(**{k: v for k, v in small.items() if k in cfg.hyperparameter_spec()})
    algo = cfg.debugging(seed=0).build_algo()
    try:
        if name == "FastPPO":
            assert algo.module.vf[0].in_features == GO1_STATES and algo.module.pi[0].in_features == GO1_OBS
        elif name == "PopPPO":
            assert algo.state_dim == GO1_STATES
        else:
            assert algo.dims.state_dim == GO1_STATES
            assert algo.v.replay.data["states"].shape[-1] == GO1_STATES
        r = algo.train()
        terms = r["env_runners"]["reward_terms"]
        assert 0.0 <= terms["tracking_lin_vel"] <= 1.0 and math.isfinite(terms["feet_clearance"])
        assert math.isfinite(r["env_runners"]["episode_return_mean"])
    finally:
        algo.stop()


def test_go1_fastppo_recipe_validates():
    import os

    import yaml

    from rllib_fast.cli import resolve_algorithm, validate_config

    root = os.path.join(os.path.dirname(__file__), "..", "..")
    path = os.path.join(root, "tune_configs", "envpool-go1-joystick-fastppo.yaml")
    for spec in yaml.safe_load(open(path)).values():
        assert spec["env"] == GO1
        validate_config(resolve_algorithm(spec["run"]), {**spec["config"], "env": spec["env"]})


def test_rsl_rl_peer_vecenv_groups_time_outs_and_episodes():
    """benchmarks/peers/envpool_rsl_rl.py's rsl_rl VecEnv: the groups rsl_rl's obs_groups
    name, time-outs in extras, long dones, completed episodes without the straddling step."""
    import importlib.util
    import os

    pytest.importorskip("rsl_rl")
    path = os.path.join(os.path.dirname(__file__), "..", "..", "benchmarks", "peers", "envpool_rsl_rl.py")
    spec = importlib.util.spec_from_file_location("envpool_rsl_rl", path)
    peer = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(peer)
    n = 2
    env = peer.EnvpoolRslVecEnv("Go1JoystickFlatTerrain-v1", n, seed=0, num_threads=1, max_episode_steps=4)
    try:
        obs = env.get_observations()
        assert obs["actor"].shape == (n, GO1_OBS) and obs["critic"].shape == (n, GO1_STATES)
        assert obs["policy"] is obs["actor"] and env.num_actions == 12 and env.max_episode_length == 4
        rewards = []
        for t, a in enumerate(_actions(9, n)):
            obs, rew, dones, extras = env.step(a)
            assert dones.dtype == torch.long and extras["time_outs"].dtype == torch.bool
            # no fall within 4 steps of a standing start: every done is a time-out
            assert torch.equal(dones.bool(), extras["time_outs"])
            assert bool(dones.all()) == (t in (3, 8))
            assert bool(env.episode_length_buf.eq(4).all()) == (t in (3, 8))
            rewards.append(rew)
        # the straddling steps (4) are not counted in the lengths
        assert [length for _, length in env.finished] == [4] * (2 * n)
        first = torch.stack(rewards[:4]).sum(0).double()
        torch.testing.assert_close(torch.tensor([r for r, _ in env.finished[:n]], dtype=torch.float64), first,
                                   rtol=1e-6, atol=1e-9)
        assert "reward_terms/tracking_lin_vel" in env.episode_metrics()
    finally:
        env.close()


def test_go1_reward_terms_reach_the_logs_through_a_simulator_process():
    """FastPPO's learn_while_stepping puts the pool in a simulator process (ParallelVecEnv): the
    task's reward terms come back from it, the same keys as the in-process source's."""
    from rllib_fast.envs.parallel import ParallelVecEnv

    env = ParallelVecEnv.from_name(GO1, 2, 1, seed=0, env_kwargs={"max_episode_steps": 4, "num_threads": 1})
    try:
        env.reset()
        assert env.episode_metrics() == {}                 # no episode ended yet
        for a in _actions(5, 2):
            env.step(a)
        metrics = env.episode_metrics()
        assert 0.0 <= metrics["reward_terms/tracking_lin_vel"] <= 1.0
        assert env.episode_metrics() == {}                 # read once: the next call starts afresh
    finally:
        env.close()
