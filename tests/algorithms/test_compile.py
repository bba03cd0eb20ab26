"""``compile``: the act and update steps under torch.compile.

Compiling with inductor costs tens of seconds per graph on a small CPU, so
one test (FastDQN) runs the real inductor backend end to end; the others set
the backend to ``aot_eager``. That backend goes through the same dynamo
capture and AOTAutograd forward/backward split as inductor and only skips code
generation, so it checks what the wrapping can break (graph breaks,
recompiles, state_dict keys, checkpoints, RNG streams), while the inductor
test checks that generated kernels give the eager numbers. The ``aot_eager`` fixture
is in ``tests/conftest.py``; the PQL family's compiled paths are in
``test_compile_pql.py``.
"""
import pytest
import torch
from ray.rllib.algorithms.algorithm import Algorithm

from rllib_fast.algorithms.a2c import FastA2CConfig
from rllib_fast.algorithms.dqn import FastDQNConfig, RainbowConfig
from rllib_fast.algorithms.hts import HTSA2CConfig, HTSPPOConfig
from rllib_fast.algorithms.onpolicy.batch import OnPolicyBatch
from rllib_fast.algorithms.ppo import FastPPOConfig
from rllib_fast.algorithms.pql import DDPGNConfig, PQLConfig, SACNConfig
from rllib_fast.core.compile import graph_breaks
from tests.algorithms._compile import losses, params


def dqn(cls=FastDQNConfig, compile=False, **kw):
    base = dict(rollout_length=4, buffer_size=2000, batch_size=16, learning_starts=0, hidden_sizes=[32],
                compile=compile)
    base.update(kw)
    cfg = cls().environment("CartPole", num_envs=4).training(**base).debugging(seed=3)
    cfg.min_sample_timesteps_per_iteration = 0
    return cfg


# ---------------------------------------------------------------- validation
@pytest.mark.parametrize("cfg_cls", [FastDQNConfig, FastPPOConfig, FastA2CConfig, HTSPPOConfig, SACNConfig,
                                     DDPGNConfig, PQLConfig])
@pytest.mark.parametrize("value", ["fast", 1, None, "max_autotune"])
def test_invalid_compile_value_is_a_one_line_error(cfg_cls, value):
    with pytest.raises(ValueError) as e:
        cfg_cls().environment("CartPole").training(compile=value).validate()
    msg = str(e.value).splitlines()[0]  # RLlib appends its own hint on a second line
    assert f"`compile` = {value!r}" in msg
    assert "False, True, 'default', 'reduce-overhead', 'max-autotune'" in msg


@pytest.mark.parametrize("value", [False, True, "default", "reduce-overhead", "max-autotune"])
def test_valid_compile_values_pass(value):
    FastDQNConfig().environment("CartPole").training(compile=value).validate()


