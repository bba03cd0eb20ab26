"""HTS-RL (HTSPPO / HTSA2C): storage state machine, lag exactly one, the
delayed A2C gradient against a hand computation, bitwise determinism across
actor counts and runs, checkpoints, clean shutdown and a seeded learning run."""
import copy
import math
import threading
import time

import pytest
import torch
from ray.rllib.algorithms.algorithm import Algorithm

from rllib_fast.algorithms import HTSA2C, HTSPPO
from rllib_fast.algorithms.hts import HTSA2CConfig, HTSPPOConfig
from rllib_fast.algorithms.hts.paper_metrics import PaperMetrics
from rllib_fast.algorithms.hts.storage import DoubleStorage, SwapError
from rllib_fast.core.rollout import RolloutStorage
from rllib_fast.envs.variable_time import VariableTimeCreator


def small(cls=HTSPPOConfig, env="CartPole", n=8, seed=3, **kw):
    kw.setdefault("num_executors", 4)
    kw.setdefault("sync_interval", 8)
    kw.setdefault("decorrelate_steps", 20)
    return cls().environment(env, num_envs=n).training(**kw).debugging(seed=seed)


def flat_params(algo):
    return torch.cat([p.detach().flatten() for p in algo.module.parameters()])


# -- the storage state machine -------------------------------------------------------------
def test_storages_swap_only_when_filled_and_exhausted():
    mk = lambda: RolloutStorage(2, 3, {"x": ((), torch.float32)}, torch.device("cpu"))  # noqa: E731
    buf = DoubleStorage(mk(), mk())
    first_write = buf.write
    assert not buf.has_pending
    with pytest.raises(SwapError):
        buf.swap()                       # nothing filled yet
    buf.begin_fill(0)
    buf.write["x"].fill_(7.0)
    buf.mark_filled()
    with pytest.raises(SwapError):
        buf.begin_fill(1)                # filled storage cannot be refilled before a swap
    buf.swap()                           # exhausted (empty) + filled
    assert buf.read is first_write and buf.has_pending and buf.read_version == 0
    buf.begin_fill(1)
    buf.mark_filled()
    with pytest.raises(SwapError):
        buf.swap()                       # learner has not consumed the read storage
    buf.mark_exhausted()
    buf.swap()
    assert buf.write is first_write and buf.read_version == 1
    state = buf.state_dict()
    assert state["pending"] is not None and state["versions"] == [0, 1]


# -- lag, versions, alpha = 1 ------------------------------------------------------------------
@pytest.mark.parametrize("cls,alpha", [(HTSPPOConfig, 1), (HTSA2CConfig, 8)])
def test_policy_lag_is_exactly_one_for_every_batch(cls, alpha):
    algo = small(cls, sync_interval=alpha, rounds_per_iteration=3).build_algo()
    for _ in range(2):
        r = algo.train()
    assert algo.rounds == 6 and algo.version == 6          # round 0 only collects
    assert len(algo.lag_history) == 5
    assert all(learner - behaviour == 1 for learner, behaviour in algo.lag_history)
    assert r["hts"]["policy_lag"] == 1.0 and r["hts"]["policy_lag_max"] == 1.0
    assert r["num_env_steps_sampled_lifetime"] >= 6 * alpha * 8
    for key in ("sps", "learner_idle_fraction", "executor_idle_fraction"):
        assert math.isfinite(r["hts"][key])
    assert 0.0 <= r["hts"]["learner_idle_fraction"] <= 1.0
    algo.stop()


