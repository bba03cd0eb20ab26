"""PQL's process back-end: the learners run in processes of their own and
everything per step moves through shared memory. Learning Pendulum from a
fixed seed with the ratios held, checkpoint/restore through the learner
processes, live hyperparameters reaching them, a learner's failure surfacing
with its traceback (also when a command was already on its way), both start methods, the seqlock's torn-read rule, the wake-up signal between the processes, and the
CPU-only rule at validation."""
import math

import pytest
import torch

from rllib_fast.algorithms.pql import PQLConfig
from rllib_fast.algorithms.pql.process_backend import SharedWeights, Signal
from rllib_fast.presets import preset

THRESHOLD = -250.0
FAST = {k: v for k, v in preset("PQL", "Pendulum").items() if k != "num_envs"}


def _config(n=64, **kw):
    return (PQLConfig().environment("Pendulum", num_envs=n, env_device="cpu")
            .training(**{**FAST, "backend": "process", **kw}).debugging(seed=0).evaluation(evaluation_duration=10))


def _small(**kw):
    return _config(n=16, hidden_sizes=[32], batch_size=64, steps_per_iteration=20, **kw)


def _flat(tensors):
    return torch.cat([t.detach().flatten().double() for t in tensors])


def test_process_backend_learns_pendulum_with_the_ratios_held():
    algo = _config().build_algo()
    procs = list(algo.backend.procs.values())
    try:
        assert algo.v is None and algo.p is None                       # nothing learns in this process
        assert all(p.is_alive() and p.pid != __import__("os").getpid() for p in procs)
        best = -math.inf
        for _ in range(40):
            algo.train()
            best = max(best, algo.evaluate()["env_runners"]["episode_return_mean"])
            if best >= THRESHOLD:
                break
        r = algo.train()["learners"]["default_policy"]
        assert best >= THRESHOLD
        assert r["beta_av_achieved"] == pytest.approx(8.0, rel=0.1)
        assert r["beta_pv_achieved"] == pytest.approx(2.0, rel=0.1)
        assert math.isfinite(r["critic_loss"]) and r["num_critic_updates"] > 0
    finally:
        algo.stop()
    for p in procs:
        p.join(timeout=10)
        assert not p.is_alive()


def test_process_backend_checkpoint_restores_the_learner_processes(tmp_path):
    cfg = _small(checkpoint_replay=True)
    algo = cfg.build_algo()
    try:
        for _ in range(3):
            algo.train()
        algo.save_to_path(str(tmp_path))
        comps = algo.backend.state_components()
        v, p = comps["v"].state_dict(), comps["p"].state_dict()
        saved = {"actor": _flat(algo.actor.policy.parameters()), "counts": dict(algo.controller.counts)}
        assert v["updates"] > 0 and p["updates"] > 0
        it = algo.training_iteration
    finally:
        algo.stop()
    fresh = cfg.build_algo()
    try:
        fresh.restore_from_path(str(tmp_path))
        comps = fresh.backend.state_components()
        v2, p2 = comps["v"].state_dict(), comps["p"].state_dict()
        assert torch.equal(_flat(fresh.actor.policy.parameters()), saved["actor"])
        assert all(torch.equal(v2["critic"][k], v["critic"][k]) for k in v["critic"])
        assert all(torch.equal(p2["policy"][k], p["policy"][k]) for k in p["policy"])
        assert v2["updates"] == v["updates"] and fresh.controller.counts == saved["counts"]
        assert torch.equal(v2["replay"]["data"]["obs"], v["replay"]["data"]["obs"])
        fresh.train()
        assert fresh.training_iteration == it + 1
        assert fresh.controller.counts["critic"] > saved["counts"]["critic"]
    finally:
        fresh.stop()


def test_live_learning_rate_reaches_the_learner_processes():
    algo = _small().build_algo()
    try:
        algo.train()
        algo.set_lr(1.25e-4)
        algo.train()
        opt = algo.backend.state_components()["v"].state_dict()["optimizer"]
        assert opt["param_groups"][0]["lr"] == pytest.approx(1.25e-4)
    finally:
        algo.stop()


def test_learner_failure_surfaces_with_its_traceback(monkeypatch):
    from rllib_fast.algorithms.pql import components

    def boom(self):
        raise ValueError("critic update exploded")

    monkeypatch.setattr(components.CriticLearner, "update", boom)   # inherited by the forked learner
    algo = _small(process_start_method="fork").build_algo()
    try:
        with pytest.raises(RuntimeError, match="critic update exploded"):
            for _ in range(20):
                algo.train()
    finally:
        algo.stop()


