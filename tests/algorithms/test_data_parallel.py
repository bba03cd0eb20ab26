"""num_learners=2 through Ray actors (gloo on CPU)."""
import math
import threading

import numpy as np
import pytest
import ray
import torch
from ray.rllib.algorithms.algorithm import Algorithm

from rllib_fast.algorithms.a2c import FastA2CConfig
from rllib_fast.algorithms.ppo import FastPPO, FastPPOConfig
from rllib_fast.core.multi_learner import module_tensors


@pytest.fixture(scope="module", autouse=True)
def ray_session():
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, ignore_reinit_error=True)
    yield
    ray.shutdown()


def _vector(algo):
    return torch.cat([t.detach().reshape(-1).double() for t in module_tensors(algo.module)])


@pytest.mark.parametrize("cfg_cls", [FastA2CConfig, FastPPOConfig])
def test_learners_stay_bit_identical_and_count_all_env_steps(cfg_cls):
    cfg = cfg_cls().environment("CartPole", num_envs=16).training(rollout_length=8).learners(
        num_learners=2, num_cpus_per_learner=1).debugging(seed=0)
    if cfg_cls is FastPPOConfig:
        cfg.training(adaptive_lr_kl_target=0.01)  # exercises the all-reduced KL too
    algo = cfg.build_algo()
    assert algo.env.num_envs == 8 and len(algo._dp_group.remotes) == 1
    for i in range(3):
        r = algo.train()
        remote = algo._dp_group.parameter_vectors()[0]
        assert torch.equal(_vector(algo), remote), f"learners diverged at iteration {i}"
    assert r["num_env_steps_sampled_lifetime"] >= 3 * 8 * 16
    algo.stop()


def test_checkpoint_restores_every_learner(tmp_path):
    cfg = FastPPOConfig().environment("CartPole", num_envs=8).training(rollout_length=8).learners(
        num_learners=2).debugging(seed=1)
    algo = cfg.build_algo()
    algo.train()
    path = algo.save_to_path(str(tmp_path / "c"))
    algo.train()
    after = _vector(algo)
    algo.stop()
    restored = Algorithm.from_checkpoint(path)
    assert isinstance(restored, FastPPO)
    restored.train()
    assert torch.equal(_vector(restored), after)  # both learners resumed exactly
    assert torch.equal(restored._dp_group.parameter_vectors()[0], after)
    restored.stop()


def test_validation_of_learner_counts():
    with pytest.raises(ValueError, match="must be divisible by `num_learners`"):
        FastPPOConfig().environment("CartPole", num_envs=9).learners(num_learners=2).validate()
    from rllib_fast.algorithms.dqn import FastDQNConfig

    with pytest.raises(ValueError, match="`num_learners` = 2 is not supported by FastDQN"):
        FastDQNConfig().environment("CartPole", num_envs=8).learners(num_learners=2).validate()


def test_resource_request_has_one_bundle_per_learner():
    pgf = FastPPO.default_resource_request(FastPPOConfig().environment("CartPole", num_envs=8).learners(
        num_learners=3, num_cpus_per_learner=1))
    assert len(pgf.bundles) == 3


@pytest.mark.slow
def test_two_learner_ppo_learns_cartpole():
    algo = FastPPOConfig().environment("CartPole", num_envs=64).learners(
        num_learners=2).debugging(seed=0).build_algo()
    best = -math.inf
    for _ in range(150):
        ret = algo.train()["env_runners"]["episode_return_mean"]
        best = max(best, ret if np.isfinite(ret) else -math.inf)
        if best >= 475:
            break
    algo.stop()
    assert best >= 475


def _remote(algo, fn):
    """Run ``fn(remote_learner_algorithm)`` on learner 1 (test instrumentation)."""
    return ray.get(algo._dp_group.remotes[0].__ray_call__.remote(lambda actor: fn(actor.algo)))


def _count_env_steps(algo):
    """Wrap ``algo.env.step`` to count the env steps it really takes."""
    env, step = algo.env, algo.env.step
    env.steps_taken = 0

    def counting(action):
        env.steps_taken += env.num_envs
        return step(action)

    env.step = counting
    return True


