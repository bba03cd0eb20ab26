"""Process-isolated simulators (rllib_fast/envs/isolated.py): the VecTask stand-in
served by a bare worker process through shared memory (CPU; CUDA IPC needs a GPU)."""
import rllib_fast  # noqa: F401  (registers everything first)

import sys

import pytest
import torch

from rllib_fast.envs import make, validate_env
from rllib_fast.envs.isolated import IsolatedTask, IsolatedWorkerError

TASK = "rllib_fast.envs.standins.vectask:PointReachTask"


def env_pair(n=6, seed=3, reset_in="pre_physics_step"):
    kw = dict(num_envs=n, seed=seed, task_class=TASK, cfg={"env": {"episodeLength": 7, "resetIn": reset_in}})
    return make("isaacgym:PointReach", isolated=True, **kw), make("isaacgym:PointReach", isolated=False, **kw)


def test_isolated_round_trips_tensors_and_matches_in_process():
    iso, local = env_pair()
    try:
        assert iso.task.alive and iso.num_envs == 6
        assert iso.single_observation_space == local.single_observation_space
        assert iso.single_state_space == local.single_state_space and iso.max_episode_steps == 7
        # (the in-process task draws reset noise from this process's global torch RNG, so
        # nothing else may draw from it in between: actions use their own generator)
        torch.testing.assert_close(iso.reset(), local.reset(), rtol=0, atol=0)
        gen = torch.Generator().manual_seed(0)
        held = []
        for _ in range(20):  # crosses several resets
            a = torch.rand((6, 2), generator=gen) * 4 - 2
            s_iso, s_loc = iso.step(a), local.step(a)
            for f in ("obs", "reward", "terminated", "truncated", "final_obs", "valid"):
                torch.testing.assert_close(getattr(s_iso, f), getattr(s_loc, f), rtol=0, atol=0)
            for k in ("states", "true_objective"):
                torch.testing.assert_close(s_iso.extras[k], s_loc.extras[k], rtol=0, atol=0)
            torch.testing.assert_close(iso.scalar_extras["consecutive_successes"],
                                       local.scalar_extras["consecutive_successes"], rtol=0, atol=0)
            held.append((s_iso, s_iso.obs.clone(), s_iso.reward.clone()))
        # the worker's shared buffers are overwritten each step; what we returned is not
        for s, obs, rew in held:
            assert torch.equal(s.obs, obs) and torch.equal(s.reward, rew)
        # actions arrive intact (clamped by the task's clipActions = 1)
        iso.step(torch.full((6, 2), 0.25))
        assert torch.equal(iso.task.call("__getattribute__", "actions"), torch.full((6, 2), 0.25))
        validate_env(iso)
    finally:
        iso.close()
        local.close()
    assert not iso.task.alive


def test_isolated_allows_several_sims_and_reseeds_on_reset():
    a = make("isaacgym:PointReach", num_envs=3, seed=1, task_class=TASK, isolated=True)
    b = make("isaacgym:PointReach", num_envs=3, seed=1, task_class=TASK, isolated=True)  # e.g. an eval env
    try:
        torch.testing.assert_close(a.reset(seed=5), b.reset(seed=5), rtol=0, atol=0)
        assert not torch.equal(a.reset(seed=5), b.reset(seed=6))
        a.randomize_episode_progress()
        ends = [int(a.step(torch.zeros(3, 2)).truncated.sum()) for _ in range(70)]
        assert sum(ends) >= 3
    finally:
        a.close()
        b.close()


def test_preimports_come_before_torch(tmp_path):
    out = tmp_path / "probe.txt"
    (tmp_path / "order_probe.py").write_text(
        f"import sys\nopen({str(out)!r}, 'w').write(str('torch' in sys.modules))\n")
    task = IsolatedTask({"kind": "class", "task_class": TASK, "num_envs": 2, "rl_device": "cpu",
                         "sim_device": "cpu", "seed": 0}, preimport=("order_probe",),
                        sys_path=[str(tmp_path), *sys.path])
    try:
        assert task.num_envs == 2 and task.max_episode_length == 64
    finally:
        task.close()
    # the probe (standing for `import isaacgym`) ran before the worker imported torch
    assert out.read_text() == "False"


def test_worker_failures_are_clear_errors():
    with pytest.raises(IsolatedWorkerError, match="(?s)failed to build the task.*resetIn"):
        make("isaacgym:PointReach", num_envs=2, task_class=TASK, isolated=True,
             cfg={"env": {"resetIn": "sometimes"}})
    with pytest.raises(IsolatedWorkerError, match="(?s)simulator process.*ModuleNotFoundError"):
        IsolatedTask({"kind": "class", "task_class": TASK, "num_envs": 2, "rl_device": "cpu",
                      "sim_device": "cpu"}, preimport=("isaacgym",))
    env = make("isaacgym:PointReach", num_envs=2, task_class=TASK, isolated=True)
    env.reset()
    env.task._proc.kill()
    env.task._proc.wait()
    with pytest.raises(IsolatedWorkerError, match="simulator process died"):
        env.step(torch.zeros(2, 2))
    env.close()


def test_worker_side_modules_keep_python38_syntax():
    """The simulator process may be Isaac Gym's Python <= 3.8 (python_executable)."""
    import ast
    import pathlib

    import rllib_fast.envs.isolated as iso
    import rllib_fast.envs.standins.vectask as vt

    for mod in (iso, vt):
        ast.parse(pathlib.Path(mod.__file__).read_text(), feature_version=(3, 8))
