"""FastPPO's ``learn_while_stepping``: each rollout's update runs during the next
rollout, a few minibatch steps while the simulator (in its own process)
computes each batched env step (``rllib_fast/algorithms/ppo/overlap.py``)."""
import math

import pytest
import torch

from rllib_fast.algorithms.hts import HTSPPOConfig
from rllib_fast.algorithms.ppo import FastPPO, FastPPOConfig
from rllib_fast.algorithms.ppo.overlap import OverlapSchedule
from rllib_fast.envs import make
from rllib_fast.envs.parallel import ParallelVecEnv


def _config(**kw):
    return (FastPPOConfig().environment("CartPole", num_envs=16)
            .training(learn_while_stepping=True, rollout_length=8, num_epochs=2, num_minibatches=4, **kw)
            .debugging(seed=0))


class _Recorder:
    """A stand-in for PPOUpdate.learn_steps that records when its steps run."""

    def __init__(self, total, log):
        self.total, self.log = total, log

    def learn_steps(self, batch):
        for i in range(self.total):
            self.log.append(("learn", i))
            yield
        return {"done": 1.0}


def _shadows(sched, total):
    """How many minibatch steps the schedule runs in the shadow of each of 8 env steps."""
    log = []
    sched.begin(_Recorder(total, log), batch=None, total_steps=total)
    for t in range(8):
        log.append(("env", t))
        sched.work(t)
    assert sched.finish() == {"done": 1.0}
    assert [i for kind, i in log if kind == "learn"] == list(range(total))   # all, in order, none twice
    counts = []
    for kind, _ in log:
        if kind == "env":
            counts.append(0)
        else:
            counts[-1] += 1
    return counts


def test_front_loaded_schedule_finishes_the_update_in_the_first_shadows():
    assert _shadows(OverlapSchedule(horizon=8, per_env_step=4), 10) == [4, 4, 2, 0, 0, 0, 0, 0]
    # 1 per shadow; the 2 left over run after the rollout (counted with the last step here)
    assert _shadows(OverlapSchedule(horizon=8, per_env_step=1), 10) == [1] * 7 + [3]


def test_schedule_spreads_every_minibatch_step_over_the_rollout():
    assert _shadows(OverlapSchedule(horizon=8), 20) == [2, 3, 2, 3, 2, 3, 2, 3]
    sched = OverlapSchedule(horizon=8)
    assert not sched.active and sched.finish() is None


def test_the_simulator_steps_in_its_own_process_and_each_update_runs_inside_the_next_rollout():
    algo = _config(learn_steps_per_env_step=4).build_algo()
    try:
        assert isinstance(algo.env, ParallelVecEnv)
        calls = []
        step_async, step_wait = algo.env.step_async, algo.env.step_wait
        learn_steps = algo.update_rule.learn_steps

        def spy_steps(batch):
            for _ in learn_steps(batch):
                calls.append("learn")
                yield
        algo.env.step_async = lambda a: (calls.append("async"), step_async(a))[1]
        algo.env.step_wait = lambda: (calls.append("wait"), step_wait())[1]
        algo.update_rule.learn_steps = spy_steps

        first = algo.train()
        assert "learn" not in calls and algo.pending is not None           # nothing to learn yet
        assert first.get("num_env_steps_trained_lifetime", 0) == 0
        calls.clear()
        algo.train()
        # every learning step happens between a step's start and its wait
        depth = 0
        for c in calls:
            depth += {"async": 1, "wait": -1}.get(c, 0)
            if c == "learn":
                assert depth == 1
        assert calls.count("learn") == 2 * 4 and calls.count("async") == 8
        assert calls[:calls.index("wait")].count("learn") == 4   # learn_steps_per_env_step: 4 in the first shadow
    finally:
        algo.stop()


def _first_update(**kw):
    """Parameters after the first update and the order of env-step waits and learning steps."""
    algo = _config(**kw).build_algo()
    try:
        calls = []
        step_wait, learn_steps = algo.env.step_wait, algo.update_rule.learn_steps

        def spy_steps(batch):
            for _ in learn_steps(batch):
                calls.append("learn")
                yield
        algo.env.step_wait = lambda: (calls.append("wait"), step_wait())[1]
        algo.update_rule.learn_steps = spy_steps
        for _ in range(2):
            algo.train()
        kind = type(algo.env._res.procs[0]).__name__
        return {k: v.clone() for k, v in algo.module.state_dict().items()}, calls, kind
    finally:
        algo.stop()


def test_by_default_the_simulator_is_forked_the_update_fits_the_first_shadow_and_spawn_gives_the_same_run():
    forked, calls, kind = _first_update()
    assert kind == "ForkProcess"          # simulator_start_method='auto' on Linux
    # learn_steps_per_env_step=20 >= the 2 x 4 update: all of it in the first env step's shadow
    assert calls[:calls.index("wait", calls.index("learn"))].count("learn") == 8
    spawned, _, kind = _first_update(simulator_start_method="spawn")
    assert kind == "SpawnProcess"
    for k, v in forked.items():           # the start method changes how fast it starts, not the run
        assert torch.equal(v, spawned[k]), k


def test_learns_cartpole():
    algo = (FastPPOConfig().environment("CartPole", num_envs=64)
            .training(learn_while_stepping=True).debugging(seed=0).build_algo())
    try:
        best = -math.inf
        for _ in range(60):
            ret = algo.train()["env_runners"].get("episode_return_mean")
            best = max(best, ret if ret is not None and not math.isnan(ret) else -math.inf)
            if best >= 475:
                break
        assert best >= 475
    finally:
        algo.stop()