def test_derived_quantities_come_from_the_global_config_on_every_learner():
    """lr_rule='sqrt' and total_batch_size are computed from the trial's total
    num_envs on every learner (not from a remote learner's share, which would
    give lr 6.26e-4 instead of 8.85e-4 and horizon 16 instead of 8); the env
    steps reported are the env steps all learners took."""
    cfg = FastA2CConfig().environment("CartPole", num_envs=16).training(
        lr_rule="sqrt", total_batch_size=128, decorrelate_steps=4).learners(num_learners=2).reporting(
        metrics_num_episodes_for_smoothing=10_000).debugging(seed=4)
    algo = cfg.build_algo()
    lr = algo.configured_lr()
    assert lr == pytest.approx(7e-4 * math.sqrt(128 / 80))  # 8.85e-4
    assert algo.horizon == 8 and _remote(algo, lambda a: a.horizon) == 8
    assert _remote(algo, lambda a: a.optimizer.param_groups[0]["lr"]) == algo.optimizer.param_groups[0]["lr"] == lr
    _count_env_steps(algo)
    _remote(algo, _count_env_steps)
    iters = 3
    for i in range(iters):
        r = algo.train()
        assert torch.equal(_vector(algo), algo._dp_group.parameter_vectors()[0]), f"learners diverged at {i}"
    taken = algo.env.steps_taken + _remote(algo, lambda a: a.env.steps_taken)
    assert taken == iters * 128
    decorrelation = 4 * 16  # both learners' envs
    assert r["num_env_steps_sampled_lifetime"] == taken + decorrelation
    assert r["learners"]["__all_modules__"]["num_env_steps_trained_lifetime"] == taken

    # episodes: one population over both learners (the window holds every episode so far)
    def window(a):
        n = int(a.tracker.filled)
        return a.tracker.ring_ret[:n].tolist(), [float(x) for x in a.tracker.ring_len[:n]]

    rets0, lens0 = window(algo)
    rets1, lens1 = _remote(algo, window)
    assert rets0 and rets1
    er = r["env_runners"]
    assert er["num_episodes_lifetime"] == len(rets0) + len(rets1)
    assert er["episode_return_min"] == min(rets0 + rets1)
    assert er["episode_return_max"] == max(rets0 + rets1)
    assert er["episode_return_mean"] == pytest.approx(float(np.mean(rets0 + rets1)))
    assert er["episode_len_mean"] == pytest.approx(float(np.mean(lens0 + lens1)))
    algo.stop()


def test_reset_config_reaches_every_learner():
    """PBT with reuse_actors: a live change (lr, entropy_coeff) applies to
    learners 1..L-1 too, and they stay bit-identical to learner 0."""
    cfg = FastA2CConfig().environment("CartPole", num_envs=8).training(rollout_length=8, lr_rule="none").learners(
        num_learners=2).debugging(seed=5)
    algo = cfg.build_algo()
    algo.train()
    new = cfg.copy(copy_frozen=False).training(lr=2e-3, entropy_coeff=0.05)
    assert algo.reset_config(new.to_dict())
    assert _remote(algo, lambda a: (a.config.lr, a.config.entropy_coeff)) == (2e-3, 0.05)
    assert _remote(algo, lambda a: a.optimizer.param_groups[0]["lr"]) == 2e-3
    for i in range(2):
        algo.train()
        assert torch.equal(_vector(algo), algo._dp_group.parameter_vectors()[0]), f"learners diverged at {i}"
    algo.stop()


class _ThreadGroup:
    """In-process stand-in for the torch.distributed group: learners are
    threads, ``sum_`` adds their tensors in rank order (the collectives of
    ``DistributedContext`` that an update uses)."""

    def __init__(self, n):
        self.n, self.slots = n, [None] * n
        self.barrier = threading.Barrier(n, timeout=120)

    def context(self, rank):
        from rllib_fast.core.distributed import DistributedContext

        group = self

        class Ctx:
            world_size, _flat = group.n, None
            average_gradients = DistributedContext.average_gradients

            def sum_(self, t):
                group.slots[rank] = t.detach().clone()
                group.barrier.wait()
                total = group.slots[0].clone()
                for s in group.slots[1:]:
                    total += s
                group.barrier.wait()
                return t.copy_(total)

            def mean_(self, t):
                return self.sum_(t).div_(group.n)

        return Ctx()


