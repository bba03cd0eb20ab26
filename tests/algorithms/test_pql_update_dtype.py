"""``update_dtype`` in PQL, DDPG(n) and SAC(n): the V- and P-learners' forward
and backward under torch.autocast (bfloat16), everything else float32. What it
must keep: float32 parameters, AdamW state, targets, C51 projection and acting;
an update close to the float32 one; learning; the three back-ends."""
import math

import pytest
import torch

from rllib_fast.algorithms.pql import DDPGNConfig, PQLConfig, SACNConfig
from rllib_fast.algorithms.pql.nets import DoubleQ, SquashedGaussianPolicy, DeterministicPolicy
from rllib_fast.core.precision import autocast_dtype, native_bfloat16, training_precision
from rllib_fast.presets import preset


def small(cls=DDPGNConfig, **kw):
    base = dict(hidden_sizes=[32, 32], batch_size=64, steps_per_iteration=20, warmup_steps=2, buffer_size=2000,
                distributional=True, num_atoms=21, v_min=-100.0, v_max=0.0, layer_norm=True)
    base.update(kw)
    return cls().environment("Pendulum", num_envs=8).training(**base).debugging(seed=3)


def test_networks_hand_float32_outputs_on_under_autocast():
    """The matrix products run in bfloat16; the heads' outputs, and so tanh, the
    squashed Gaussian's log-probability and the atoms' softmax, are float32."""
    obs, act = torch.randn(5, 3), torch.rand(5, 2) * 2 - 1
    q = DoubleQ(3, 2, [16], "elu", num_atoms=11)
    det = DeterministicPolicy(3, 2, [16], "elu")
    sac = SquashedGaussianPolicy(3, 2, [16], "elu")
    seen = []
    q.q1[0].register_forward_hook(lambda m, i, o: seen.append(o.dtype))
    with training_precision("cpu", torch.bfloat16):
        h1, h2 = q.heads(obs, act)
        e1, e2 = q.q(obs, act)
        a = det(obs)
        s, logp = sac.sample(obs)
    assert seen and set(seen) == {torch.bfloat16}
    assert {t.dtype for t in (h1, h2, e1, e2, a, s, logp)} == {torch.float32}


def test_the_setting_resolves_per_device_and_compile():
    assert autocast_dtype("float32", "cpu") is None
    assert autocast_dtype("bfloat16", "cpu") is torch.bfloat16
    assert autocast_dtype("auto", "cpu") is (torch.bfloat16 if native_bfloat16("cpu") else None)
    assert autocast_dtype("auto", "cpu", reachable=False) is None   # e.g. under compile


@pytest.mark.parametrize("cls", [DDPGNConfig, SACNConfig])
def test_one_critic_and_policy_update_stay_close_to_float32(cls):
    """Same seed, same transitions: after the same updates the parameters differ
    by bfloat16's rounding, far less than the updates moved them; parameters and
    AdamW's moments stay float32."""
    start, runs = None, {}
    for dtype in ("float32", "bfloat16"):
        algo = small(cls, update_dtype=dtype).build_algo()
        if start is None:
            start = {k: v.clone() for k, v in algo.v.critic.state_dict().items()}
        assert algo.v.autocast == (None if dtype == "float32" else torch.bfloat16)
        assert algo.p.autocast == algo.v.autocast
        r = algo.train()["learners"]["default_policy"]
        assert math.isfinite(r["critic_loss"])
        state = algo.v.critic.state_dict()
        assert all(v.dtype == torch.float32 for v in state.values())
        assert all(s["exp_avg"].dtype == torch.float32 for s in algo.v.optimizer.state.values())
        assert all(s["exp_avg"].dtype == torch.float32 for s in algo.p.optimizer.state.values())
        runs[dtype] = {k: v.clone() for k, v in state.items()}
        algo.stop()
    moved = sum(float((runs["float32"][k] - start[k]).norm()) for k in start)
    apart = sum(float((runs["float32"][k] - runs["bfloat16"][k]).norm()) for k in start)
    assert moved > 0 and apart < 0.25 * moved


def test_learner_forwards_run_in_bfloat16_and_acting_in_float32():
    algo = small(update_dtype="bfloat16").build_algo()
    critic_seen, policy_seen = [], []
    algo.v.critic.q1[0].register_forward_hook(lambda m, i, o: critic_seen.append(o.dtype))
    algo.actor.policy.net[0].register_forward_hook(lambda m, i, o: policy_seen.append(o.dtype))
    algo.train()
    assert set(critic_seen) == {torch.bfloat16}
    # the shared policy: float32 when the Actor acts, bfloat16 inside the learners' updates
    assert torch.float32 in policy_seen and torch.bfloat16 in policy_seen
    algo.stop()


@pytest.mark.parametrize("backend", ["thread", "process"])
def test_pql_backends_carry_the_setting_to_their_learners(backend):
    cfg = small(PQLConfig, update_dtype="bfloat16", backend=backend)
    algo = cfg.build_algo()
    try:
        r = algo.train()["learners"]["default_policy"]
        assert math.isfinite(r["critic_loss"]) and r["num_critic_updates"] > 0
    finally:
        algo.stop()


@pytest.mark.parametrize("kw,match", [
    (dict(update_dtype="float16"), r"update_dtype.*'float32', 'bfloat16', 'auto'"),
    (dict(update_dtype="bfloat16", compile=True), r"`compile` = True; allowed with bfloat16: compile = False"),
])
def test_bad_settings_are_named_at_validation(kw, match):
    for cls in (PQLConfig, DDPGNConfig, SACNConfig):
        with pytest.raises(ValueError, match=match):
            cls().environment("Pendulum").training(**kw).validate()


@pytest.mark.slow
def test_bfloat16_ddpgn_with_the_recipe_learns_pendulum():
    """test_pql_recipe's learning run (C51, LayerNorm, mixed random noise) with
    the updates in bfloat16."""
    pendulum = {k: v for k, v in preset("DDPGN", "Pendulum").items() if k != "num_envs"}
    algo = DDPGNConfig().environment("Pendulum", num_envs=64).training(
        **pendulum, distributional=True, num_atoms=51, v_min=-100.0, v_max=0.0, layer_norm=True,
        noise_type="mixed_random", update_dtype="bfloat16").debugging(seed=0).evaluation(
        evaluation_duration=10).build_algo()
    try:
        best = -math.inf
        for _ in range(30):
            algo.train()
            best = max(best, algo.evaluate()["env_runners"]["episode_return_mean"])
            if best >= -250.0:
                break
        assert best >= -250.0
    finally:
        algo.stop()