def test_in_process_restore_continues_exactly(tmp_path):
    algo = _config().build_algo()
    try:
        for _ in range(3):
            algo.train()
        assert algo.pending is not None
        algo.save_to_path(str(tmp_path / "ckpt"))
        ref = algo.train()
        ref_params = {k: v.clone() for k, v in algo.module.state_dict().items()}
    finally:
        algo.stop()
    restored = FastPPO.from_checkpoint(str(tmp_path / "ckpt"))
    try:
        out = restored.train()
        for k, v in restored.module.state_dict().items():
            assert torch.equal(v, ref_params[k]), k
        assert out["env_runners"]["episode_return_mean"] == ref["env_runners"]["episode_return_mean"]
    finally:
        restored.stop()


def test_bad_settings_fail_at_validation_in_one_line():
    with pytest.raises(ValueError, match="`learn_while_stepping` = True is FastPPO's"):
        HTSPPOConfig().environment("CartPole", num_envs=16).training(learn_while_stepping=True).validate()
    with pytest.raises(ValueError, match="needs one learner"):
        _config().learners(num_learners=2).validate()


def test_a_source_stepping_in_this_process_is_refused_with_the_key():
    cfg = (FastPPOConfig().environment(lambda ctx: make("CartPole", num_envs=ctx["num_envs"], seed=ctx["seed"]),
                                       num_envs=16)
           .training(learn_while_stepping=True).debugging(seed=0))
    with pytest.raises(ValueError, match="learn_while_stepping"):
        cfg.build_algo()


# -- kl_reference: what the adaptive lr's KL is measured from ---------------------------
def test_kl_reference_auto_is_update_start_only_when_learning_while_stepping():
    sync = FastPPOConfig().environment("CartPole", num_envs=8).training(rollout_length=8).debugging(seed=0).build_algo()
    algo = _config().build_algo()
    try:
        assert sync.update_rule.settings.kl_reference == "behaviour"
        assert algo.update_rule.settings.kl_reference == "update_start"
    finally:
        sync.stop()
        algo.stop()
    assert HTSPPOConfig().kl_reference == "auto"   # lagged by design: 'auto' keeps its behaviour KL


def test_kl_reference_auto_leaves_a_synchronous_run_bit_identical():
    def run(**kw):
        algo = (FastPPOConfig().environment("Pendulum", num_envs=8)
                .training(rollout_length=16, num_epochs=2, num_minibatches=2, **kw).debugging(seed=5).build_algo())
        for _ in range(3):
            algo.train()
        out = [p.detach().clone() for p in algo.module.parameters()], algo.update_rule.optimizer.param_groups[0]["lr"]
        algo.stop()
        return out

    (a, lr_a), (b, lr_b) = run(), run(kl_reference="behaviour")
    assert lr_a == lr_b
    for x, y in zip(a, b):
        torch.testing.assert_close(x, y, rtol=0, atol=0)


def test_update_start_kl_reads_this_updates_movement_not_the_acting_lag():
    """A batch that acted with older parameters (as a learn_while_stepping rollout's first
    steps do): measured from the behaviour, the KL of an update that barely moves the policy is
    the lag; measured from the update's start it is ~0, so the adaptive lr is not cut for it."""
    import dataclasses

    algo = (FastPPOConfig().environment("Pendulum", num_envs=16)
            .training(rollout_length=16, num_epochs=1, num_minibatches=2, lr=1e-9).debugging(seed=2).build_algo())
    try:
        algo._rollout()
        batch = algo._batch(algo._targets())
        gen = torch.Generator().manual_seed(0)
        with torch.no_grad():   # the parameters move on after acting: the batch is one update stale
            for p in algo.module.pi.parameters():
                p.add_(0.1 * torch.randn(p.shape, generator=gen))
        rule = algo.update_rule
        kls = {}
        for ref in ("behaviour", "update_start"):
            rule.settings = dataclasses.replace(rule.settings, kl_reference=ref)
            kls[ref] = float(rule.learn(batch)["mean_kl_loss"])
        assert kls["behaviour"] > 1e-3, kls
        assert kls["update_start"] < 1e-6, kls
    finally:
        algo.stop()


def test_the_shadow_meter_reports_how_busy_each_process_was():
    algo = _config().build_algo()
    try:
        before = algo.env.worker_activity()
        for _ in range(3):
            result = algo.train()
        after = algo.env.worker_activity()
        # the simulator's counters grow with its work (wall >= 0, CPU > 0 after 24 steps)
        assert (after["busy_s"] > before["busy_s"]).all() and (after["cpu_s"] > before["cpu_s"]).all()
        meter = result["timers"]["overlap"]
        assert set(meter) == {"simulator_busy_fraction", "learner_wait_fraction", "update_fraction", "cores"}
        # fractions of the iteration's wall time; two processes use at most ~2 cores each
        for key in ("simulator_busy_fraction", "learner_wait_fraction", "update_fraction"):
            assert 0.0 <= meter[key] <= 1.0 + 1e-6, (key, meter[key])
        assert meter["update_fraction"] > 0.0 and meter["cores"] > 0.0
    finally:
        algo.stop()


def test_the_shadow_meter_reports_nothing_for_a_simulator_without_counters():
    from rllib_fast.algorithms.ppo.overlap import ShadowMeter

    meter = ShadowMeter(env=object())     # an env with step_async/step_wait but no worker_activity
    meter.start()
    assert meter.stop() == {}
