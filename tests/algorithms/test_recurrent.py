"""FastPPO's recurrent actor-critic (``rnn_type``): the memory is carried and reset as the
episodes run, the update replays exactly what the rollout computed, config errors are one
line, checkpoints restore the memory, and (a seeded learning test) a recurrent policy learns
velocity-masked CartPole where a feed-forward one cannot."""
import pytest
import torch

from rllib_fast.algorithms.ppo import FastPPOConfig
from rllib_fast.core.memory import RecurrentMemory


def build(rnn_type="lstm", rnn_on="both", env="CartPole", n=16, t=32, seed=0, **kw):
    return (FastPPOConfig().environment(env, num_envs=n, **({"env_config": kw.pop("env_config")}
                                                             if "env_config" in kw else {}))
            .training(rollout_length=t, rnn_type=rnn_type, rnn_on=rnn_on, rnn_hidden_size=16, num_minibatches=4,
                      hidden_sizes=[32], **kw)
            .debugging(seed=seed).build_algo())


def test_unroll_equals_stepping_with_resets():
    gen = torch.Generator().manual_seed(0)
    for kind in ("lstm", "gru"):
        mem = RecurrentMemory(3, 5, num_layers=2, rnn_type=kind)
        x = torch.randn(7, 4, 3, generator=gen)
        starts = torch.rand(7, 4, generator=gen) < 0.3
        s0 = torch.randn(mem.parts, 2, 4, 5, generator=gen)
        out, end = mem.unroll(x, s0, starts)
        state, outs = s0, []
        for t in range(7):
            state = RecurrentMemory.forget(state, starts[t])
            o, state = mem.step(x[t], state)
            outs.append(o)
        torch.testing.assert_close(out, torch.stack(outs))
        torch.testing.assert_close(end, state)
        # a stream restarted at t does not depend on anything before t
        x2 = x.clone()
        t0 = int(starts[:, 0].nonzero()[0]) if starts[:, 0].any() else None
        if t0 is not None:
            x2[:t0, 0] += 1.0
            torch.testing.assert_close(mem.unroll(x2, s0, starts)[0][t0:, 0], out[t0:, 0])


@pytest.mark.parametrize("rnn_type,rnn_on", [("lstm", "both"), ("gru", "actor"), ("gru", "critic")])
def test_update_replays_what_the_rollout_computed(rnn_type, rnn_on):
    """The update's replay from the stored start states gives the log-probabilities the
    acting policy had (episodes ended inside the rollout: CartPole's random starts end in
    ~20 steps), any set of envs replays to the same rows as the whole batch, and the
    critic's replay gives the values the targets used (raw values: normalize_values off)."""
    algo = build(rnn_type, rnn_on, normalize_values=False)
    algo.train()
    algo._rollout()
    assert bool(algo.storage["done"][:-1].any())
    targets = algo._targets()
    batch = algo._batch(targets)
    rule = algo.update_rule
    with torch.no_grad():
        torch.testing.assert_close(rule._start_logp(batch), batch.logp, rtol=1e-5, atol=1e-5)
        idx = rule.minibatch_rows(batch, torch.randperm(16, generator=torch.Generator().manual_seed(1)), 2)
        torch.testing.assert_close(rule.actor_features(batch, idx), rule.actor_features(batch, None)[idx])
        torch.testing.assert_close(rule.critic_features(batch, idx), rule.critic_features(batch, None)[idx])
        v = algo.module.value(rule.critic_features(batch, None))
        torch.testing.assert_close(v, targets.old_values, rtol=1e-5, atol=1e-5)
    algo.stop()


def test_memory_is_zeroed_at_episode_ends_and_carried_otherwise():
    algo = build("lstm", "both")
    algo.train()
    before = algo.memories.actor.clone()
    obs = algo.obs
    _, _, _, env_action = algo._act_step(obs)
    stepped = algo.memories.actor.clone()
    assert not torch.equal(stepped, before)
    step = algo.env.step(env_action)
    algo._after_env_step(step)
    ended = step.terminated | step.truncated
    assert torch.all(algo.memories.actor[:, :, ended] == 0)
    torch.testing.assert_close(algo.memories.actor[:, :, ~ended], stepped[:, :, ~ended])
    algo.stop()


@pytest.mark.parametrize("overrides,needle", [
    ({"rnn_type": "rnn"}, "`rnn_type` = 'rnn'"),
    ({"rnn_type": "lstm", "rnn_on": "policy"}, "`rnn_on` = 'policy'"),
    ({"rnn_type": "lstm", "rnn_hidden_size": 0}, "`rnn_hidden_size` = 0"),
    ({"rnn_type": "lstm", "learn_while_stepping": True}, "`learn_while_stepping` = True does not combine"),
    ({"rnn_type": "gru", "compile": True}, "`compile` = True does not combine"),
    ({"rnn_type": "gru", "num_minibatches": 8}, "`num_minibatches` = 8 exceeds `num_envs` = 4"),
])
def test_config_errors_are_one_line(overrides, needle):
    cfg = FastPPOConfig().environment("CartPole", num_envs=4).training(rollout_length=8, **overrides)
    with pytest.raises(ValueError) as err:
        cfg.validate()
    assert needle in str(err.value).splitlines()[0]


