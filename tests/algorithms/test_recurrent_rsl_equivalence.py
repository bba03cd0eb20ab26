"""Recurrent FastPPO with every rsl_rl option *is* rsl_rl 5.4.2's recurrent PPO update: on the
same rollout batch, from the same weights (LSTM/GRU memory in front of the actor's and the
critic's MLP, rsl_rl's ``RNNModel``), one whole update (5 epochs x 4 minibatches of whole env
sequences: rsl_rl's split-and-pad minibatches against FastPPO's replay with resets, contiguous
env blocks, per-minibatch analytic-KL lr, per-network grad clip, whole-batch advantage
normalisation, clipped value loss) leaves the same parameters and the same lr. Episodes end
inside the rollout (Pendulum's time limit with clocks randomised), so the sequences are split
and the hidden state restarts mid-rollout."""
import pytest
import torch

rsl_rl = pytest.importorskip("rsl_rl")
tensordict = pytest.importorskip("tensordict")

from rsl_rl.algorithms import PPO  # noqa: E402
from rsl_rl.models import RNNModel  # noqa: E402
from rsl_rl.storage import RolloutStorage as RslStorage  # noqa: E402

from rllib_fast.algorithms.ppo import FastPPOConfig  # noqa: E402
from tests.algorithms.test_ppo_rsl_equivalence import MAPPED, PARITY, linears  # noqa: E402

H = 32
#: weights agree to float noise: the memory's written-out cell rounds differently from torch.lstm
#: (1e-7), and 20 Adam steps (eps 1e-8) turn such differences on near-zero gradients into
#: lr-sized ones on a few weights (the update itself moves weights by > 1e-3). Which weights,
#: and by how much, depends on the kernels' summation order (it differed on one CI run: 41 of
#: 4,096 weights by up to 1.6e-4), so the test bounds both: nearly every weight within TOL, and
#: none further apart than the Adam steps a sign flip of a near-zero gradient can account for.
TOL = 5e-5
#: the share of a tensor's elements allowed beyond TOL
NOISY_SHARE = 0.03
#: Adam steps in one update: 5 epochs x 4 minibatches
STEPS = 20


def assert_same_update(ours: torch.Tensor, theirs: torch.Tensor, lr: float, what: str) -> None:
    """Same parameters up to float noise amplified by Adam: at most NOISY_SHARE of the elements
    beyond TOL, and none beyond 2 * lr * STEPS (two opposite Adam steps of at most lr each)."""
    gap = (ours.detach() - theirs.detach()).abs()
    beyond = float((gap > TOL).float().mean())
    assert beyond <= NOISY_SHARE, f"{what}: {beyond:.1%} of elements differ by more than {TOL} (max {float(gap.max()):.2e})"
    assert float(gap.max()) <= 2 * lr * STEPS, f"{what}: a gap of {float(gap.max()):.2e} is more than Adam noise"


def rsl_models(obs_dim: int, act_dim: int, n: int, rnn_type: str):
    obs = tensordict.TensorDict({"policy": torch.zeros(n, obs_dim)}, batch_size=[n])
    groups = {"actor": ["policy"], "critic": ["policy"]}
    rnn = dict(rnn_type=rnn_type, rnn_hidden_dim=H, rnn_num_layers=1)
    actor = RNNModel(obs, groups, "actor", act_dim, hidden_dims=(64, 64), activation="elu", obs_normalization=False,
                     distribution_cfg={"class_name": "GaussianDistribution", "init_std": 1.0, "std_type": "scalar"},
                     **rnn)
    critic = RNNModel(obs, groups, "critic", 1, hidden_dims=(64, 64), activation="elu", obs_normalization=False, **rnn)
    return obs, actor, critic


def copy_weights(module, actor, critic) -> None:
    with torch.no_grad():
        for dst, src in [(actor.mlp, module.pi), (critic.mlp, module.vf)]:
            for a, b in zip(linears(dst), linears(src), strict=True):
                a.weight.copy_(b.weight)
                a.bias.copy_(b.bias)
        actor.rnn.rnn.load_state_dict(module.pi_memory.rnn.state_dict())
        critic.rnn.rnn.load_state_dict(module.vf_memory.rnn.state_dict())
        actor.distribution.std_param.copy_(module.std)


def saved_states(start: torch.Tensor, t: int):
    """rsl_rl's per-step hidden states ``[T, L, N, H]`` (one per LSTM part): the rollout's
    start state at step 0, zeros after every episode end -- the only entries its recurrent
    minibatches read -- and zeros elsewhere."""
    out = []
    for part in start:   # [L, N, H]
        s = torch.zeros(t, *part.shape)
        s[0] = part
        out.append(s)
    return out