# -- Eq. 6: the delayed A2C gradient -------------------------------------------------------------
def test_delayed_gradient_a2c_matches_hand_computation():
    cfg = small(HTSA2CConfig, n=4, num_executors=2, sync_interval=5, normalize_obs=False, normalize_values=False,
                normalize_advantages=False, grad_clip=None, decorrelate_steps=0, seed=11,
                lr=1e-2, lr_rule="none")  # RMSProp's mean square starts at 1: steps ~ lr * g, so a large lr keeps them visible
    algo = cfg.build_algo()
    algo.train(); algo.train()                        # round 0 collects D0; round 1 learns D0, collects D1
    assert algo.buffers.read_version == 1 and algo.version == 2
    data = {k: v.clone() for k, v in algo.buffers.read.data.items()}
    behaviour = copy.deepcopy(algo.snapshots[1]).requires_grad_(True)      # theta_1
    theta = [p.detach().clone() for p in algo.params]                       # theta_2
    square_avg = [algo.optimizer.state[p]["square_avg"].clone() for p in algo.params]
    assert any(not torch.equal(a, b) for a, b in zip(theta, behaviour.parameters()))
    algo.train()                                      # round 2: theta_3 = theta_2 - RMSProp(grad at theta_1)

    def a2c_grad(module):
        T, N, g = 5, 4, cfg.gamma
        v = module.vf(data["obs"]).squeeze(-1)
        with torch.no_grad():
            v_next = module.vf(data["final_obs"]).squeeze(-1)
            R = torch.zeros(T, N)
            for t in reversed(range(T)):
                for i in range(N):
                    if data["terminated"][t, i]:
                        R[t, i] = data["rewards"][t, i]
                    elif data["done"][t, i] or t == T - 1:
                        R[t, i] = data["rewards"][t, i] + g * v_next[t, i]
                    else:
                        R[t, i] = data["rewards"][t, i] + g * R[t + 1, i]
            adv = R - v
        logits = module.pi(data["obs"])
        logp_all = torch.log_softmax(logits, -1)
        logp = logp_all.gather(-1, data["actions"].unsqueeze(-1)).squeeze(-1)
        entropy = -(logp_all.exp() * logp_all).sum(-1)
        loss = (-(logp * adv).mean() + cfg.vf_loss_coeff * ((v - R) ** 2).mean()
                - cfg.entropy_coeff * entropy.mean())
        return torch.autograd.grad(loss, list(module.parameters()))

    def rmsprop(params, grads):
        a, lr, eps = cfg.rmsprop_alpha, cfg.lr, cfg.rmsprop_eps
        return [p - lr * gr / (a * s + (1 - a) * gr * gr + eps).sqrt()   # the reference RMSProp
                for p, gr, s in zip(params, grads, square_avg)]

    expected = rmsprop(theta, a2c_grad(behaviour))
    for got, want in zip(algo.params, expected):
        torch.testing.assert_close(got.detach(), want, rtol=0, atol=2e-6)
    # the gradient at theta_2 (no delay) would give a measurably different step
    current = copy.deepcopy(behaviour)
    with torch.no_grad():
        for p, t in zip(current.parameters(), theta):
            p.copy_(t)
    undelayed = rmsprop(theta, a2c_grad(current))
    assert max(float((u - w).abs().max()) for u, w in zip(undelayed, expected)) > 1e-5
    algo.stop()


@pytest.mark.parametrize("mode", ["behaviour", "current"])
def test_htsppo_value_targets_use_the_critic_that_acted(mode):
    """Default 'behaviour': GAE and the value-clipping baseline use the values
    of the snapshot that acted (theta_{j-1} with its value statistics), as the
    released HTS-RL code records them at acting time; 'current' uses the
    learner's critic theta_j."""
    algo = small(HTSPPOConfig, n=4, num_executors=2, rounds_per_iteration=3, value_targets=mode,
                 seed=12).build_algo()
    assert HTSPPOConfig().value_targets == "behaviour"
    seen = {}
    targets = algo._targets

    def spy():
        vnorm, st = algo.module.value_norm, algo.storage
        obs = st.flat("obs")
        with torch.no_grad():
            acted = algo._behaviour.value_norm.denormalize(algo._behaviour.value(obs))
            current = vnorm.denormalize(algo.module.value(obs))
        out = targets()
        with torch.no_grad():    # old values are returned in the (updated) learner's normalised units
            seen.update(old_v=out[2], acted=vnorm.normalize(acted), current=vnorm.normalize(current))
        return out

    algo._targets = spy
    algo.train()        # rounds 0-2: the last update consumes a batch of theta_1 with the learner at theta_2
    assert algo.version == 3
    assert (seen["acted"] - seen["current"]).abs().max() > 1e-4     # the two critics differ here
    torch.testing.assert_close(seen["old_v"], seen["acted" if mode == "behaviour" else "current"],
                               rtol=1e-5, atol=1e-6)
    algo.stop()


