"""Single-file PPO on rllib_fast's batched torch CartPole: the framework-free reference.

Plain torch, no rllib_fast algorithm code: only the env comes from
``rllib_fast.envs.registry``. Written from the PPO paper (Schulman et al.
2017, "Proximal Policy Optimization Algorithms", Alg. 1 and Eq. 7/9) with
generalized advantage estimation (Schulman et al. 2016, Eq. 16):

    for each iteration:
        run the policy in N envs for T steps                     (one batched forward per step)
        A_t = sum_l (gamma*lambda)^l delta_{t+l},  delta_t = r_t + gamma V(s_{t+1}) - V(s_t)
        for K epochs, for each of M minibatches:
            L = -E[min(rho A, clip(rho, 1-eps, 1+eps) A)] + c1 (V - R)^2 - c2 H[pi]

Time-limit truncations bootstrap from the value of the true last observation
(the env's ``final_obs``); terminations do not. Defaults are the benchmarks'
matched throughput settings (T=32, 4 epochs x 4 minibatches, lr 3e-4, Adam eps
1e-5, grad-norm clip 0.5, separate 64-64 tanh actor and critic);
``--kl-target`` adds the KL-adaptive learning rate of FastPPO's defaults (and of
rsl_rl / rl_games), so ``benchmarks/bench.py cartpole-ppo`` can run this file with
FastPPO's default settings and a comparison isolates the framework.

By default (this machine: 2 CPU cores, no GPU) it runs everything on the CPU
with one torch thread; ``--device cuda`` puts env, networks and storage on the
GPU (the side-by-side in benchmarks/gpu.py). Every tensor is preallocated and
the host is touched once per iteration (to read the returns of finished episodes).

    python benchmarks/single_file_ppo.py --num-envs 64 --target 475
"""
from __future__ import annotations

import argparse
import collections
import math
import time
from dataclasses import dataclass, fields
from typing import Callable, Optional

import torch
import torch.nn as nn


def _import_env_registry():
    """``rllib_fast.envs.registry`` without running ``rllib_fast/__init__.py``
    (which imports Ray and registers algorithms with Tune): the reference pays
    for torch, numpy and gymnasium spaces only, in startup time and memory."""
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


registry = _import_env_registry()


@dataclass
class Args:
    env: str = "CartPole"
    num_envs: int = 64
    num_steps: int = 32            # horizon T per env per iteration
    total_steps: int = 10_000_000
    lr: float = 3e-4
    anneal_lr: bool = False
    kl_target: float = 0.0         # > 0: adapt lr to keep each epoch's mean KL near it (rsl_rl / rl_games rule)
    gamma: float = 0.99
    gae_lambda: float = 0.95
    epochs: int = 4
    minibatches: int = 4
    clip: float = 0.2
    vf_coef: float = 0.5
    ent_coef: float = 0.0
    max_grad_norm: float = 0.5
    norm_adv: bool = True
    norm_obs: bool = True          # running mean/std of observations, updated once per iteration
    hidden: int = 64
    seed: int = 0
    threads: int = 1
    target: float = 475.0
    time_budget: float = 120.0
    device: str = "cpu"            # env, net and storage device ("cuda" for the GPU kit, benchmarks/gpu.py)


def layer(i: int, o: int, gain: float) -> nn.Linear:
    lin = nn.Linear(i, o)
    nn.init.orthogonal_(lin.weight, gain)
    nn.init.zeros_(lin.bias)
    return lin


class ActorCritic(nn.Module):
    def __init__(self, obs_dim: int, n_actions: int, hidden: int):
        super().__init__()
        g = math.sqrt(2)
        self.pi = nn.Sequential(layer(obs_dim, hidden, g), nn.Tanh(), layer(hidden, hidden, g), nn.Tanh(),
                                layer(hidden, n_actions, 0.01))
        self.v = nn.Sequential(layer(obs_dim, hidden, g), nn.Tanh(), layer(hidden, hidden, g), nn.Tanh(),
                               layer(hidden, 1, 1.0))

    def value(self, obs: torch.Tensor) -> torch.Tensor:
        return self.v(obs).squeeze(-1)

    def act(self, obs: torch.Tensor):
        """Sample with the Gumbel-max trick; return (action, log-prob)."""
        logp_all = torch.log_softmax(self.pi(obs), -1)
        u = torch.rand_like(logp_all).clamp_(1e-12, 1.0)
        a = (logp_all - torch.log(-torch.log(u))).argmax(-1)
        return a, logp_all.gather(-1, a.unsqueeze(-1)).squeeze(-1)

    def evaluate(self, obs: torch.Tensor, a: torch.Tensor):
        logp_all = torch.log_softmax(self.pi(obs), -1)
        entropy = -(logp_all.exp() * logp_all).sum(-1)
        return logp_all.gather(-1, a.unsqueeze(-1)).squeeze(-1), entropy


class RunningNorm:
    """Running mean/variance (parallel-algorithm merge of batch moments)."""

    def __init__(self, dim: int, device: str = "cpu"):
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
        return ((x - self.mean) / torch.sqrt(self.var + 1e-8)).clamp(-10, 10)