@pytest.mark.parametrize("rnn_type", ["lstm", "gru"])
def test_recurrent_update_is_rsl_rl_recurrent_update(rnn_type):
    n, t = 32, 32
    algo = (FastPPOConfig().environment("Pendulum", num_envs=n, env_config={"max_episode_steps": 40})
            .training(rollout_length=t, **{**MAPPED, **PARITY, "shuffle": "none"}, rnn_type=rnn_type,
                      rnn_hidden_size=H, rnn_on="both")
            .debugging(seed=1).build_algo())
    module, rule = algo.module, algo.update_rule
    for _ in range(2):   # a policy, memory and lr that have moved
        algo.train()
    algo._rollout()
    batch = algo._batch(algo._targets())
    seq = batch.sequences
    assert bool(seq.starts.any()), "no episode ended inside the rollout: the test would not split sequences"
    obs_dim, act_dim = batch.obs.shape[-1], batch.actions.shape[-1]

    obs_td, actor, critic = rsl_models(obs_dim, act_dim, n, rnn_type)
    copy_weights(module, actor, critic)
    storage = RslStorage("rl", n, t, obs_td, [act_dim], "cpu")
    lr = float(rule.optimizer.param_groups[0]["lr"])
    ppo = PPO(actor, critic, storage, num_learning_epochs=5, num_mini_batches=4, clip_param=0.2, gamma=0.99,
              lam=0.95, value_loss_coef=1.0, entropy_coef=0.01, learning_rate=lr, max_grad_norm=1.0,
              use_clipped_value_loss=True, schedule="adaptive", desired_kl=0.01)
    rule.optimizer.state.clear()   # both from a fresh Adam state

    def tn(x):
        return x.reshape(t, n, *x.shape[1:])

    with torch.no_grad():   # what rsl_rl stores at act(): the acting policy's mean and std
        mean, log_std = module.dist_params(rule.actor_features(batch, None))
    ended = torch.cat([tn(seq.starts)[1:], torch.zeros(1, n, dtype=torch.bool)])   # done at t = start at t+1
    storage.observations = tensordict.TensorDict({"policy": tn(batch.obs)}, batch_size=[t, n])
    storage.actions.copy_(tn(batch.actions))
    storage.dones.copy_(ended.unsqueeze(-1))
    storage.values.copy_(tn(batch.old_values).unsqueeze(-1))
    storage.returns.copy_(tn(batch.value_targets).unsqueeze(-1))
    adv = tn(batch.advantages).unsqueeze(-1)   # rsl_rl normalises in compute_returns, FastPPO in the update
    storage.advantages = (adv - adv.mean()) / (adv.std() + 1e-8)
    storage.actions_log_prob.copy_(tn(batch.logp).unsqueeze(-1))
    storage.distribution_params = (tn(mean), tn(log_std.exp()))
    storage.saved_hidden_state_a = saved_states(seq.memories.actor, t)
    storage.saved_hidden_state_c = saved_states(seq.memories.critic, t)
    storage.step = t

    before = [p.detach().clone() for p in module.parameters()]
    rsl_losses = ppo.update()
    ours = rule.learn(batch)

    assert float(ours["curr_lr"]) == pytest.approx(ppo.learning_rate, rel=1e-5)
    assert float(ours["policy_loss"]) == pytest.approx(rsl_losses["surrogate"], rel=1e-4, abs=1e-7)
    assert 2 * float(ours["vf_loss"]) == pytest.approx(rsl_losses["value"], rel=1e-4)
    assert float(ours["entropy"]) == pytest.approx(rsl_losses["entropy"], rel=1e-5)
    top_lr = max(lr, ppo.learning_rate)
    for dst, src in [(actor.mlp, module.pi), (critic.mlp, module.vf)]:
        for i, (a, b) in enumerate(zip(linears(dst), linears(src))):
            assert_same_update(b.weight, a.weight, top_lr, f"linear {i} weight")
            assert_same_update(b.bias, a.bias, top_lr, f"linear {i} bias")
    for dst, src in [(actor.rnn.rnn, module.pi_memory.rnn), (critic.rnn.rnn, module.vf_memory.rnn)]:
        for (name, a), b in zip(dst.named_parameters(), src.parameters()):
            assert_same_update(b, a, top_lr, name)
    torch.testing.assert_close(module.std.detach(), actor.distribution.std_param.detach(), rtol=0, atol=TOL)
    assert max(float((p.detach() - b).abs().max()) for p, b in zip(module.parameters(), before)) > 1e-3
    algo.stop()
