"""GPU readiness on CPU: the launch/sync counter counts what it claims, and no
algorithm syncs the host inside its per-step rollout loop or its minibatch
(gradient update) loop.

How "inside a loop" is decided: each algorithm is counted at a base shape, at
twice the rollout length and at twice the updates (``benchmarks/gpu_proxy.py``
``phase_counts``); a sync in the rollout loop makes the per-iteration count
grow with the rollout length, one in the minibatch loop with the updates.
Syncs once per iteration (RLlib's metric reduction, the NaN guard, logging)
stay allowed. The failure message names the call sites.
"""
import os
import sys
import threading

import pytest
import torch

BENCH = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "benchmarks")
# the counter is a benchmark tool (benchmarks/launch_count.py); imported under its own name, so
# gpu_proxy's `from launch_count import LaunchCounter` below finds this same module
sys.path.insert(0, BENCH)
try:
    from launch_count import LaunchCounter  # noqa: E402
finally:
    sys.path.remove(BENCH)


@pytest.fixture(scope="module")
def gp():
    sys.path.insert(0, BENCH)
    try:
        import gpu_proxy

        yield gpu_proxy
    finally:
        sys.path.remove(BENCH)


def _toy(x, w):
    return torch.relu(x @ w + 1).sum()


# ------------------------------------------------------------------ the counter
def test_counter_counts_eager_kernels_without_views():
    x, w = torch.randn(8, 4), torch.randn(4, 3)
    with LaunchCounter() as lc:
        with lc.recording():
            _toy(x.t().t(), w.view(4, 3))   # views launch nothing
    assert lc.by_op("kernel") == {"mm": 1, "add": 1, "relu": 1, "sum": 1}
    assert lc.syncs() == 0


def test_counter_sees_inside_compiled_code():
    """Inductor fuses add + relu + sum into one generated kernel and leaves the
    matmul to an extern call: 2 launches where eager has 4."""
    torch._dynamo.reset()
    f = torch.compile(_toy, dynamic=False)
    x, w = torch.randn(8, 4), torch.randn(4, 3)
    with LaunchCounter() as lc:
        f(x, w)   # compiles outside the recording
        with lc.recording():
            f(x, w)
    assert lc.by_op("kernel") == {"mm": 1}
    assert sum(lc.by_op("compiled").values()) == 1
    assert lc.kernels() == 2
    # a later counter sees the same (cached, already wrapped) kernels, and a module
    # inductor loads while recording (a recompile for another shape) is counted too
    with LaunchCounter() as lc2:
        with lc2.recording():
            f(x, w)
            f(x[:4], w)
    assert sum(lc2.by_op("compiled").values()) == 2 and lc2.kernels() == 4
    torch._dynamo.reset()


def test_counter_counts_host_syncs_in_every_thread():
    x = torch.randn(8)
    with LaunchCounter() as lc:
        with lc.recording():
            float(x.sum())           # _local_scalar_dense
            bool(x.sum() > 0)        # is_nonzero -> _local_scalar_dense, once
            x[x > 0]                 # boolean-mask index: a data-dependent shape
            x.tolist(), x.cpu(), x.numpy()
            t = threading.Thread(target=lambda: x.max().item())
            t.start()
            t.join()
    assert lc.syncs("MainThread") == 6
    assert lc.syncs() == 7
    assert all("test_gpu_proxy.py" in site for site in lc.summary()["sync_sites"])


def test_counter_does_not_count_host_step_counters_or_decomposed_ops_twice():
    net = torch.nn.Linear(3, 2)
    net(torch.randn(4, 3)).sum().backward()
    opt = torch.optim.Adam(net.parameters())   # foreach=None: steps are host tensors on a GPU too
    with LaunchCounter() as lc:
        with lc.recording():
            opt.step()
            with torch.inference_mode():
                bool(torch.isnan(torch.ones(2)).any())
    assert lc.syncs() == 1
    assert "_foreach_addcdiv_" in lc.by_op("kernel")   # counted as on a GPU: one foreach kernel


# ------------------------------------------------------------------ no syncs in the hot loops
SMALL = {
    "fastppo": dict(num_envs=16, steps=4, epochs=2, minibatches=2),
    "htsppo": dict(num_envs=16, steps=4, epochs=2, minibatches=2),
    "fastdqn": dict(num_envs=16, steps=4, minibatches=4, extra=dict(batch_size=16, learning_starts=0)),
    "pql": dict(num_envs=16, steps=4, minibatches=4,
                extra=dict(batch_size=32, learning_starts=32, warmup_steps=2, hidden_sizes=[32, 32])),
}


