"""Single-file TD3 on batched tensor envs: the framework-free off-policy reference.

Plain torch, no rllib_fast algorithm code: only the env comes from
``rllib_fast.envs.registry`` (the built-in batched ``Pendulum`` or an
``mjlab:`` task). Written from the TD3 paper (Fujimoto et al. 2018,
"Addressing Function Approximation Error in Actor-Critic Methods", Alg. 1),
with N envs stepped as one batch and ``updates_per_step`` gradient steps per
batched env step (the off-policy analogue of PPO's epochs; PQL calls it
beta_a:v):

    for each batched step:
        a = clip(pi(s) + N(0, sigma_explore), -1, 1)        (one forward for all N envs)
        store (s, a, r, s', d) for each env                  (N rows into a ring buffer)
        repeat updates_per_step times:
            y = r + gamma^n (1 - term) min_i Q'_i(s', clip(pi'(s') + clip(N(0, sigma_t), -c, c), -1, 1))
            minimise sum_i (Q_i(s, a) - y)^2
            every policy_delay updates: maximise Q_1(s, pi(s)); Polyak-average all targets

Optional n-step returns (``n_step`` > 1) sum n rewards before the bootstrap,
cut at the end of an episode. Time-limit truncations bootstrap from the true
last observation (the env's ``final_obs``); terminations do not. Observations
are normalised with running statistics (``--norm-obs``) when asked; rewards
can be scaled (``--reward-scale``: mjlab multiplies its rewards by the step
duration, so Cartpole's per-step reward is at most 0.05).

Every tensor is preallocated on the env's device; the host reads the returns
of finished episodes once every ``log_every`` batched steps.

    python benchmarks/single_file_td3.py --env Pendulum --num-envs 64 --target -250
    python benchmarks/single_file_td3.py --env mjlab:Mjlab-Cartpole-Balance --episode-length-s 10 \\
        --num-envs 256 --target 9
"""
from __future__ import annotations

import argparse
import collections
import copy
import time
from dataclasses import dataclass, fields
from typing import Callable, Optional

import torch
import torch.nn as nn


def _unshadow_mjlab() -> None:
    """Run as a script, this file's folder is first on sys.path and its
    a module there named ``mjlab.py`` would shadow the mjlab package."""
    import os
    import sys

    here = os.path.dirname(os.path.abspath(__file__))
    sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.getcwd()) != here]


def _import_env_registry():
    """``rllib_fast.envs.registry`` without running ``rllib_fast/__init__.py``
    (which imports Ray and registers algorithms with Tune)."""
    import importlib
    import importlib.util
    import sys
    import types

    if "rllib_fast" not in sys.modules:
        spec = importlib.util.find_spec("rllib_fast")
        pkg = types.ModuleType("rllib_fast")
        pkg.__path__ = list(spec.submodule_search_locations)
        pkg.__spec__ = spec
        sys.modules["rllib_fast"] = pkg
    return importlib.import_module("rllib_fast.envs.registry")


_unshadow_mjlab()
registry = _import_env_registry()


@dataclass
class Args:
    env: str = "Pendulum"
    episode_length_s: float = 0.0   # mjlab: episode length in seconds (0: the task's own)
    num_envs: int = 64
    total_steps: int = 10_000_000
    buffer_size: int = 1_000_000
    batch_size: int = 256
    updates_per_step: int = 8       # gradient steps per batched env step
    learning_starts: int = 2_000    # transitions before learning (random actions until then)
    lr: float = 1e-3
    actor_lr: float = 1e-3
    gamma: float = 0.99
    n_step: int = 1
    tau: float = 0.005
    explore_noise: float = 0.1
    target_noise: float = 0.2
    target_noise_clip: float = 0.5
    policy_delay: int = 2
    reward_scale: float = 1.0
    norm_obs: bool = False
    hidden: int = 256
    seed: int = 0
    threads: int = 1
    target: float = -250.0
    time_budget: float = 120.0
    log_every: int = 20             # batched steps between host reads of finished returns
    device: str = "cpu"