def test_algorithms_without_a_recurrent_module_refuse_rnn_type():
    from rllib_fast.algorithms.hts import HTSPPOConfig

    for cfg in (HTSPPOConfig(),):   # PopPPO's members are recurrent too (test_pop_ppo_recurrent.py)
        cfg.environment("CartPole").training(rnn_type="lstm")
        with pytest.raises(ValueError, match="rnn_type"):
            cfg.validate()


def test_checkpoint_restores_memory_exactly(tmp_path):
    algo = build("lstm", "both", n=8, t=16)
    algo.train()
    algo.save_to_path(str(tmp_path / "ckpt"))
    ref = [algo.train() for _ in range(2)]
    ref_params = [p.detach().clone() for p in algo.module.parameters()]
    ref_mem = algo.memories
    algo.stop()
    other = build("lstm", "both", n=8, t=16, seed=5)
    other.restore_from_path(str(tmp_path / "ckpt"))
    got = [other.train() for _ in range(2)]
    for a, b in zip(ref_params, other.module.parameters()):
        assert torch.equal(a, b.detach())
    assert torch.equal(ref_mem.actor, other.memories.actor) and torch.equal(ref_mem.critic, other.memories.critic)
    assert [r["env_runners"].get("episode_return_mean") for r in ref] == \
        [r["env_runners"].get("episode_return_mean") for r in got]
    other.stop()


@pytest.mark.parametrize("kind", ["lstm", "gru"])
def test_written_out_cell_is_torchs(kind):
    """The memory's cell computes what ``nn.LSTM``/``nn.GRU`` compute with the same
    parameters (two layers, a whole sequence without resets)."""
    gen = torch.Generator().manual_seed(3)
    mem = RecurrentMemory(3, 6, num_layers=2, rnn_type=kind)
    x = torch.randn(5, 4, 3, generator=gen)
    s0 = torch.randn(mem.parts, 2, 4, 6, generator=gen)
    out, end = mem.unroll(x, s0, torch.zeros(5, 4, dtype=torch.bool))
    ref, ref_end = mem.rnn(x, (s0[0], s0[1]) if kind == "lstm" else s0[0])
    torch.testing.assert_close(out, ref)
    torch.testing.assert_close(end, torch.stack(ref_end) if kind == "lstm" else ref_end.unsqueeze(0))


def _masked_cartpole_return(rnn_type, iterations=22):
    """Mean return after ``iterations`` of FastPPO on velocity-masked CartPole (the
    critic reads the full state: the masked task's privileged states)."""
    algo = (FastPPOConfig().environment("CartPole", num_envs=32, env_config={"mask_velocity": True})
            .training(rollout_length=32, rnn_type=rnn_type, rnn_on="actor", rnn_hidden_size=32, hidden_sizes=[32, 32],
                      num_minibatches=4)
            .debugging(seed=0).build_algo())
    assert algo.state_dim == 4   # asymmetric critic on the full state
    for _ in range(iterations):
        result = algo.train()
    algo.stop()
    return result["env_runners"]["episode_return_mean"]


@pytest.mark.slow
def test_memory_learns_masked_cartpole_where_feed_forward_fails():
    """Without velocities the task needs memory: at the same env steps the LSTM policy is
    past 100 and climbing, the feed-forward policy below 60 (where it plateaus)."""
    assert _masked_cartpole_return(None) < 60
    assert _masked_cartpole_return("lstm") >= 100


def test_rlmodule_api_of_a_recurrent_policy():
    """``get_module()`` is stateful: one step per ``forward_inference`` call, the memory in
    ``STATE_IN``/``STATE_OUT`` (``[B, K, L, H]``; zeros when absent); ``compute_actions``,
    which has no memory to act from, says what to use instead."""
    from ray.rllib.core.columns import Columns

    algo = build("gru", "both", n=4, t=8)
    module = algo.get_module()
    assert module.is_stateful() and module.get_initial_state()["actor"].shape == (1, 1, 16)
    obs = torch.randn(3, 4, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        first = module.forward_inference({Columns.OBS: obs})
        zeros = module.get_initial_state()["actor"].unsqueeze(0).repeat(3, 1, 1, 1)
        again = module.forward_inference({Columns.OBS: obs, Columns.STATE_IN: {"actor": zeros}})
        second = module.forward_inference({Columns.OBS: obs, Columns.STATE_IN: first[Columns.STATE_OUT]})
        values = module.compute_values({Columns.OBS: obs})
    assert first[Columns.STATE_OUT]["actor"].shape == (3, 1, 1, 16)
    assert torch.equal(first[Columns.STATE_OUT]["actor"], again[Columns.STATE_OUT]["actor"])
    assert not torch.equal(second[Columns.STATE_OUT]["actor"], first[Columns.STATE_OUT]["actor"])
    assert values.shape == (3,)
    with pytest.raises(ValueError, match="episode_actor"):
        algo.compute_actions(obs)
    algo.stop()