# -- determinism -----------------------------------------------------------------------------------------
def _trajectory(num_actors, seed=5, cls=HTSPPOConfig, env="CartPole", mode="combining"):
    algo = small(cls, env=env, n=16, seed=seed, num_actors=num_actors, sync_interval=16, actor_mode=mode,
                 rounds_per_iteration=2).build_algo()
    batches = []
    for _ in range(2):
        algo.train()
        batches.append({k: v.clone() for k, v in algo.buffers.read.data.items()})
    out = dict(params=flat_params(algo), obs=algo.obs.clone(), batches=batches,
               ring=algo.tracker.ring_ret.clone())
    algo.stop()
    return out


def _assert_bitwise_equal(a, b):
    assert torch.equal(a["params"], b["params"])
    assert torch.equal(a["obs"], b["obs"]) and torch.equal(a["ring"], b["ring"])
    for x, y in zip(a["batches"], b["batches"]):
        for k in x:
            assert torch.equal(x[k], y[k]), k


def test_bitwise_identical_across_actor_counts_and_runs():
    ref = _trajectory(1)
    _assert_bitwise_equal(ref, _trajectory(1))          # two runs
    _assert_bitwise_equal(ref, _trajectory(4))          # 4 actor slots (combining)
    _assert_bitwise_equal(ref, _trajectory(2, mode="dedicated"))   # 2 dedicated actor threads


def test_continuous_a2c_deterministic_across_actor_counts():
    _assert_bitwise_equal(_trajectory(1, cls=HTSA2CConfig, env="Pendulum", mode="dedicated"),
                          _trajectory(4, cls=HTSA2CConfig, env="Pendulum"))


def test_htsppo_reproduces_on_a_source_that_draws_from_the_global_rng():
    # Isaac Gym tasks (here the stand-in) reset from torch's global RNG in the executor thread;
    # the learner shuffles minibatches from its own generator, so the interleaving of the two
    # threads cannot change the shuffles from run to run
    env = ("isaacgym:PointReach", {"task_class": "rllib_fast.envs.standins.vectask:PointReachTask",
                                   "cfg": {"env": {"episodeLength": 16}}})

    def run():
        algo = HTSPPOConfig().environment(env[0], num_envs=8, env_config=env[1]).training(
            rollout_length=8, hidden_sizes=[16], num_executors=1, num_epochs=2, num_minibatches=2).debugging(
            seed=0).build_algo()
        try:
            for _ in range(3):
                algo.train()
            return torch.cat([p.detach().flatten() for p in algo.module.parameters()])
        finally:
            algo.stop()

    assert torch.equal(run(), run())


# -- checkpoints -------------------------------------------------------------------------------------------
@pytest.mark.parametrize("cls,env", [(HTSPPOConfig, "CartPole"), (HTSA2CConfig, "Pendulum")])
def test_checkpoint_restore_continues_bit_identically(tmp_path, cls, env):
    algo = small(cls, env=env, rounds_per_iteration=2).build_algo()
    algo.train(); algo.train()
    path = algo.save_to_path(str(tmp_path / "ckpt"))
    r1 = algo.train()
    p1, pending1 = flat_params(algo), algo.buffers.read["actions"].clone()
    restored = Algorithm.from_checkpoint(path)
    assert isinstance(restored, HTSPPO if cls is HTSPPOConfig else HTSA2C) and restored.RESUME_EXACT
    assert restored.version == 4 and restored.rounds == 4
    r2 = restored.train()
    assert torch.equal(flat_params(restored), p1)
    assert torch.equal(restored.buffers.read["actions"], pending1) and torch.equal(restored.obs, algo.obs)
    assert r2["num_env_steps_sampled_lifetime"] == r1["num_env_steps_sampled_lifetime"]
    assert r2["learners"]["default_policy"]["policy_loss"] == r1["learners"]["default_policy"]["policy_loss"]
    algo.stop(); restored.stop()


