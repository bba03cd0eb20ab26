"""rsl_rl's OnPolicyRunner on envpool's MuJoCo Playground tasks: the peer of issue 39's Go1 benchmark.

:class:`EnvpoolRslVecEnv` is an rsl_rl 5.4.2 ``VecEnv`` over one synchronous envpool pool
(``Go1JoystickFlatTerrain-v1``, ``G1JoystickFlatTerrain-v1``, ...), written against rsl_rl's
``rsl_rl/env/vec_env.py`` contract:

* **observations**: a ``TensorDict`` with the groups rsl_rl's ``obs_groups`` name. mjlab's
  registered runner configs map ``actor -> ("actor",)`` and ``critic -> ("critic",)``; the
  pool's ``state`` group is ``"actor"`` (also under ``"policy"``, rsl_rl's default name) and
  its ``privileged_state`` group ``"critic"``, so the asymmetric critic of mjlab's Go1 PPO
  settings reads the privileged observation, as FastPPO's does through ``envpool:<id>``.
* **dones / time-outs**: ``dones = terminated | truncated`` (long, as mjlab's wrapper returns
  them); ``extras["time_outs"]`` = envpool's ``truncated``, so rsl_rl adds
  ``gamma * V(s_t)`` at a time limit (its bootstrap).
* **one-step-late reset**: envpool resets an ended env on the *next* step (NEXT_STEP: that
  step ignores the env's action and returns its reset observation with reward 0). rsl_rl
  has no validity mask, so that straddling transition reaches it as an ordinary
  first transition of the new episode (from the terminal observation, reward 0) -- what
  any envpool training loop without a mask trains on; our algorithms drop it
  (``Step.valid``). It is one transition per episode (1 in 1000 on Go1 joystick).
* **episode statistics**: rsl_rl's logger counts returns itself when it has a log dir;
  without one (benchmarks) :attr:`EnvpoolRslVecEnv.finished` collects every completed
  episode's ``(return, length)`` (straddling transitions excluded) and
  :meth:`EnvpoolRslVecEnv.episode_metrics` the per-episode means of the task's reward terms
  (``reward_terms/<term>``, the same numbers and code as ``envpool:<id>``'s). On steps where
  episodes ended, ``extras["log"]`` carries ``Episode_Reward/<term>`` for rsl_rl's logger.
* ``episode_length_buf`` reads envpool's ``elapsed_step``; envpool's episode clocks cannot
  be set from outside, so ``learn(init_at_random_ep_len=True)`` has no effect on them.

Everything stays on the CPU (rsl_rl's device here). ``train_go1`` runs mjlab's runner class
(rsl_rl's ``OnPolicyRunner`` plus mjlab's clean-up of unset model keys) with mjlab's Go1 PPO
settings (``load_rl_cfg("Mjlab-Velocity-Flat-Unitree-Go1")``), unchanged but for the seed::

    python benchmarks/peers/envpool_rsl_rl.py --task Go1JoystickFlatTerrain-v1 --num-envs 64 --iterations 2
"""
from __future__ import annotations

import argparse
import dataclasses
import os
import sys
import time
from typing import Any, Dict, List, Optional, Tuple

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

from rsl_rl.env import VecEnv  # noqa: E402
from tensordict import TensorDict  # noqa: E402

from rllib_fast.envs.envpool import ACTOR_GROUP, CRITIC_GROUP  # noqa: E402  (the pool's group names)
from rllib_fast.envs.episode_terms import EpisodeTermMeans, info_terms  # noqa: E402

#: mjlab's registered rsl_rl config whose PPO settings the peer trains with
GO1_RL_CFG = "Mjlab-Velocity-Flat-Unitree-Go1"