# ---------------------------------------------------------------- FastDQN (inductor)
def test_dqn_inductor_matches_eager_and_keeps_state_dict_keys():
    torch._dynamo.reset()
    eager = dqn().build_algo()   # build() seeds the global generator: build, then train, one at a time
    ref = losses(eager, 2, "td_loss")
    comp = dqn(compile=True).build_algo()
    assert comp._select_action is not comp._epsilon_greedy  # compiled wrapper of the same function
    got = losses(comp, 2, "td_loss")
    torch.testing.assert_close(torch.tensor(got), torch.tensor(ref), rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(params(comp.module), params(eager.module), rtol=1e-4, atol=1e-5)
    assert list(comp.module.state_dict()) == list(eager.module.state_dict())
    assert not any("_orig_mod" in k for k in comp.module.state_dict())
    eager.stop(); comp.stop()


# ---------------------------------------------------------------- FastDQN family (aot_eager)
@pytest.mark.parametrize("cls,kw", [(FastDQNConfig, {}), (RainbowConfig, {"v_min": 0.0, "v_max": 100.0})])
def test_dqn_hot_path_has_no_graph_breaks(aot_eager, cls, kw):
    algo = dqn(cls, compile=True, **kw).build_algo()
    algo.train()
    n = algo.obs.shape[0]
    explore = torch.rand(n) < 0.5
    assert graph_breaks(algo._epsilon_greedy, algo.obs, torch.randint(0, 2, (n,)), explore) == 0
    flat, w = algo.replay.sample_uniform(16)
    b = algo.replay.gather(flat, algo.config.n_step, algo.config.gamma)
    assert graph_breaks(algo._weighted_loss, b, w) == 0
    algo.stop()


@pytest.mark.parametrize("first,second", [(True, False), (False, "reduce-overhead")])
def test_dqn_checkpoints_move_between_compiled_and_eager(aot_eager, tmp_path, first, second):
    """A checkpoint written under one setting restores under the other and
    continues exactly as the writer does (same weights, replay, RNG)."""
    algo = dqn(compile=first, checkpoint_replay=True).build_algo()
    algo.train(); algo.train()
    path = algo.save_to_path(str(tmp_path / "c"))
    algo.train()
    other = dqn(compile=second, checkpoint_replay=True).build_algo()
    other.restore_from_path(path)
    other.train()
    torch.testing.assert_close(params(other.module), params(algo.module), rtol=1e-5, atol=1e-6)
    assert other.num_updates == algo.num_updates
    restored = Algorithm.from_checkpoint(path)  # the checkpoint's own setting
    assert restored.config.compile == first
    algo.stop(); other.stop(); restored.stop()


# ---------------------------------------------------------------- on-policy (aot_eager)
def onpolicy(cls=FastPPOConfig, env="CartPole", compile=False, **kw):
    base = dict(rollout_length=16, hidden_sizes=[32], decorrelate_steps=0, compile=compile)
    if cls is FastPPOConfig:
        base.update(num_epochs=2, num_minibatches=2)
    base.update(kw)
    return cls().environment(env, num_envs=8).training(**base).debugging(seed=5)


ONPOLICY = [(FastPPOConfig, "CartPole", "policy_loss"), (FastPPOConfig, "Pendulum", "vf_loss"),
            (FastA2CConfig, "CartPole", "policy_loss")]


@pytest.mark.parametrize("cls,env,key", ONPOLICY)
def test_onpolicy_hot_path_has_no_graph_breaks(aot_eager, cls, env, key):
    algo = onpolicy(cls, env, compile=True).build_algo()
    algo.train()
    assert graph_breaks(algo._act_step, algo.obs) == 0
    st, B = algo.storage, algo.horizon * algo.env.num_envs
    batch = OnPolicyBatch(st.flat("obs"), st.flat("actions"), st.flat("logp"), st.flat(algo.critic_key),
                          torch.randn(B), torch.randn(B), torch.randn(B), None)
    idx = torch.randperm(B)[:B // 2] if cls is FastPPOConfig else None
    assert graph_breaks(algo.update_rule.loss, batch, idx, None) == 0
    algo.stop()


@pytest.mark.parametrize("cls,env,key", ONPOLICY)
def test_onpolicy_compiled_matches_eager(aot_eager, cls, env, key):
    eager = onpolicy(cls, env).build_algo()
    ref = losses(eager, 2, key)
    comp = onpolicy(cls, env, compile="reduce-overhead").build_algo()
    assert comp._act_fn is not comp._act_step and comp.update_rule.loss_fn is not comp.update_rule.loss
    got = losses(comp, 2, key)
    torch.testing.assert_close(torch.tensor(got), torch.tensor(ref), rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(params(comp.module), params(eager.module), rtol=1e-4, atol=1e-5)
    assert list(comp.module.state_dict()) == list(eager.module.state_dict())
    eager.stop(); comp.stop()


@pytest.mark.parametrize("first,second", [(True, False), (False, True)])
def test_ppo_checkpoints_move_between_compiled_and_eager(aot_eager, tmp_path, first, second):
    algo = onpolicy(compile=first).build_algo()
    algo.train()
    path = algo.save_to_path(str(tmp_path / "c"))
    algo.train()
    other = onpolicy(compile=second).build_algo()
    other.restore_from_path(path)
    other.train()
    torch.testing.assert_close(params(other.module), params(algo.module), rtol=1e-5, atol=1e-6)
    algo.stop(); other.stop()


@pytest.mark.parametrize("cls", [HTSPPOConfig, HTSA2CConfig])
def test_hts_learner_compiled_matches_eager(aot_eager, cls):
    """HTS learners run FastPPO/FastA2C's update function (HTSA2C with the
    behaviour parameters swapped in place), compiled or not."""
    def make(compile):
        return cls().environment("CartPole", num_envs=8).training(
            rollout_length=8, hidden_sizes=[16], compile=compile).debugging(seed=3)
    eager = make(False).build_algo()
    start = params(eager.module).clone()
    eager.train(); eager.train()
    comp = make(True).build_algo()
    comp.train(); comp.train()
    assert not torch.equal(params(eager.module), start)   # it did learn
    torch.testing.assert_close(params(comp.module), params(eager.module), rtol=1e-4, atol=1e-5)
    eager.stop(); comp.stop()


# -- the built-in tasks' own step ---------------------------------------------------------

def _twin_tasks(name, compile_setting):
    from rllib_fast.envs import registry

    make = lambda: registry.make(name, num_envs=16, seed=3, max_episode_steps=25)  # noqa: E731
    eager, fast = make(), make()
    assert not eager.compile_step(False) and fast.compile_step(compile_setting)
    eager.reset(seed=5), fast.reset(seed=5)
    return eager, fast


def _random_actions(env, gen):
    space = env.single_action_space
    if hasattr(space, "n"):
        return torch.randint(0, space.n, (env.num_envs,), generator=gen)
    return torch.rand(env.num_envs, *space.shape, generator=gen) * 2.4 - 1.2   # some outside the bounds


def _steps_agree(name, compile_setting, steps, atol):
    """Step by step from the same state (so float differences cannot grow):
    every field of the compiled task's Step matches the eager one's, time-outs
    and terminations included, and nothing returned aliases the env's state."""
    eager, fast = _twin_tasks(name, compile_setting)
    gen, ends = torch.Generator().manual_seed(0), 0
    for _ in range(steps):
        fast.state, fast.elapsed_steps = eager.state.clone(), eager.elapsed_steps.clone()
        a = _random_actions(eager, gen)
        s_e, s_f = eager.step(a), fast.step(a)
        for field in ("obs", "reward", "final_obs"):
            torch.testing.assert_close(getattr(s_f, field), getattr(s_e, field), atol=atol, rtol=0)
        assert torch.equal(s_f.terminated, s_e.terminated) and torch.equal(s_f.truncated, s_e.truncated)
        assert torch.equal(fast.elapsed_steps, eager.elapsed_steps)
        assert s_f.obs.data_ptr() != fast.state.data_ptr() and s_f.final_obs.data_ptr() != fast.state.data_ptr()
        ends += int(s_e.done.sum())
    assert ends > 0   # auto-resets happened inside the compared steps


@pytest.mark.parametrize("name", ["CartPole", "Acrobot", "Pendulum", "MountainCarContinuous"])
def test_builtin_task_step_compiles_without_breaks_and_matches_eager(aot_eager, name):
    _steps_agree(name, True, steps=60, atol=0.0)
    _, fast = _twin_tasks(name, True)
    a = _random_actions(fast, torch.Generator().manual_seed(1))
    assert graph_breaks(fast._transition, fast.state, fast.elapsed_steps, fast._as_action(a),
                        fast._sample_init()) == 0


def test_builtin_task_step_under_inductor_matches_eager():
    torch._dynamo.reset()
    _steps_agree("CartPole", True, steps=60, atol=1e-5)


def test_sources_without_a_compilable_step_keep_theirs():
    from rllib_fast.envs.base import TensorVecEnv

    assert TensorVecEnv.compile_step(object(), True) is False


def test_population_env_step_follows_the_configs_compile_backend(monkeypatch):
    """A population's ``compile_backend`` covers the built-in task's step too
    (the step is compiled with the key's backend, not always with inductor)."""
    from rllib_fast.algorithms.population import PopTD3Config

    backends = []
    real = torch.compile

    def spy(fn=None, **kw):
        backends.append(kw.get("backend"))
        return real(fn, **kw)

    monkeypatch.setattr(torch, "compile", spy)
    torch._dynamo.reset()
    algo = (PopTD3Config().environment("Pendulum")
            .training(population_size=2, hidden_sizes=[8], batch_size=8, learning_starts=10, rollout_length=5,
                      buffer_size=100, compile=True, compile_backend="eager").debugging(seed=0).build_algo())
    algo.train()
    assert algo.env._transition_fn is not algo.env._transition
    assert backends and set(backends) == {"eager"}, backends
    algo.stop()
    torch._dynamo.reset()
