"""Recurrent PopPPO (``rnn_type``): the stacked memory is K memories, a population of
one is recurrent FastPPO from the same seed (bit for bit), a population of two updates
as two recurrent FastPPO updates with the members' settings, memories and weights
resume exactly, exploit copies a member's memory weights, member k exports with its
memory as explicit inputs, and the best member learns velocity-masked CartPole."""
import math

import numpy as np
import pytest
import torch
from ray.rllib.algorithms.algorithm import Algorithm
from ray.rllib.core.columns import Columns

from rllib_fast.algorithms import FastPPOConfig, PopPPOConfig
from rllib_fast.algorithms.onpolicy.batch import OnPolicyBatch
from rllib_fast.algorithms.ppo.algorithm import PPOUpdate
from rllib_fast.algorithms.recurrent_module import Memories, RecurrentActorCriticModule, Sequences
from rllib_fast.core.memory import RecurrentMemory
from rllib_fast.core.stacked import member_tensors
from rllib_fast.algorithms.pop_ppo.stacked_memory import StackedRecurrentMemory

MASKED = {"mask_velocity": True}


@pytest.mark.parametrize("rnn_type", ["lstm", "gru"])
@pytest.mark.parametrize("K", [1, 3])
def test_stacked_memory_is_k_memories(rnn_type, K):
    """Unroll with resets and final steps, and one step: member k's slice is what
    member k's own ``RecurrentMemory`` computes (bit for bit for one member)."""
    torch.manual_seed(0)
    memories = [RecurrentMemory(5, 7, 2, rnn_type) for _ in range(K)]
    stacked = StackedRecurrentMemory(memories)
    g = torch.Generator().manual_seed(1)
    x, fx = torch.randn(K, 6, 4, 5, generator=g), torch.randn(K, 6, 4, 5, generator=g)
    state = torch.randn(K, stacked.parts, 2, 4, 7, generator=g)
    starts = torch.rand(K, 6, 4, generator=g) < 0.3
    out, end, final = stacked.unroll(x, state, starts, fx)
    step_out, step_state = stacked.step(x[:, 0], state)
    for k in range(K):
        ref = memories[k].unroll(x[k], state[k], starts[k], fx[k])
        ref_step = memories[k].step(x[k, 0], state[k])
        for a, b in zip((out[k], end[k], final[k], step_out[k], step_state[k]), (*ref, *ref_step)):
            if K == 1:
                assert torch.equal(a, b)
            else:
                torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)
    ended = torch.zeros(K, 4, dtype=torch.bool)
    ended[:, 1] = True
    zeroed = StackedRecurrentMemory.forget(state, ended)
    assert float(zeroed[:, :, :, 1].abs().sum()) == 0.0 and torch.equal(zeroed[:, :, :, 0], state[:, :, :, 0])


def _fast_and_pop(env, rnn_type, rnn_on, seed=3, **kw):
    common = dict(rollout_length=8, num_epochs=2, num_minibatches=2, rnn_type=rnn_type, rnn_on=rnn_on,
                  rnn_hidden_size=16, hidden_sizes=[16], **kw)
    f = (FastPPOConfig().environment(env, num_envs=8, env_config=MASKED).training(**common)
         .debugging(seed=seed).build_algo())
    p = (PopPPOConfig().environment(env, env_config=MASKED)
         .training(population_size=1, num_envs_per_member=8, **common).debugging(seed=seed).build_algo())
    return f, p


def _as_fast(p, k, transposed):
    return p[k].t() if transposed else p[k]


@pytest.mark.parametrize("env, rnn_type, rnn_on", [("CartPole", "lstm", "both"), ("Pendulum", "gru", "actor")])
def test_recurrent_population_of_one_is_recurrent_fastppo_from_the_same_seed(env, rnn_type, rnn_on):
    """The same memories' weights and states, rollouts, critic replays, sequence
    minibatches and Adam steps: bit for bit over 3 iterations (the masked tasks'
    critic reads the full state: an asymmetric recurrent critic on CartPole)."""
    f, p = _fast_and_pop(env, rnn_type, rnn_on, grad_clip=0.05)
    layout = p.module.transposed_parameters()
    for i in range(3):
        f.train(), p.train()
        assert torch.equal(f.storage["logp"], p.storage["logp"]), i
        for a, b, t in zip(f.module.parameters(), p.module.parameters(), layout):
            assert torch.equal(a, _as_fast(b, 0, t).reshape(a.shape)), i
        for a, b in zip(f.memories, p.memories):
            assert (a is None and b is None) or torch.equal(a, b[0])
    f.stop(), p.stop()


#: two members' distinct settings
_MEMBERS = [dict(lr=1e-3, clip_param=0.1, entropy_coeff=0.0, vf_loss_coeff=0.5, adaptive_lr_kl_target=1e-6),
            dict(lr=3e-4, clip_param=0.3, entropy_coeff=0.01, vf_loss_coeff=1.0, adaptive_lr_kl_target=0.05)]