@pytest.mark.parametrize("algo_name", ["FastA2C", "FastPPO"])
def test_masked_means_are_global_when_valid_counts_differ(algo_name):
    """Two learners with different numbers of valid transitions (one sees
    none invalid) make the same update as one learner on all their data: the
    masked mean over the union, not the average of per-learner means. (PPO:
    one epoch of one minibatch, so both sides see the same transitions.)"""
    def build(n):
        if algo_name == "FastA2C":
            cfg = FastA2CConfig().training(decorrelate_steps=0, grad_clip=None, lr_rule="none")
        else:
            cfg = FastPPOConfig().training(decorrelate_steps=0, grad_clip=None, rollout_length=5, num_epochs=1,
                                           num_minibatches=1, adaptive_lr_kl_target=None)
        return cfg.environment("CartPole", num_envs=n).debugging(seed=6).build_algo()

    ref, learners = build(8), [build(4), build(4)]
    ref._rollout()
    valid = torch.ones_like(ref.storage["valid"])
    valid[2:, :4] = False          # learner 0 keeps 2 of 5 steps valid in each env, learner 1 all
    ref.storage["valid"].copy_(valid)
    ref.any_invalid = True
    group = _ThreadGroup(2)
    for rank, algo in enumerate(learners):
        algo.module.load_state_dict(ref.module.state_dict())
        for k, v in ref.storage.data.items():
            algo.storage[k].copy_(v[:, 4 * rank:4 * rank + 4])
        algo.any_invalid = rank == 0
        algo.dist = group.context(rank)
    before = _vector(ref)
    threads = [threading.Thread(target=lambda a=a: a._learn(a._targets())) for a in learners]
    for t in threads:
        t.start()
    ref._learn(ref._targets())
    for t in threads:
        t.join()
    assert torch.equal(_vector(learners[0]), _vector(learners[1]))
    assert (_vector(ref) - before).abs().max() > 1e-4      # the update moved the parameters
    # the applied (averaged) gradient is the gradient of the masked mean over all data
    for p_learner, p_ref in zip(learners[0].params, ref.params):
        assert torch.allclose(p_learner.grad, p_ref.grad, rtol=1e-4, atol=1e-7)
    assert torch.allclose(_vector(learners[0]), _vector(ref), rtol=0, atol=1e-6)
    for a in (ref, *learners):
        a.dist = None
        a.stop()


def test_num_minibatches_is_checked_against_each_learners_batch():
    """With L data-parallel learners each splits its own T*N/L transitions into
    minibatches: a count that fits the whole batch but not a learner's share is
    a one-line config error, not an empty minibatch inside torch."""
    cfg = FastPPOConfig().environment("CartPole", num_envs=8).training(rollout_length=2, num_minibatches=16)
    cfg.validate()
    cfg.learners(num_learners=2)
    with pytest.raises(ValueError, match=r"`num_minibatches` = 16 exceeds each learner's batch .* = 8; "
                                         r"allowed: <= 8"):
        cfg.validate()


def test_a_skipped_update_is_discarded_by_every_learner():
    # nonfinite_guard='skip' rolled back learner 0 only: learner 1 kept the update and the
    # group applied the same averaged gradients to different parameters from then on
    cfg = (FastPPOConfig().environment("CartPole", num_envs=8)
           .training(rollout_length=8, num_minibatches=2, num_epochs=1,
                     nonfinite_guard="skip", nonfinite_guard_max_abs=1e-9)   # every loss "explodes"
           .learners(num_learners=2, num_cpus_per_learner=0).debugging(seed=0))
    algo = cfg.build_algo()
    try:
        before = _vector(algo)
        r = algo.train()
        assert r["guard"]["skipped_updates"] == 1
        assert torch.equal(_vector(algo), before)                        # learner 0 rolled back
        assert torch.equal(algo._dp_group.parameter_vectors()[0], before)  # ... and learner 1 with it
    finally:
        algo.stop()


def test_observation_statistics_pool_every_learners_decorrelation():
    # each learner decorrelates its envs at build, before the group exists; the join's
    # broadcast must pool every learner's statistics, not keep learner 0's (80 of the 160 observations)
    cfg = (FastPPOConfig().environment("CartPole", num_envs=16).training(rollout_length=8, decorrelate_steps=10)
           .learners(num_learners=2, num_cpus_per_learner=0).debugging(seed=0))
    algo = cfg.build_algo()
    try:
        assert algo.normalize_obs
        assert algo.module.obs_norm.count.item() == pytest.approx(10 * 16, abs=1e-3)
        assert torch.equal(_vector(algo), algo._dp_group.parameter_vectors()[0])   # identical after the join
        algo.train()
        assert algo.module.obs_norm.count.item() == pytest.approx(10 * 16 + 8 * 16, abs=1e-3)
    finally:
        algo.stop()