class EnvpoolRslVecEnv(VecEnv):
    """An envpool pool as an rsl_rl ``VecEnv`` (see the module docstring)."""

    def __init__(self, task_id: str, num_envs: int, seed: int = 0, device: Any = "cpu",
                 num_threads: Optional[int] = None, **make_kwargs: Any):
        import envpool

        kw = dict(make_kwargs)
        if num_threads is not None:
            kw["num_threads"] = int(num_threads)
        self.pool = envpool.make(task_id, env_type="gymnasium", num_envs=int(num_envs),
                                 batch_size=int(num_envs), seed=int(seed) % (2 ** 31), **kw)
        self.task_id = task_id
        self.num_envs = int(num_envs)
        self.device = torch.device(device)
        self.num_actions = int(np.prod(self.pool.single_action_space.shape))
        self.max_episode_length = int(self.pool.config["max_episode_steps"])
        self.cfg = dict(self.pool.config)
        obs, infos = self.pool.reset()
        self._obs = self._tensordict(obs)
        self._elapsed = np.asarray(infos["elapsed_step"]).copy()
        self._terms = EpisodeTermMeans(info_terms(infos, self.num_envs), self.num_envs)
        self._prev_done = np.zeros(self.num_envs, dtype=bool)
        self._ret = np.zeros(self.num_envs)
        self._len = np.zeros(self.num_envs, dtype=np.int64)
        #: every completed episode's (return, length), in the order they ended
        self.finished: List[Tuple[float, int]] = []

    def _tensordict(self, obs: Any) -> TensorDict:
        if isinstance(obs, dict):
            actor = torch.as_tensor(np.asarray(obs[ACTOR_GROUP], dtype=np.float32), device=self.device)
            groups = {"actor": actor, "policy": actor}
            if CRITIC_GROUP in obs:
                groups["critic"] = torch.as_tensor(np.asarray(obs[CRITIC_GROUP], dtype=np.float32),
                                                   device=self.device)
        else:
            actor = torch.as_tensor(np.asarray(obs, dtype=np.float32), device=self.device)
            groups = {"actor": actor, "policy": actor, "critic": actor}
        return TensorDict(groups, batch_size=[self.num_envs])

    # -- rsl_rl VecEnv ---------------------------------------------------------------
    @property
    def episode_length_buf(self) -> torch.Tensor:
        return torch.as_tensor(self._elapsed, dtype=torch.long, device=self.device)

    @episode_length_buf.setter
    def episode_length_buf(self, value: torch.Tensor) -> None:
        """envpool's clocks are its own: setting them is not possible (ignored)."""

    def get_observations(self) -> TensorDict:
        return self._obs

    def step(self, actions: torch.Tensor) -> Tuple[TensorDict, torch.Tensor, torch.Tensor, Dict[str, Any]]:
        a = actions.detach().to("cpu", torch.float64).numpy()
        obs, rew, terminated, truncated, infos = self.pool.step(a)
        terminated = np.asarray(terminated, dtype=bool)
        truncated = np.asarray(truncated, dtype=bool) & ~terminated
        done = terminated | truncated
        counted = ~self._prev_done                       # False: the straddling reset transition
        rew = np.asarray(rew, dtype=np.float64)
        self._ret += rew * counted
        self._len += counted
        self._terms.update(infos, counted, done)
        extras: Dict[str, Any] = {"time_outs": torch.as_tensor(truncated, device=self.device)}
        if done.any():
            for i in np.flatnonzero(done):
                self.finished.append((float(self._ret[i]), int(self._len[i])))
            self._ret[done] = 0.0
            self._len[done] = 0
        self._prev_done = done
        self._elapsed = np.asarray(infos["elapsed_step"]).copy()
        self._obs = self._tensordict(obs)
        return (self._obs, torch.as_tensor(rew, dtype=torch.float32, device=self.device),
                torch.as_tensor(done, dtype=torch.long, device=self.device), extras)

    def episode_metrics(self) -> Dict[str, float]:
        """Per-episode means of the task's reward terms since the last call."""
        return self._terms.pop_means()

    def close(self) -> None:
        self.pool.close()


def go1_ppo_cfg(seed: int) -> Dict[str, Any]:
    """mjlab's Go1 velocity PPO runner config (rsl_rl's dict form), seeded; nothing else changed."""
    import mjlab.tasks  # noqa: F401  (registers the task ids)
    from mjlab.tasks.registry import load_rl_cfg

    rl_cfg = load_rl_cfg(GO1_RL_CFG)
    rl_cfg.seed = int(seed)
    return dataclasses.asdict(rl_cfg)


def train_go1(task_id: str = "Go1JoystickFlatTerrain-v1", num_envs: int = 64, seed: int = 0,
              iterations: int = 2, num_threads: Optional[int] = None,
              time_limit_s: Optional[float] = None) -> List[Dict[str, Any]]:
    """Train rsl_rl's OnPolicyRunner with mjlab's Go1 PPO settings on an envpool task; one curve
    point per iteration: env steps, wall seconds, mean return of the last 100 episodes (None
    before any ended) and the reward-term means of the episodes ended in that iteration."""
    from mjlab.rl.runner import MjlabOnPolicyRunner

    torch.manual_seed(seed)
    t0 = time.time()
    env = EnvpoolRslVecEnv(task_id, num_envs, seed=seed, num_threads=num_threads)
    cfg = go1_ppo_cfg(seed)
    # mjlab's runner: rsl_rl's OnPolicyRunner with mjlab's config clean-up (unset cnn/rnn keys dropped)
    runner = MjlabOnPolicyRunner(env, cfg, None, "cpu")
    t_built = time.time()
    curve, steps = [], 0
    try:
        for it in range(int(iterations)):
            runner.learn(1)
            steps += cfg["num_steps_per_env"] * num_envs
            last = env.finished[-100:]
            curve.append(dict(iteration=it + 1, env_steps=steps, wall_s=round(time.time() - t_built, 2),
                              build_s=round(t_built - t0, 2),
                              return_mean=(sum(r for r, _ in last) / len(last)) if last else None,
                              episodes=len(env.finished), terms=env.episode_metrics()))
            if time_limit_s is not None and time.time() - t_built >= time_limit_s:
                break
    finally:
        env.close()
    return curve


def main(argv: Optional[List[str]] = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--task", default="Go1JoystickFlatTerrain-v1")
    p.add_argument("--num-envs", type=int, default=64)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--iterations", type=int, default=2)
    p.add_argument("--num-threads", type=int, default=None)
    p.add_argument("--time-limit-s", type=float, default=None)
    p.add_argument("--torch-threads", type=int, default=None,
                   help="torch intra-op threads (default: torch's); give both sides of a comparison the same")
    args = p.parse_args(argv)
    if args.torch_threads is not None:
        torch.set_num_threads(args.torch_threads)
    curve = train_go1(args.task, args.num_envs, args.seed, args.iterations, args.num_threads, args.time_limit_s)
    for point in curve:
        print(point, flush=True)


if __name__ == "__main__":
    main()