def train(args: Args, callback: Optional[Callable[[dict], bool]] = None) -> dict:
    """Train until ``callback(stats)`` returns True, the mean return of the
    last 100 episodes reaches ``args.target`` (callback-free use), the time
    budget or ``total_steps`` runs out. ``stats`` per iteration: ``env_steps``,
    ``return_mean`` (last 100 finished episodes; nan before any), ``sample_s``
    (cumulative rollout seconds), ``sample_steps``, ``wall_s``."""
    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    t_start = time.perf_counter()
    N, T = args.num_envs, args.num_steps
    dev = args.device
    env = registry.make(args.env, num_envs=N, device=dev, seed=args.seed)
    obs_dim = env.single_observation_space.shape[0]
    agent = ActorCritic(obs_dim, int(env.single_action_space.n), args.hidden).to(dev)
    opt = torch.optim.Adam(agent.parameters(), lr=args.lr, eps=1e-5)
    norm = RunningNorm(obs_dim, dev)
    normalize = norm if args.norm_obs else (lambda x: x)

    # rollout storage, time-major [T, N]
    raw_obs = torch.zeros(T, N, obs_dim, device=dev)
    raw_next = torch.zeros(T, N, obs_dim, device=dev)
    actions = torch.zeros(T, N, dtype=torch.long, device=dev)
    logps = torch.zeros(T, N, device=dev)
    rewards = torch.zeros(T, N, device=dev)
    terms = torch.zeros(T, N, device=dev)
    dones = torch.zeros(T, N, device=dev)
    finished_ret = torch.zeros(T, N, device=dev)
    ep_ret = torch.zeros(N, device=dev)
    recent = collections.deque(maxlen=100)

    obs = env.reset(seed=args.seed)
    env_steps, sample_s, sample_steps, it = 0, 0.0, 0, 0
    batch, mb = T * N, (T * N) // args.minibatches
    stats = {}
    while env_steps < args.total_steps:
        it += 1
        if args.anneal_lr:
            opt.param_groups[0]["lr"] = args.lr * max(0.0, 1.0 - env_steps / args.total_steps)

        # --- rollout: T batched steps ------------------------------------------
        t0 = time.perf_counter()
        with torch.no_grad():
            for t in range(T):
                raw_obs[t] = obs
                a, lp = agent.act(normalize(obs))
                step = env.step(a)
                actions[t], logps[t], rewards[t] = a, lp, step.reward
                raw_next[t] = step.final_obs
                done = step.terminated | step.truncated
                terms[t] = step.terminated.float()
                dones[t] = done.float()
                ep_ret += step.reward
                finished_ret[t] = ep_ret
                ep_ret.masked_fill_(done, 0.0)
                obs = step.obs
        new_returns = finished_ret[dones.bool()].tolist()  # the one host read per iteration
        recent.extend(new_returns)
        sample_s += time.perf_counter() - t0
        sample_steps += batch
        env_steps += batch

        # --- targets: values of s_t and s_{t+1}, GAE backwards in time ---------
        with torch.no_grad():
            if args.norm_obs:
                norm.update(raw_obs.reshape(batch, obs_dim))
            obs_n = normalize(raw_obs.reshape(batch, obs_dim))
            next_n = normalize(raw_next.reshape(batch, obs_dim))
            v = agent.value(obs_n).view(T, N)
            v_next = agent.value(next_n).view(T, N)
            delta = rewards + args.gamma * v_next * (1.0 - terms) - v
            adv = torch.zeros(T, N, device=dev)
            running = torch.zeros(N, device=dev)
            for t in reversed(range(T)):
                running = delta[t] + args.gamma * args.gae_lambda * (1.0 - dones[t]) * running
                adv[t] = running
            ret = (adv + v).reshape(batch)
            adv = adv.reshape(batch)
        b_act, b_logp = actions.reshape(batch), logps.reshape(batch)

        # --- K epochs of minibatch updates of the clipped objective -------------
        for _ in range(args.epochs):
            perm = torch.randperm(batch, device=dev)
            epoch_kl = torch.zeros((), device=dev)
            for i in range(args.minibatches):
                idx = perm[i * mb:(i + 1) * mb]
                logp, entropy = agent.evaluate(obs_n[idx], b_act[idx])
                log_ratio = logp - b_logp[idx]
                ratio = torch.exp(log_ratio)
                epoch_kl += ((ratio - 1) - log_ratio).mean().detach()
                a = adv[idx]
                if args.norm_adv:
                    a = (a - a.mean()) / (a.std() + 1e-8)
                pg_loss = -torch.min(ratio * a, ratio.clamp(1 - args.clip, 1 + args.clip) * a).mean()
                v_loss = 0.5 * (agent.value(obs_n[idx]) - ret[idx]).pow(2).mean()
                loss = pg_loss + args.vf_coef * v_loss - args.ent_coef * entropy.mean()
                opt.zero_grad(set_to_none=True)
                loss.backward()
                nn.utils.clip_grad_norm_(agent.parameters(), args.max_grad_norm)
                opt.step()
            if args.kl_target > 0:   # one host read per epoch
                kl, g = float(epoch_kl) / args.minibatches, opt.param_groups[0]
                if kl > 2.0 * args.kl_target:
                    g["lr"] = max(1e-6, g["lr"] / 1.5)
                elif kl < 0.5 * args.kl_target:
                    g["lr"] = min(1e-2, g["lr"] * 1.5)

        wall = time.perf_counter() - t_start
        ret_mean = sum(recent) / len(recent) if recent else float("nan")
        stats = dict(iteration=it, env_steps=env_steps, return_mean=ret_mean, sample_s=sample_s,
                     sample_steps=sample_steps, wall_s=wall, new_returns=new_returns)
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
        if s["iteration"] % 10 == 0 or s["return_mean"] >= args.target:
            print(f"it {s['iteration']:5d}  {s['wall_s']:7.1f}s  steps {s['env_steps']:>10,d}  "
                  f"return(100) {s['return_mean']:6.1f}  {s['env_steps'] / s['wall_s']:,.0f} steps/s", flush=True)
        return s["return_mean"] >= args.target or s["wall_s"] >= args.time_budget

    s = train(args, log)
    done = "reached" if s["return_mean"] >= args.target else "did not reach"
    print(f"{done} {args.target:g} after {s['wall_s']:.1f}s, {s['env_steps']:,d} env steps")


if __name__ == "__main__":
    main()