def test_a_failed_learner_stays_until_its_report_is_read(monkeypatch):
    """A command already on its way when a learner fails must not reset the pipe and lose the
    report (seen under load: ConnectionResetError instead of the traceback): the failed
    learner keeps reading until the trial process has read its report and says stop."""
    import time

    from rllib_fast.algorithms.pql import components
    from rllib_fast.algorithms.pql.process_backend import ROLE_INDEX

    def boom(self):
        raise ValueError("critic update exploded")

    monkeypatch.setattr(components.CriticLearner, "update", boom)
    algo = _small(process_start_method="fork").build_algo()
    be = algo.backend
    try:
        t0 = time.monotonic()
        while not be.learners_ready() and time.monotonic() - t0 < 60:   # booted (a busy machine boots slowly),
            time.sleep(0.05)                                             # so resume() starts them now
        be.resume()
        for _ in range(20):                                  # steps until the critic has data and fails
            be.push(*_one_step(algo))
            if int(be.shared.failed[ROLE_INDEX["critic"]]):
                break
        t0 = time.monotonic()
        while not int(be.shared.failed[ROLE_INDEX["critic"]]) and time.monotonic() - t0 < 30:
            time.sleep(0.05)
        be._send("critic", "pause")                          # on its way after the failure
        time.sleep(0.5)
        assert be.procs["critic"].is_alive()                 # still there: nothing unread when it exits
        with pytest.raises(RuntimeError, match="critic update exploded"):
            be._recv("critic")
    finally:
        algo.stop()
    assert not be.procs                                      # stopped and joined


def _one_step(algo):
    batch = algo._env_step()
    while batch is None:
        batch = algo._env_step()
    return batch, algo._moments_copy()


def test_spawned_learners_train_and_deliver_weights():
    """Spawned learners import torch and rllib_fast first (seconds): the Actor keeps stepping meanwhile."""
    import time

    algo = _small(process_start_method="spawn").build_algo()
    try:
        before = _flat(algo.actor.policy.parameters())
        t0, updates = time.monotonic(), 0
        while updates < 100 and time.monotonic() - t0 < 120:
            updates += algo.train()["learners"]["default_policy"]["num_critic_updates"]
        assert updates >= 100
        assert not torch.equal(_flat(algo.actor.policy.parameters()), before)   # the P-learner's policy arrived
    finally:
        algo.stop()


def test_shared_weights_never_load_a_torn_copy():
    src, dst = torch.nn.Linear(3, 2), torch.nn.Linear(3, 2)
    box = SharedWeights(src)
    assert box.read_into(dst, 0) == 0                      # version 0: nothing newer than what was seen
    with torch.no_grad():
        src.weight.fill_(1.0)
    box.write(src)
    box.seq += 1                                           # a writer is mid-copy: odd sequence
    assert box.read_into(dst, 0) == 0 and not torch.equal(dst.weight, src.weight)
    box.seq += 1
    assert box.read_into(dst, 0) == 2 and torch.equal(dst.weight, src.weight)
    assert box.read_into(dst, 2) == 2                      # nothing newer


def test_process_backend_refuses_a_gpu_device_at_validation():
    with pytest.raises(ValueError, match=r"backend='process'.*v_learner_device.*allowed"):
        _config(v_learner_device="cuda:0").validate()
    with pytest.raises(ValueError, match=r"process_start_method"):
        _config(process_start_method="vfork").validate()


def test_auto_backend_is_processes_on_a_cpu_and_threads_on_a_gpu():
    cfg = PQLConfig().environment("Pendulum", num_envs=8, env_device="cpu")
    assert cfg.backend == "auto" and cfg.resolved_backend() == "process"
    assert cfg.copy().environment(env_device="cuda:0").resolved_backend() == "thread"
    assert cfg.copy().training(v_learner_device="cuda:1").resolved_backend() == "thread"
    assert cfg.copy().training(backend="thread").resolved_backend() == "thread"


@pytest.mark.parametrize("method", ["fork", "spawn"])
def test_a_signal_posted_in_another_process_wakes_the_waiter_and_drain_forgets_old_posts(method):
    import multiprocessing as mp
    import time

    ctx = mp.get_context(method)
    sig = Signal(ctx)
    sig.post()
    sig.post()
    sig.drain()                                   # old posts are forgotten: the wait times out
    t0 = time.monotonic()
    sig.wait(0.05)
    assert time.monotonic() - t0 >= 0.04
    proc = ctx.Process(target=_post_after, args=(sig, 0.2))
    proc.start()
    t0 = time.monotonic()
    sig.wait(10.0)                                # woken by the other process's post, not the timeout
    assert time.monotonic() - t0 < 5.0
    proc.join(10)
    assert proc.exitcode == 0


def _post_after(sig, delay):
    import time

    time.sleep(delay)
    sig.post()