# -- shutdown ------------------------------------------------------------------------------------------------
def test_stop_mid_iteration_does_not_deadlock():
    slow_env = VariableTimeCreator("CartPole", mean_s=0.02, std_s=0.02)
    algo = (HTSPPOConfig().environment(slow_env, num_envs=4)
            .training(num_executors=2, sync_interval=200, decorrelate_steps=0, validate_env_on_setup=False)
            .debugging(seed=0).build_algo())
    outcome = {}

    def train():
        try:
            algo.train()
            outcome["result"] = "returned"
        except Exception as exc:  # noqa: BLE001 - the stopped iteration raises
            outcome["result"] = type(exc).__name__

    t = threading.Thread(target=train, daemon=True)
    t.start()
    time.sleep(0.5)                                   # a round of 200 steps takes ~4 s
    assert t.is_alive() and algo.runtime is not None
    threads = list(algo.runtime._threads)
    t0 = time.monotonic()
    algo.stop()
    t.join(10)
    assert not t.is_alive() and time.monotonic() - t0 < 10
    assert outcome["result"] in ("HTSStopped", "RuntimeError", "returned")
    assert not any(th.is_alive() for th in threads)


def test_an_interrupted_round_leaves_a_consistent_algorithm():
    """Ctrl-C (or any error) at the barrier aborts the round: runtime closed,
    storages dropped, and training continues with full rounds and lag exactly
    one (executors left running that round would still be writing the storages
    the next train() swaps in)."""
    env = VariableTimeCreator("CartPole", mean_s=0.005, std_s=0.0, distribution="constant")
    algo = (HTSPPOConfig().environment(env, num_envs=4)
            .training(num_executors=2, sync_interval=10, decorrelate_steps=0, validate_env_on_setup=False)
            .debugging(seed=0).build_algo())
    algo.train()
    rt = algo.runtime
    original = rt.wait_round

    def interrupted(timeout_s):
        rt.wait_round = original
        raise KeyboardInterrupt

    rt.wait_round = interrupted
    version = algo.version
    with pytest.raises(KeyboardInterrupt):
        algo.train()
    assert algo.runtime is None and not rt.alive and not algo.buffers.has_pending
    # the pending batch was consumed (+1) before the barrier; then the current weights
    # count as two versions (+1), as at the start
    assert algo.version == version + 2
    for _ in range(3):
        algo.train()
    rt2 = algo.runtime
    rounds = 3 * algo.config.rounds_per_iteration
    # every round was complete when it was swapped in, and no round runs on in the background
    assert rt2.steps_done == [rounds * 10] * 2 and rt2._done == 2
    assert all(learner - behaviour == 1 for learner, behaviour in algo.lag_history)
    algo.stop()


def test_round_timeout_counts_time_without_progress():
    """``wait_timeout_s`` is the time without any env step, not the round's length:
    a round of 40 steps x 20 ms is healthy with a 0.3 s timeout."""
    env = VariableTimeCreator("CartPole", mean_s=0.02, std_s=0.0, distribution="constant")
    algo = (HTSPPOConfig().environment(env, num_envs=4)
            .training(num_executors=2, sync_interval=40, decorrelate_steps=0, validate_env_on_setup=False,
                      wait_timeout_s=0.3).debugging(seed=0).build_algo())
    algo.train()
    assert algo.runtime.steps_done == [40 * algo.config.rounds_per_iteration] * 2
    algo.stop()


def test_guard_skip_keeps_the_behaviour_snapshots_of_the_pending_batch():
    """'skip' rolls the learner back, not the snapshots the pending batch was
    collected with: its stored log-probs must still be the snapshot's."""
    from rllib_fast.core.guard import UpdateGuard

    algo = small(num_executors=2, sync_interval=8, decorrelate_steps=5, nonfinite_guard="skip").build_algo()

    def pending_logp_error():
        st = algo.buffers.read
        snap = algo.snapshots[algo.buffers.read_version % 2]
        with torch.no_grad():
            logp, _ = snap.evaluate_actions(snap.policy_input(st.flat("obs")), st.flat("actions"))
        return (logp - st.flat("logp")).abs().max().item()

    algo.train(); algo.train()
    guard = UpdateGuard("skip")
    before = guard.snapshot(algo)
    params_before = {k: v.clone() for k, v in before["module"].items()}
    algo.train()
    guard.check(algo, {"learners": {"default_policy": {"policy_loss": float("nan")}}}, before)
    assert all(torch.equal(v, params_before[k]) for k, v in algo.module.state_dict().items())  # rolled back
    assert pending_logp_error() < 1e-5
    algo.stop()


