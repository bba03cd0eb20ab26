"""PPO's minibatch step runs each network once: the shared trunk once for both
heads (and the bound loss), and the adaptive lr's KL read off the training
forward instead of a separate no-grad pass. Both are pure speed changes: these
tests hold the fused update to the one it replaced."""
import pytest
import torch

from rllib_fast.algorithms.ppo import FastPPOConfig

E, M = 2, 4   # epochs, minibatches per epoch

#: rl_games' form (the Ant/Humanoid files), rsl_rl's form, and FastPPO's per-epoch k3 rule
FORMS = {
    "rl_games": dict(shared_trunk=True, init="torch", normalize_advantages_over="batch", kl_estimator="analytic",
                     kl_reference="previous_epoch", adaptive_lr_every="minibatch", surrogate_clip="smooth",
                     bounds_loss_coeff=0.01),
    "rsl_rl": dict(kl_estimator="analytic", adaptive_lr_every="minibatch"),
    "k3_epoch": dict(kl_estimator="k3", adaptive_lr_every="epoch"),
    "k3_minibatch": dict(kl_estimator="k3", adaptive_lr_every="minibatch"),
}


def build(form, fused: bool):
    kw = dict(FORMS[form], rollout_length=8, num_epochs=E, num_minibatches=M, adaptive_lr_kl_target=0.001,
              hidden_sizes=[32, 32], lr=3e-3)
    algo = FastPPOConfig().environment("Pendulum", num_envs=16).training(**kw).debugging(seed=5).build_algo()
    algo.update_rule.fuse_kl_forward = fused
    return algo


def trained(form, fused, iterations=3):
    algo = build(form, fused)
    lrs = [algo.train()["learners"]["default_policy"]["curr_lr"] for _ in range(iterations)]
    params = {k: v.detach().clone() for k, v in algo.module.state_dict().items()}
    algo.stop()
    return params, lrs


@pytest.mark.parametrize("form", sorted(FORMS))
def test_fused_update_learns_what_the_separate_passes_learned(form):
    """Same seed, same data: the parameters and the adapted lr after three
    updates match. Separate networks and the KL: bit for bit (the same forward
    values, the same gradient graph). The shared trunk: to float rounding (its
    gradient is summed from both heads before the trunk's backward instead of
    after two)."""
    fused, lr_fused = trained(form, True)
    separate, lr_separate = trained(form, False)
    assert lr_fused == pytest.approx(lr_separate, rel=1e-6)
    assert len(set(lr_fused)) > 1 or form == "k3_epoch"   # the lr did adapt (not a trivial comparison)
    for key, value in separate.items():
        if FORMS[form].get("shared_trunk"):
            torch.testing.assert_close(fused[key], value, rtol=1e-4, atol=1e-5, msg=key)
        else:
            assert torch.equal(fused[key], value), key


def trunk_calls_in_one_update(fused: bool) -> int:
    algo = build("rl_games", fused)
    calls, learning = [], []
    algo.module.trunk.register_forward_hook(lambda *_: calls.append(1) if learning else None)
    learn = algo.update_rule.learn

    def counted(batch):
        learning.append(1)
        try:
            return learn(batch)
        finally:
            learning.clear()
    algo.update_rule.learn = counted
    algo.train()
    algo.stop()
    return len(calls)


def test_one_trunk_forward_per_minibatch():
    """rl_games' form (shared trunk, analytic KL, bound loss): an update runs the
    trunk once per minibatch (policy, value, bound loss and KL all read it) plus
    once for the policy at the update's start; the KL's separate no-grad pass
    would add one per minibatch."""
    assert trunk_calls_in_one_update(True) == E * M + 1
    assert trunk_calls_in_one_update(False) == 2 * E * M + 1