def mlp(i: int, o: int, hidden: int) -> nn.Sequential:
    return nn.Sequential(nn.Linear(i, hidden), nn.ReLU(), nn.Linear(hidden, hidden), nn.ReLU(), nn.Linear(hidden, o))


class Actor(nn.Module):
    def __init__(self, obs_dim: int, act_dim: int, hidden: int):
        super().__init__()
        self.net = mlp(obs_dim, act_dim, hidden)

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return torch.tanh(self.net(obs))   # policy units in [-1, 1]


class TwinQ(nn.Module):
    def __init__(self, obs_dim: int, act_dim: int, hidden: int):
        super().__init__()
        self.q1, self.q2 = mlp(obs_dim + act_dim, 1, hidden), mlp(obs_dim + act_dim, 1, hidden)

    def forward(self, obs: torch.Tensor, act: torch.Tensor):
        x = torch.cat([obs, act], -1)
        return self.q1(x).squeeze(-1), self.q2(x).squeeze(-1)


class RunningNorm:
    """Running mean/variance (parallel-algorithm merge of batch moments)."""

    def __init__(self, dim: int, device: str):
        self.mean = torch.zeros(dim, device=device)
        self.var = torch.ones(dim, device=device)
        self.count = 1e-4

    def update(self, x: torch.Tensor) -> None:
        m, v, n = x.mean(0), x.var(0, unbiased=False), x.shape[0]
        delta, tot = m - self.mean, self.count + n
        self.mean = self.mean + delta * n / tot
        self.var = (self.var * self.count + v * n + delta ** 2 * self.count * n / tot) / tot
        self.count = tot

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        return ((x - self.mean) / torch.sqrt(self.var + 1e-8)).clamp(-5, 5)


class Replay:
    """Ring of transitions, N rows per write, allocated once."""

    def __init__(self, capacity: int, obs_dim: int, act_dim: int, device: str):
        self.cap, self.ptr, self.size = capacity, 0, 0
        self.obs = torch.zeros(capacity, obs_dim, device=device)
        self.next_obs = torch.zeros(capacity, obs_dim, device=device)
        self.act = torch.zeros(capacity, act_dim, device=device)
        self.rew = torch.zeros(capacity, device=device)
        self.disc = torch.zeros(capacity, device=device)   # gamma^m (1 - terminated): the bootstrap factor

    def add(self, obs, act, rew, next_obs, disc) -> None:
        n = obs.shape[0]
        idx = (torch.arange(n, device=obs.device) + self.ptr) % self.cap
        self.obs[idx], self.act[idx], self.rew[idx], self.next_obs[idx], self.disc[idx] = obs, act, rew, next_obs, disc
        self.ptr = (self.ptr + n) % self.cap
        self.size = min(self.size + n, self.cap)

    def sample(self, batch: int):
        i = torch.randint(0, self.size, (batch,), device=self.obs.device)
        return self.obs[i], self.act[i], self.rew[i], self.next_obs[i], self.disc[i]


class NStep:
    """n-step windows per env, cut at the first end of an episode: emits, for
    the step n-1 steps back, (s, a, sum_k gamma^k r_k, s_m, gamma^m (1 - term))."""

    def __init__(self, n: int, num_envs: int, obs_dim: int, act_dim: int, gamma: float, device: str):
        self.n, self.gamma, self.t = n, gamma, 0
        self.obs = torch.zeros(n, num_envs, obs_dim, device=device)
        self.act = torch.zeros(n, num_envs, act_dim, device=device)
        self.rew = torch.zeros(n, num_envs, device=device)
        self.next_obs = torch.zeros(n, num_envs, obs_dim, device=device)
        self.term = torch.zeros(n, num_envs, device=device)
        self.done = torch.zeros(n, num_envs, device=device)

    def push(self, obs, act, rew, next_obs, term, done):
        k = self.t % self.n
        self.obs[k], self.act[k], self.rew[k], self.next_obs[k] = obs, act, rew, next_obs
        self.term[k], self.done[k] = term, done
        self.t += 1
        if self.t < self.n:
            return None
        order = [(self.t + j) % self.n for j in range(self.n)]   # oldest first
        ret = torch.zeros_like(rew)
        disc = torch.ones_like(rew)
        nxt = self.next_obs[order[0]].clone()
        alive = torch.ones_like(rew)   # 1 until the window's episode ended
        for j in order:
            ret += alive * disc * self.rew[j]
            nxt = torch.where(alive.bool().unsqueeze(-1), self.next_obs[j], nxt)
            disc = torch.where(alive.bool(), disc * self.gamma * (1.0 - self.term[j]), disc)
            alive = alive * (1.0 - self.done[j])
        first = order[0]
        return self.obs[first].clone(), self.act[first].clone(), ret, nxt, disc