def test_restore_into_other_executor_count_fails_before_loading(tmp_path):
    from rllib_fast.core.algorithm import CheckpointMismatchError

    algo = small(num_executors=2).build_algo()
    algo.train()
    path = algo.save_to_path(str(tmp_path / "ckpt"))
    other = small(num_executors=4).build_algo()
    params = flat_params(other)
    with pytest.raises(CheckpointMismatchError, match="num_executors=2"):
        other.restore_from_path(path)
    assert torch.equal(flat_params(other), params)   # nothing was loaded
    algo.stop(); other.stop()


def test_train_after_stop_is_a_clear_error():
    algo = small(num_executors=2).build_algo()
    algo.train()
    threads = list(algo.runtime._threads)
    algo.stop()
    with pytest.raises(RuntimeError, match="was stopped"):
        algo.train()
    assert not any(t.is_alive() for t in threads)


# -- config validation and evaluation metrics ------------------------------------------------------------------
def test_bad_config_names_key_and_allowed_values():
    with pytest.raises(ValueError, match="num_executors.*allowed"):
        HTSPPOConfig().environment("CartPole", num_envs=10).training(num_executors=4).validate()
    with pytest.raises(ValueError, match="num_actors.*allowed"):
        HTSA2CConfig().environment("CartPole", num_envs=8).training(num_executors=2, num_actors=3).validate()
    with pytest.raises(ValueError, match="sync_interval"):
        HTSPPOConfig().training(sync_interval=0).validate()


def test_paper_metrics_final_final_time_required_time():
    m = PaperMetrics()
    for i in range(12):                               # 10 episodes per evaluation
        m.record(train_time_s=10.0 * (i + 1), mean_return=float(i), num_episodes=10, target=5.0)
    assert m.final() == pytest.approx(sum(range(2, 12)) / 10)          # last 10 policies x 10 episodes
    assert m.final_time(60.0) == pytest.approx(sum(range(6)) / 6)
    # running mean of the latest 100 episodes reaches 5 at evaluation 11 (mean of 1..10 = 5.5; of 0..9 = 4.5)
    assert m.required_time(5.0) == pytest.approx(110.0) and math.isnan(m.required_time(50.0))


def test_evaluation_reports_paper_metrics():
    algo = (small(rounds_per_iteration=2, required_time_target=5.0, final_time_limit_s=1e6)
            .evaluation(evaluation_interval=1, evaluation_duration=10).build_algo())
    r = algo.train()
    hts = r["evaluation"]["hts"]
    assert hts["final"] == r["evaluation"]["env_runners"]["episode_return_mean"]
    assert hts["required_time"] == pytest.approx(hts["train_time_s"]) and hts["final_time"] == hts["final"]
    algo.stop()


# -- learning ------------------------------------------------------------------------------------------------------
@pytest.mark.slow
def test_htsppo_learns_cartpole_to_475():
    # FastPPO's tuned CartPole settings with alpha = 64; the 600k-step budget bounds a failing run
    algo = (HTSPPOConfig().environment("CartPole", num_envs=64)
            .training(num_executors=2, sync_interval=64, lr=1e-3, adaptive_lr_kl_target=0.01, rounds_per_iteration=4)
            .debugging(seed=0).build_algo())
    best, steps = -math.inf, 0
    while steps < 600_000 and best < 475:
        r = algo.train()
        ret, steps = r["env_runners"]["episode_return_mean"], r["num_env_steps_sampled_lifetime"]
        best = max(best, ret if math.isfinite(ret) else -math.inf)
        # every batch the learner consumed (from the second round of the first iteration on) lags one
        assert r["hts"]["policy_lag"] == 1.0 and r["hts"]["policy_lag_max"] == 1.0
    algo.stop()
    assert best >= 475