@pytest.mark.parametrize("arm", sorted(SMALL))
def test_no_host_sync_in_rollout_or_minibatch_loop(gp, arm):
    torch.manual_seed(0)
    shape = gp.Shape(**SMALL[arm])
    counts = gp.phase_counts(gp.ARMS[arm](), shape, warmup=3)
    split = counts["syncs_split"]
    sites = [v["sync_sites"] for v in counts["variants"]]
    assert abs(split["per_step"]) < 1e-6, f"{arm}: {split['per_step']} syncs per rollout step: {sites}"
    assert abs(split["per_update"]) < 1e-6, f"{arm}: {split['per_update']} syncs per update: {sites}"
    if arm == "pql":   # its learner threads run nothing but the update loop
        learner_syncs = {t: c["syncs"] for t, c in counts["by_thread"].items() if t.startswith("pql-")}
        assert learner_syncs and not any(learner_syncs.values()), (learner_syncs, sites)


# ------------------------------------------------------------------ one graph each (what CUDA graphs need)
# (the ``aot_eager`` fixture: tests/conftest.py)
@pytest.mark.parametrize("env", ["Pendulum", "CartPole"])
def test_act_step_and_whole_minibatch_step_are_one_graph_each(aot_eager, env):
    from rllib_fast.algorithms.onpolicy.batch import OnPolicyBatch
    from rllib_fast.algorithms.ppo import FastPPOConfig
    from rllib_fast.algorithms.onpolicy.whole_step import WholeGradientStep
    from rllib_fast.core.compile import graph_breaks

    algo = FastPPOConfig().environment(env, num_envs=8).training(
        rollout_length=8, num_epochs=2, num_minibatches=2, hidden_sizes=[32], compile=True).debugging(seed=1).build_algo()
    algo.train()
    # static shapes, lr a tensor: later iterations (adaptive-KL lr changes included) compile nothing new
    # (checked before graph_breaks: dynamo's explain resets the compiled code)
    graphs = torch._dynamo.utils.counters["stats"]["unique_graphs"]
    lrs = {algo.train()["learners"]["default_policy"]["curr_lr"] for _ in range(3)}
    assert torch._dynamo.utils.counters["stats"]["unique_graphs"] == graphs, lrs
    rule = algo.update_rule
    assert isinstance(rule.whole_step, WholeGradientStep)   # the minibatch step runs as one compiled function
    assert graph_breaks(algo._act_step, algo.obs) == 0
    st, B = algo.storage, algo.horizon * algo.env.num_envs
    batch = OnPolicyBatch(st.flat("obs"), st.flat("actions"), st.flat("logp"), st.flat(algo.critic_key),
                          torch.randn(B), torch.randn(B), torch.randn(B), None)
    assert rule.whole_step.graph_breaks(batch, torch.randperm(B)[:B // 2], None) == 0
    algo.stop()


def test_whole_step_only_where_it_reimplements_the_step():
    """Eager keeps the plain step; A2C (RMSprop) and HTSA2C (a before_apply hook)
    keep the compiled loss with an eager backward and optimizer."""
    from rllib_fast.algorithms.a2c import FastA2CConfig
    from rllib_fast.algorithms.hts import HTSA2CConfig, HTSPPOConfig
    from rllib_fast.algorithms.ppo import FastPPOConfig

    def rule(cls, compile):
        algo = cls().environment("CartPole", num_envs=4).training(
            rollout_length=4, hidden_sizes=[8], compile=compile).debugging(seed=0).build_algo()
        r = algo.update_rule
        algo.stop()
        return r

    assert rule(FastPPOConfig, False).whole_step is None
    assert rule(HTSPPOConfig, True).whole_step is not None
    assert rule(FastA2CConfig, True).whole_step is None
    assert rule(HTSA2CConfig, True).whole_step is None


@pytest.mark.parametrize("cls_name", ["FastPPOConfig", "FastA2CConfig"])
def test_whole_step_learns_what_the_eager_step_learns(aot_eager, cls_name):
    """The whole compiled step (its own Adam on the optimizer's state) against
    the eager step (fused Adam), adaptive-KL lr changes included (PPO)."""
    from rllib_fast.algorithms import a2c, ppo

    cls = getattr(ppo, cls_name, None) or getattr(a2c, cls_name)
    extra = {"optimizer": "adam"} if cls_name == "FastA2CConfig" else {"num_epochs": 2, "num_minibatches": 2}

    def run(compile):
        algo = cls().environment("Pendulum", num_envs=8).training(
            rollout_length=8, hidden_sizes=[16], compile=compile, **extra).debugging(seed=2).build_algo()
        for _ in range(3):
            algo.train()
        assert (algo.update_rule.whole_step is not None) == bool(compile)
        out = torch.cat([p.detach().flatten() for p in algo.module.parameters()])
        lr = algo.optimizer.param_groups[0]["lr"]
        algo.stop()
        return out, lr

    (eager, lr_e), (comp, lr_c) = run(False), run(True)
    torch.testing.assert_close(comp, eager, rtol=1e-4, atol=1e-5)
    assert lr_c == lr_e