def train(args: Args, callback: Optional[Callable[[dict], bool]] = None) -> dict:
    """Train until ``callback(stats)`` returns True, the mean training return of
    the last 100 episodes reaches ``args.target`` (callback-free use), the time
    budget or ``total_steps`` runs out. ``stats`` every ``log_every`` batched
    steps: ``env_steps``, ``return_mean`` (last 100 finished episodes; nan before
    any), ``updates``, ``sample_s`` (cumulative seconds in ``env.step``), ``wall_s`` and ``act``
    (the greedy policy: observations -> actions in [-1, 1], for an evaluation by the caller)."""
    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    t_start = time.perf_counter()
    N, dev = args.num_envs, args.device
    task = {"cfg": {"episode_length_s": args.episode_length_s}} if args.episode_length_s > 0 else {}
    env = registry.make(args.env, num_envs=N, device=dev, seed=args.seed, **task)
    obs_dim = int(torch.Size(env.obs_shape).numel())
    space = env.single_action_space
    act_dim = int(torch.Size(space.shape).numel())
    low = torch.as_tensor(space.low, dtype=torch.float32, device=dev).reshape(-1)
    high = torch.as_tensor(space.high, dtype=torch.float32, device=dev).reshape(-1)

    actor = Actor(obs_dim, act_dim, args.hidden).to(dev)
    critic = TwinQ(obs_dim, act_dim, args.hidden).to(dev)
    actor_t, critic_t = copy.deepcopy(actor).requires_grad_(False), copy.deepcopy(critic).requires_grad_(False)
    a_opt = torch.optim.Adam(actor.parameters(), lr=args.actor_lr)
    c_opt = torch.optim.Adam(critic.parameters(), lr=args.lr)
    c_params, a_params = list(critic.parameters()), list(actor.parameters())
    ct_params, at_params = list(critic_t.parameters()), list(actor_t.parameters())
    replay = Replay(max(args.buffer_size, N), obs_dim, act_dim, dev)
    nstep = NStep(args.n_step, N, obs_dim, act_dim, args.gamma, dev)
    norm = RunningNorm(obs_dim, dev)
    normalize = norm if args.norm_obs else (lambda x: x)

    ep_ret = torch.zeros(N, device=dev)
    finished = torch.zeros(args.log_every, N, device=dev)
    ended = torch.zeros(args.log_every, N, dtype=torch.bool, device=dev)
    recent = collections.deque(maxlen=100)

    def update(delay_tick: bool) -> None:
        o, a, r, o2, d = replay.sample(args.batch_size)
        o, o2 = normalize(o), normalize(o2)
        with torch.no_grad():
            noise = (torch.randn_like(a) * args.target_noise).clamp(-args.target_noise_clip, args.target_noise_clip)
            a2 = (actor_t(o2) + noise).clamp(-1.0, 1.0)
            y = r + d * torch.minimum(*critic_t(o2, a2))
        q1, q2 = critic(o, a)
        c_loss = (q1 - y).pow(2).mean() + (q2 - y).pow(2).mean()
        c_opt.zero_grad(set_to_none=True)
        c_loss.backward()
        c_opt.step()
        if delay_tick:
            for p in c_params:
                p.requires_grad_(False)
            a_loss = -critic(o, actor(o))[0].mean()
            for p in c_params:
                p.requires_grad_(True)
            a_opt.zero_grad(set_to_none=True)
            a_loss.backward()
            a_opt.step()
            with torch.no_grad():
                torch._foreach_lerp_(ct_params, c_params, args.tau)
                torch._foreach_lerp_(at_params, a_params, args.tau)

    obs = env.reset(seed=args.seed).reshape(N, -1).float()
    env_steps, updates, it, sample_s = 0, 0, 0, 0.0
    stats: dict = {}
    while env_steps < args.total_steps:
        it += 1
        # --- act: one batched forward, Gaussian exploration, random until learning starts ---
        with torch.no_grad():
            if env_steps < args.learning_starts:
                a = torch.rand(N, act_dim, device=dev) * 2.0 - 1.0
            else:
                a = (actor(normalize(obs)) + torch.randn(N, act_dim, device=dev) * args.explore_noise).clamp(-1, 1)
            t0 = time.perf_counter()
            step = env.step((low + (a + 1.0) * 0.5 * (high - low)).reshape(N, *space.shape))
            sample_s += time.perf_counter() - t0
            next_obs = step.obs.reshape(N, -1).float()
            final_obs = step.final_obs.reshape(N, -1).float()
            term, done = step.terminated.float(), (step.terminated | step.truncated)
            out = nstep.push(obs, a, step.reward.float() * args.reward_scale, final_obs, term, done.float())
            if out is not None:
                replay.add(*out)
            if args.norm_obs:
                norm.update(final_obs)
            ep_ret += step.reward.float()
            k = (it - 1) % args.log_every
            finished[k], ended[k] = ep_ret, done
            ep_ret.masked_fill_(done, 0.0)
            obs = next_obs
        env_steps += N

        # --- learn: updates_per_step gradient steps ---------------------------------------
        if replay.size >= max(args.learning_starts, args.batch_size):
            for _ in range(args.updates_per_step):
                updates += 1
                update(updates % args.policy_delay == 0)

        if it % args.log_every == 0:
            new_returns = finished[ended].tolist()   # the one host read per log_every steps
            recent.extend(new_returns)
            wall = time.perf_counter() - t_start
            ret_mean = sum(recent) / len(recent) if recent else float("nan")
            stats = dict(iteration=it, env_steps=env_steps, return_mean=ret_mean, updates=updates, new_returns=new_returns,
                         sample_s=sample_s, wall_s=wall, act=lambda o: actor(normalize(o.reshape(o.shape[0], -1))))
            if callback is not None:
                if callback(stats):
                    break
            elif ret_mean >= args.target or wall >= args.time_budget:
                break
    return stats


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    for f in fields(Args):
        if f.type in ("bool", bool):
            p.add_argument("--" + f.name.replace("_", "-"), type=lambda s: s.lower() in ("1", "true", "yes"),
                           default=f.default, metavar="BOOL")
        else:
            typ = {"int": int, "float": float, "str": str}.get(f.type, type(f.default))
            p.add_argument("--" + f.name.replace("_", "-"), type=typ, default=f.default)
    args = Args(**vars(p.parse_args()))

    def log(s: dict) -> bool:
        print(f"it {s['iteration']:6d}  {s['wall_s']:7.1f}s  steps {s['env_steps']:>10,d}  updates {s['updates']:>8,d}  "
              f"return(100) {s['return_mean']:8.2f}  {s['env_steps'] / s['wall_s']:,.0f} steps/s", flush=True)
        return s["return_mean"] >= args.target or s["wall_s"] >= args.time_budget

    s = train(args, log)
    done = "reached" if s["return_mean"] >= args.target else "did not reach"
    print(f"{done} {args.target:g} after {s['wall_s']:.1f}s, {s['env_steps']:,d} env steps")


if __name__ == "__main__":
    main()
