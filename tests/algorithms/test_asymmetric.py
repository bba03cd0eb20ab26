"""Asymmetric actor-critic: the critic (and its input normaliser) read the
source's privileged ``states``, the actor reads the observation.

The Isaac stand-ins have 6-dim observations and 8-dim states (position,
velocity, target - position; states add the target itself). mjlab's Go1, whose
critic group differs from its policy group, is checked with the other mjlab
tests (tests/envs/test_mjlab.py): this file builds no mjlab env."""
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
        cfg.training(asymmetric_critic=True).validate()   # the built-in task is probed at validation
    msg = str(err.value).splitlines()[0]
    assert "`asymmetric_critic` = True" in msg and "allowed: 'auto' or False" in msg


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
        live_states = fresh.states.clone()
        fresh.restore_from_path(str(tmp_path))
        for k, v in fresh.module.state_dict().items():
            assert torch.equal(v, sd[k]), k
        assert "state_norm.mean" in sd
        # the stand-in cannot restore its own state: the restored run keeps the states of
        # the episodes its env runs now (docs/design-notes.md), not the checkpoint's
        assert torch.equal(fresh.states, live_states) and not torch.equal(fresh.states, states)
        r2 = fresh.train()
        assert math.isfinite(r2["learners"]["default_policy"]["vf_loss"])
        assert r1["num_env_steps_sampled_lifetime"] == r2["num_env_steps_sampled_lifetime"]
        ev = fresh.evaluate()["env_runners"]   # evaluation acts with the actor on observations only
        assert ev["num_episodes"] > 0 and math.isfinite(ev["episode_return_mean"])
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
        live_states = fresh.states.clone()
        fresh.restore_from_path(str(tmp_path))
        assert torch.equal(fresh.states, live_states)     # the source keeps its own episodes
        assert torch.equal(fresh.buffers.read["states"], pending) and pending.abs().sum() > 0
        r = fresh.train()
        assert math.isfinite(r["learners"]["default_policy"]["vf_loss"])
        assert fresh.evaluate()["env_runners"]["num_episodes"] > 0
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


# -- PQL family: replay stores states and next states; the critics read them -------------------------
PQL_FAMILY = ("DDPGN", "SACN", "PQL")
SMALL = dict(hidden_sizes=[32, 32], batch_size=64, steps_per_iteration=20, learning_starts=64,
             decorrelate_steps=0, backend="thread")   # PQL: learners in this process, inspected below


def _pql(name, source, **kw):
    env, env_config = source
    training = {k: v for k, v in {**SMALL, **kw}.items() if k in CONFIGS[name]().hyperparameter_spec()}
    return (CONFIGS[name]().environment(env, num_envs=8, env_config=env_config).training(**training)
            .debugging(seed=0))


@pytest.mark.parametrize("name", PQL_FAMILY)
@pytest.mark.parametrize("source", [VECTASK, LAB], ids=["isaacgym", "isaaclab"])
def test_pql_family_critics_read_states(name, source):
    algo = _pql(name, source).build_algo()
    try:
        assert algo.dims.state_dim == STATE_DIM
        act_dim = algo.dims.act_dim
        v, p = (algo.v, algo.p)
        for critic in (v.critic, v.target, p.critic):
            assert _in_features(critic.q1) == STATE_DIM + act_dim
        for policy in (algo.actor.policy, v.policy, p.policy):
            assert _in_features(policy.net) == OBS_DIM
        assert v.replay.data["states"].shape[-1] == STATE_DIM and v.replay.data["next_states"].shape[-1] == STATE_DIM
        assert "states" in p.replay.data
        for _ in range(3):
            r = algo.train()["learners"]["default_policy"]
        assert r["num_critic_updates"] > 0 and math.isfinite(r["critic_loss"])
        assert float(algo.actor.state_rms.count) > 8
        n = len(v.replay)
        # stored states are the stand-in's: the last two columns are the target, also in obs (columns 0:2
        # of states are position = obs 0:2)
        assert torch.equal(v.replay.data["states"][:n, :2], v.replay.data["obs"][:n, :2])
        assert algo.get_module().forward_inference({"obs": torch.zeros(2, OBS_DIM)})["actions"].shape == (2, 2)
    finally:
        algo.stop()