def test_a_recurrent_population_of_two_updates_as_two_recurrent_fastppo_updates():
    """One K=2 update (stacked memories replayed over each member's env sequences)
    equals, member by member, recurrent FastPPO's update of the same weights on that
    member's rollout, start memories and episode starts under that member's settings."""
    common = dict(rollout_length=8, num_epochs=2, num_minibatches=2, hidden_sizes=[16], grad_clip=0.05,
                  decorrelate_steps=4, rnn_type="lstm", rnn_hidden_size=16)
    pop = (PopPPOConfig().environment("CartPole", env_config=MASKED)
           .training(population_size=2, num_envs_per_member=4, pbt_interval=None, pbt_init="config", **common)
           .debugging(seed=0).build_algo())
    for k, member in enumerate(_MEMBERS):
        for key, value in member.items():
            pop.hp[key][k] = value
    pop.optimizer_hparams()
    layout = pop.module.transposed_parameters()
    with pop.rng_stream:
        pop._rollout()   # a first rollout (no update): memories that carry over into the next
        pop._targets()
        pop._rollout()
        batch = pop._targets()
        before = [p.detach().clone() for p in pop.params]
        start, starts = pop.rollout_start, pop._starts().reshape(2, -1)
        shuffles = torch.get_rng_state()
        pop.learn(batch)
    assert float(starts.sum()) > 0   # episodes ended inside the rollout: the replay resets memories
    adv, targets, old_v, w = batch
    data = [pop.by_member(k) for k in ("obs", "actions", "logp", pop.critic_key)]
    for k, member in enumerate(_MEMBERS):
        fast = (FastPPOConfig().environment("CartPole", num_envs=4, env_config=MASKED)
                .training(**common, **member).debugging(seed=0).build_algo())
        with torch.no_grad():
            for a, b, t in zip(fast.module.parameters(), before, layout):
                a.copy_(_as_fast(b, k, t).reshape(a.shape))
        memories = Memories(*(None if m is None else m[k] for m in start))
        one = OnPolicyBatch(*(x[k] for x in data), adv[k], targets[k], old_v[k], None if w is None else w[k],
                            sequences=Sequences(starts[k], memories, pop.horizon))
        torch.set_rng_state(shuffles)
        stats = fast.update_rule.learn(one)
        for a, b, t in zip(fast.module.parameters(), pop.params, layout):
            torch.testing.assert_close(_as_fast(b, k, t).detach().reshape(a.shape), a.detach(), rtol=1e-4, atol=1e-6)
        for i, key in enumerate(PPOUpdate.STATS):
            torch.testing.assert_close(pop.last_loss_stats[i, k], torch.as_tensor(stats[key]).float(),
                                       rtol=1e-4, atol=1e-6)
        fast.stop()
    pop.stop()


def _tiny_recurrent(**kw):
    base = dict(population_size=2, num_envs_per_member=4, rollout_length=8, num_epochs=1, num_minibatches=2,
                hidden_sizes=[16], rnn_type="gru", rnn_hidden_size=8, decorrelate_steps=4)
    base.update(kw)
    return PopPPOConfig().environment("CartPole", env_config=MASKED).training(**base).debugging(seed=1)


def test_recurrent_population_resumes_bitwise_memories_included(tmp_path):
    algo = _tiny_recurrent(pbt_interval=1, pbt_init="sample").build_algo()
    algo.train(), algo.train()
    path = algo.save_to_path(str(tmp_path / "c"))
    algo.train()
    restored = Algorithm.from_checkpoint(path)
    restored.train()
    for a, b in zip(member_tensors(algo.module), member_tensors(restored.module)):
        assert torch.equal(a, b)
    for a, b in zip(algo.memories, restored.memories):
        assert torch.equal(a, b)
    algo.stop(), restored.stop()


def test_exploit_copies_the_donors_memory_weights_and_zeroes_the_replaced_members_memories():
    algo = _tiny_recurrent(population_size=3).build_algo()
    algo.train()
    assert all(float(m[2].abs().sum()) > 0 for m in algo.memories)
    algo.exploit_members(torch.tensor([0]), torch.tensor([2]))
    for stacked in (algo.module.pi_memory, algo.module.vf_memory):
        for p in stacked.parameters():
            assert torch.equal(p[2], p[0]) and not torch.equal(p[1], p[0])
    for m in algo.memories:
        assert float(m[2].abs().sum()) == 0.0 and float(m[1].abs().sum()) > 0
    algo.stop()


