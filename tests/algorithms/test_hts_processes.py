"""HTS-RL with process executors (``executor_processes=True``): every
executor's env steps in its own simulator process (``envs/parallel.py``).

One test, because starting a spawned simulator costs seconds (it imports
torch): lag exactly one with processes, bitwise-identical parameters for two
runs from one seed, and ``algo.stop()`` leaves no simulator process behind."""
import psutil
import torch

from rllib_fast.algorithms.hts import HTSA2CConfig

# interpreter-wide helpers that multiprocessing starts once and keeps (not owned by an env)
_MP_HELPERS = ("multiprocessing.resource_tracker", "multiprocessing.forkserver")


def _children() -> set:
    out = set()
    for c in psutil.Process().children(recursive=True):
        try:
            if not any(h in " ".join(c.cmdline()) for h in _MP_HELPERS):
                out.add(c.pid)
        except psutil.NoSuchProcess:
            pass
    return out


def _run(seed: int):
    before = _children()
    algo = (HTSA2CConfig().environment("CartPole", num_envs=4)
            .training(num_executors=2, sync_interval=8, rounds_per_iteration=2, decorrelate_steps=10,
                      executor_processes=True)
            .debugging(seed=seed).build_algo())
    try:
        sims = {pid for part in algo.env.parts for pid in part.worker_pids}
        assert len(sims) == 2 and sims <= _children() - before      # one simulator process per executor
        results = [algo.train() for _ in range(2)]
        params = torch.cat([p.detach().flatten() for p in algo.module.parameters()])
        lags = list(algo.lag_history)
        batch = {k: v.clone() for k, v in algo.buffers.read.data.items()}
    finally:
        algo.stop()
    # stop() joined the simulators: no child of this process outlives the algorithm
    assert not any(psutil.pid_exists(pid) and psutil.Process(pid).status() != psutil.STATUS_ZOMBIE for pid in sims)
    assert _children() - before == set()
    return params, lags, results, batch


def test_process_executors_lag_one_deterministic_and_clean_shutdown():
    p1, lags, results, batch1 = _run(seed=7)
    assert len(lags) == 3 and all(learner - behaviour == 1 for learner, behaviour in lags)   # 4 rounds, 3 learned
    assert results[-1]["hts"]["policy_lag"] == 1.0 and results[-1]["hts"]["policy_lag_max"] == 1.0
    assert results[-1]["num_env_steps_sampled_lifetime"] >= 4 * 8 * 4
    p2, lags2, _, batch2 = _run(seed=7)
    assert lags2 == lags
    assert torch.equal(p1, p2)                                       # bitwise, across two process-backed runs
    for k in batch1:
        assert torch.equal(batch1[k], batch2[k]), k