def test_pql_family_false_and_true():
    algo = _pql("DDPGN", LAB, asymmetric_critic=False).build_algo()
    try:
        assert algo.dims.state_dim is None and _in_features(algo.v.critic.q1) == OBS_DIM + 2
        assert "states" not in algo.v.replay.data
        algo.train()
    finally:
        algo.stop()
    with pytest.raises(ValueError) as err:
        CONFIGS["SACN"]().environment("Pendulum", num_envs=4).training(asymmetric_critic=True).build_algo()
    assert "`asymmetric_critic` = True" in str(err.value).splitlines()[0]


def test_ddpgn_checkpoint_round_trip_with_states(tmp_path):
    cfg = _pql("DDPGN", VECTASK, checkpoint_replay=True)
    algo = cfg.build_algo()
    try:
        for _ in range(2):
            algo.train()
        algo.save_to_path(str(tmp_path))
        saved = {"critic": {k: t.clone() for k, t in algo.v.critic.state_dict().items()},
                 "state_rms": algo.actor.state_rms.mean.clone(), "states": algo.states.clone(),
                 "window": algo.actor.state_aggregator.buf["obs"].clone(),
                 "replay": algo.v.replay.data["next_states"][:len(algo.v.replay)].clone()}
    finally:
        algo.stop()
    fresh = cfg.build_algo()
    try:
        live_states = fresh.states.clone()
        fresh.restore_from_path(str(tmp_path))
        for k, t in fresh.v.critic.state_dict().items():
            assert torch.equal(t, saved["critic"][k]), k
        assert torch.equal(fresh.actor.state_rms.mean, saved["state_rms"])
        assert torch.equal(fresh.states, live_states)     # the source keeps its own episodes
        agg = fresh.actor.state_aggregator                # ... and the in-flight windows end
        assert torch.equal(agg.buf["obs"], saved["window"]) and agg.buf["done"][(agg.t - 1) % agg.n].all()
        assert torch.equal(fresh.v.replay.data["next_states"][:len(fresh.v.replay)], saved["replay"])
        r = fresh.train()["learners"]["default_policy"]
        assert math.isfinite(r["critic_loss"])
        assert fresh.evaluate()["env_runners"]["num_episodes"] > 0
    finally:
        fresh.stop()


def test_distributional_critic_reads_states():
    algo = _pql("DDPGN", LAB, distributional=True, num_atoms=11, v_min=-10.0, v_max=60.0).build_algo()
    try:
        assert _in_features(algo.v.critic.q1) == STATE_DIM + 2 and algo.v.critic.q1[-1].out_features == 11
        for _ in range(3):
            r = algo.train()["learners"]["default_policy"]
        assert r["num_critic_updates"] > 0 and math.isfinite(r["critic_loss"])
    finally:
        algo.stop()


def test_pql_process_backend_with_states():
    """The shared transition ring carries the states: the learner processes' critics read them."""
    algo = _pql("PQL", LAB, backend="process").build_algo()
    try:
        assert "states" in algo.backend.shared.ring and "next_states" in algo.backend.shared.ring
        for _ in range(3):
            r = algo.train()["learners"]["default_policy"]
        assert r["num_critic_updates"] > 0 and math.isfinite(r["critic_loss"])
        critic = algo.backend.state_components()["v"].state_dict()["critic"]
        assert critic["q1.0.weight"].shape[1] == STATE_DIM + 2
    finally:
        algo.stop()


def test_pql_learns_with_an_asymmetric_critic():
    """The PQL stand-in run of tests/envs/test_isaac_algorithms.py with states required."""
    from rllib_fast.presets import preset  # small nets for a 2-core CPU

    env, env_config = VECTASK
    env_config = {**env_config, "cfg": {"env": {"episodeLength": 64}}}
    kw = {k: v for k, v in preset("PQL", "Pendulum").items() if k != "num_envs"}
    algo = (CONFIGS["PQL"]().environment(env, num_envs=32, env_config=env_config)
            .training(**{**kw, "steps_per_iteration": 25, "asymmetric_critic": True}).debugging(seed=0)).build_algo()
    try:   # the default back-end on a CPU: the learners are processes, their critic is read through its state
        critic = algo.backend.state_components()["v"].state_dict()["critic"]
        assert critic["q1.0.weight"].shape[1] == STATE_DIM + 2
        best = -math.inf
        for _ in range(40):
            ret = algo.train()["env_runners"].get("episode_return_mean", math.nan)
            if ret == ret:
                best = max(best, ret)
            if best >= 30.0:   # random policy ~5
                break
    finally:
        algo.stop()
    assert best >= 30.0