def test_member_k_exports_with_its_memory_as_explicit_inputs_and_acts_as_the_live_module(tmp_path):
    """``get_module(member=1)`` is stateful (STATE_IN/STATE_OUT); its one-member copy is
    FastPPO's recurrent module; the ONNX export of member 1 (h_in, c_in explicit) acts
    as the live module over a stretch of steps, memory carried."""
    onnxruntime = pytest.importorskip("onnxruntime")
    from rllib_fast.export import export_policy

    algo = _tiny_recurrent(rnn_type="lstm").build_algo()
    algo.train()
    live = algo.get_module(member=1)
    assert live.is_stateful() and live.get_initial_state()["actor"].shape == (2, 1, 8)
    one = live.select()
    assert isinstance(one, RecurrentActorCriticModule)
    path = export_policy(algo, tmp_path / "member1.onnx", "onnx", member=1)
    session = onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    assert [i.name for i in session.get_inputs()] == ["obs", "h_in", "c_in"]
    g = torch.Generator().manual_seed(0)
    state, onnx_states = None, [np.zeros((1, 3, 8), np.float32)] * 2
    one_state = None
    for _ in range(6):
        obs = torch.randn(3, 2, generator=g)
        with torch.no_grad():
            out = live.forward_inference({Columns.OBS: obs, **({Columns.STATE_IN: state} if state else {})})
            ref = one.forward_inference({Columns.OBS: obs, **({Columns.STATE_IN: one_state} if one_state else {})})
        state, one_state = out[Columns.STATE_OUT], ref[Columns.STATE_OUT]
        got = session.run(None, {"obs": obs.numpy(), "h_in": onnx_states[0], "c_in": onnx_states[1]})
        onnx_states = got[1:]
        assert torch.equal(out[Columns.ACTIONS], ref[Columns.ACTIONS])
        torch.testing.assert_close(torch.as_tensor(got[0]), out[Columns.ACTIONS])
        torch.testing.assert_close(state["actor"], one_state["actor"], rtol=1e-5, atol=1e-6)
    with pytest.raises(ValueError, match="episode_actor"):
        algo.compute_actions(torch.zeros(3, 2))
    # evaluation: the best member acting from a memory of its own in fresh envs
    assert algo.evaluate()["env_runners"]["episode_return_mean"] > 0
    algo.stop()


@pytest.mark.parametrize("kw, needle", [
    (dict(num_minibatches=8), "`num_minibatches` = 8 exceeds `num_envs_per_member` = 4"),
    (dict(symmetry={"mirror_fn": "rllib_fast.algorithms.extensions:cartpole_mirror"}), "`symmetry`"),
    (dict(rnn_on="head"), "rnn_on"),
])
def test_recurrent_config_errors_name_the_key(kw, needle):
    with pytest.raises(ValueError, match=needle):
        _tiny_recurrent(**kw).validate()


def test_htsppo_and_fasta2c_refuse_rnn_type_in_one_line():
    from rllib_fast.algorithms import FastA2CConfig
    from rllib_fast.algorithms.hts import HTSPPOConfig

    for cfg, needle in ((HTSPPOConfig(), "HTSPPO has no recurrent actor-critic"),
                        (FastA2CConfig(), "unknown config key 'rnn_type'")):
        with pytest.raises(ValueError, match=needle):
            cfg.environment("CartPole").training(rnn_type="lstm").validate()


def _best_return(cfg, iterations):
    algo = cfg.build_algo()
    best = -math.inf
    for _ in range(iterations):
        result = algo.train()
        best = max(best, result["env_runners"]["episode_return_mean"])
    algo.stop()
    return best


@pytest.mark.slow
def test_recurrent_popppo_best_member_learns_masked_cartpole():
    """Velocity-masked CartPole needs memory (FastPPO's feed-forward policy stays below 60
    there, tests/algorithms/test_recurrent.py): the best of two LSTM members passes 100."""
    cfg = (PopPPOConfig().environment("CartPole", env_config=MASKED)
           .training(population_size=2, num_envs_per_member=32, rollout_length=32, rnn_type="lstm", rnn_on="actor",
                     rnn_hidden_size=32, hidden_sizes=[32, 32], num_minibatches=4, pbt_interval=None)
           .debugging(seed=0))
    assert _best_return(cfg, 22) >= 100


@pytest.mark.usefixtures("isolated_run")
def test_rllib_train_file_runs_the_shipped_recurrent_popppo_experiment_and_evaluates_it(capsys):
    """``rllib train file tune_configs/masked-cartpole-pop-ppo-lstm.yaml`` (stop shortened,
    smaller members), then ``rllib evaluate`` of its checkpoint: the best member's policy
    leaves the checkpoint as FastPPO's recurrent module and acts with its memory."""
    import json
    import os
    from pathlib import Path

    from rllib_fast.cli import main

    path = Path(__file__).resolve().parents[2] / "tune_configs" / "masked-cartpole-pop-ppo-lstm.yaml"
    rc = main(["train", "file", str(path), "--stop", '{"training_iteration": 2}', "--no-mlflow",
               "--config", json.dumps({"num_envs_per_member": 4, "rollout_length": 8}), "--ray-num-cpus", "2"])
    out = capsys.readouterr().out
    assert rc == 0, out[-3000:]
    assert "2 iterations" in out, out[-3000:]
    (ckpt,) = [ln.split("checkpoint: ", 1)[1].strip() for ln in out.splitlines() if "checkpoint: " in ln][:1]
    assert os.path.isfile(os.path.join(ckpt, "rllib_checkpoint.json"))
    assert main(["evaluate", ckpt, "--episodes", "2"]) == 0
    assert "over 2 episodes" in capsys.readouterr().out
