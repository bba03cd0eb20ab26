"""Algorithms run unchanged on the Isaac sources (stand-ins): FastPPO learns on the
VecTask stand-in through the adapter; PQL too once it exists; every on-policy
algorithm accepts the Isaac Lab stand-in and a process-isolated sim."""
import rllib_fast  # noqa: F401  (registers everything first)

import math
import time

import pytest

from rllib_fast.algorithms import CONFIGS

VECTASK = {"task_class": "rllib_fast.envs.standins.vectask:PointReachTask",
           "cfg": {"env": {"episodeLength": 64}}}
# random policy: ~5 per episode; a policy that steers to the target: ~48 (max ~63)
THRESHOLD = 35.0
PQL_THRESHOLD = 30.0


def _train_until(algo, threshold, max_iters, budget_s):
    t0, best = time.time(), -math.inf
    for _ in range(max_iters):
        r = algo.train()
        ret = r["env_runners"].get("episode_return_mean", math.nan)
        if ret == ret:
            best = max(best, ret)
        if best >= threshold or time.time() - t0 > budget_s:
            break
    return best


def test_fastppo_learns_on_isaacgym_standin():
    from rllib_fast.algorithms.ppo import FastPPOConfig

    cfg = (FastPPOConfig().environment("isaacgym:PointReach", num_envs=32, env_config=VECTASK)
           .training(rollout_length=32, lr=1e-3, num_epochs=5, num_minibatches=4, adaptive_lr_kl_target=0.01)
           .debugging(seed=0))
    algo = cfg.build_algo()
    assert algo.env.max_episode_steps == 64 and algo.env.single_state_space is not None
    best = _train_until(algo, THRESHOLD, max_iters=40, budget_s=120)
    assert algo.any_invalid  # the rollout saw (and masked) straddling transitions
    algo.stop()
    assert best >= THRESHOLD


def test_pql_learns_on_isaacgym_standin():
    from rllib_fast.presets import preset

    PENDULUM = preset("PQL", "Pendulum")  # small nets for a 2-core CPU

    kw = {k: v for k, v in PENDULUM.items() if k != "num_envs"}
    cfg = (CONFIGS["PQL"]().environment("isaacgym:PointReach", num_envs=32, env_config=VECTASK)
           .training(**{**kw, "steps_per_iteration": 25}).debugging(seed=0))
    algo = cfg.build_algo()
    # (the time budget only bounds a failing run)
    best = _train_until(algo, PQL_THRESHOLD, max_iters=40, budget_s=150)
    algo.stop()
    assert best >= PQL_THRESHOLD


@pytest.mark.parametrize("env,env_config", [
    ("isaaclab:PointReach-Direct-v0", {"env_class": "rllib_fast.envs.standins.isaaclab:PointReachLabEnv"}),
    ("isaacgym:PointReach", {**VECTASK, "isolated": True}),
])
def test_on_policy_algorithms_accept_isaac_sources(env, env_config):
    from rllib_fast.algorithms.a2c import FastA2CConfig

    algo = (FastA2CConfig().environment(env, num_envs=8, env_config=env_config)
            .training(rollout_length=8, decorrelate_steps=4).debugging(seed=0)).build_algo()
    try:
        r = algo.train()
        assert r["num_env_steps_sampled_lifetime"] > 0
        assert math.isfinite(r["learners"]["default_policy"]["policy_loss"])
    finally:
        algo.stop()


def test_isaacgym_tune_configs_validate():
    import glob

    import yaml

    from rllib_fast.cli import resolve_algorithm, validate_config

    root = __import__("pathlib").Path(__file__).resolve().parents[2]
    files = sorted(glob.glob(str(root / "tune_configs" / "isaacgym-*.yaml")))
    tasks = {"Ant", "Humanoid", "Anymal", "ShadowHand", "AllegroHand", "FrankaCubeStack", "BallBalance"}
    seen = set()
    for path in files:
        for spec in yaml.safe_load(open(path)).values():
            validate_config(resolve_algorithm(spec["run"]), {**spec["config"], "env": spec["env"]})
            seen.add((spec["run"], spec["env"].split(":")[1]))
    assert {("FastPPO", t) for t in tasks} | {("PQL", t) for t in tasks} <= seen