def test_hts_executor_processes_keep_the_critic_on_states():
    """HTS with its simulator in executor processes: the critic still reads the 8-dim
    states (they cross the process boundary), and a round trains on them."""
    cfg = _on_policy("HTSPPO", VECTASK).training(executor_processes=True)
    algo = cfg.build_algo()
    try:
        assert _in_features(algo.module.vf) == STATE_DIM and _in_features(algo.module.pi) == OBS_DIM
        algo.train()          # the first round only fills the pipeline
        r = algo.train()
        assert math.isfinite(r["learners"]["default_policy"]["vf_loss"])
        assert algo.buffers.read["states"].abs().sum() > 0
    finally:
        algo.stop()


# -- learners as Ray actors: one local Ray for these (the file's last tests) ------------------------
@pytest.fixture(scope="module")
def ray_cpus():
    """One local Ray for the file's tests whose learners are Ray actors."""
    import ray

    started = not ray.is_initialized()
    if started:
        ray.init(num_cpus=4, include_dashboard=False, log_to_driver=False)
    yield
    if started:
        ray.shutdown()


def test_pql_ray_backend_with_states(ray_cpus, tmp_path):
    cfg = _pql("PQL", LAB, backend="ray")
    algo = cfg.build_algo()
    try:
        for _ in range(3):
            r = algo.train()["learners"]["default_policy"]
        assert r["num_critic_updates"] > 0 and math.isfinite(r["critic_loss"])
        critic = algo.backend.get_state("critic", False)["critic"]
        assert critic["q1.0.weight"].shape[1] == STATE_DIM + 2
        algo.save_to_path(str(tmp_path))
    finally:
        algo.stop()
    fresh = cfg.build_algo()
    try:
        fresh.restore_from_path(str(tmp_path))
        got = fresh.backend.get_state("critic", False)["critic"]
        assert all(torch.equal(got[k], critic[k]) for k in critic)
        fresh.train()
    finally:
        fresh.stop()


def test_data_parallel_learners_share_the_state_statistics(ray_cpus):
    from rllib_fast.core.multi_learner import module_tensors

    env, env_config = LAB
    algo = (CONFIGS["FastPPO"]().environment(env, num_envs=16, env_config=env_config)
            .training(rollout_length=8, num_minibatches=2, num_epochs=2).learners(num_learners=2)
            .debugging(seed=0)).build_algo()
    try:
        assert _in_features(algo.module.vf) == STATE_DIM
        for i in range(2):
            algo.train()
            local = torch.cat([t.detach().reshape(-1).double() for t in module_tensors(algo.module)])
            assert torch.equal(local, algo._dp_group.parameter_vectors()[0]), f"learners diverged at {i}"
        # the state statistics saw both learners' rollouts (one all-reduce per batch)
        assert float(algo.module.state_norm.count) >= 2 * 2 * 8 * 8
    finally:
        algo.stop()


def test_async_learners_with_states(ray_cpus):
    env, env_config = LAB
    algo = (CONFIGS["FastAPPO"]().environment(env, num_envs=8, env_config=env_config)
            .training(num_async_learners=2, rollout_length=8, num_minibatches=2, decorrelate_steps=4)
            .debugging(seed=0)).build_algo()
    try:
        assert _in_features(algo.module.vf) == STATE_DIM
        r = algo.train()
        assert r["num_env_steps_sampled_lifetime"] > 0
        assert algo.get_module().forward_inference({"obs": torch.zeros(2, OBS_DIM)})["actions"].shape == (2, 2)
    finally:
        algo.stop()
