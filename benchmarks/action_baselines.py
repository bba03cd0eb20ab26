"""What a task pays a policy that does not learn: the episode return (and the task's
own reward terms) of the action-space midpoint plus Gaussian noise of a given std.

Why: a success bar only means something beside what no learning reaches. On
MuJoCo Playground's Go1 joystick task the midpoint is the default standing pose,
and a robot that stands still is paid for its pose and for the part of each
velocity command that is near zero, while a Gaussian policy with PPO's initial
std falls at once (Playground clips each step's reward at 0). This script
measures both ends on the same episode accounting as training: the sum of an
episode's counted rewards, averaged over the first ``episodes`` episodes that
end, with the source's own reward terms (``episode_metrics()``) beside it.

    python benchmarks/action_baselines.py envpool:Go1JoystickFlatTerrain-v1 --stds 0,0.1,0.2,0.3 \\
        --out benchmarks/results/go1-baselines.md

Actions are drawn in the policy's [-1, 1] units and mapped affinely to the
action space's bounds, as FastPPO's actions are.
"""
from __future__ import annotations

import argparse
import os
import platform
import sys
import time
from typing import Dict, List, Optional, Sequence

import torch

def noise_policy_returns(env, std: float, episodes: int, generator: torch.Generator,
                         max_steps: int = 1_000_000) -> Dict[str, float]:
    """Mean return, mean length and reward-term means over the first ``episodes``
    episodes that end with actions ``midpoint + N(0, std)`` (policy units, clipped)."""
    space = env.single_action_space
    low = torch.as_tensor(space.low, dtype=torch.float32, device=env.device)
    high = torch.as_tensor(space.high, dtype=torch.float32, device=env.device)
    n = env.num_envs
    env.reset()
    if hasattr(env, "episode_metrics"):
        env.episode_metrics()   # forget the episodes that ended before
    ret = torch.zeros(n, device=env.device)
    length = torch.zeros(n, device=env.device)
    done_ret: List[torch.Tensor] = []
    done_len: List[torch.Tensor] = []
    count = 0
    for _ in range(max_steps):
        u = torch.zeros(n, low.numel(), device=env.device)
        if std > 0:
            u = (torch.randn(u.shape, generator=generator) * std).to(env.device).clamp(-1.0, 1.0)
        step = env.step(low + (u + 1.0) * 0.5 * (high - low))
        counted = step.valid if step.valid is not None else torch.ones(n, dtype=torch.bool, device=env.device)
        ret += torch.where(counted, step.reward.float(), torch.zeros((), device=env.device))
        length += counted.float()
        ended = (step.terminated | step.truncated) & counted
        if bool(ended.any()):
            done_ret.append(ret[ended].clone())
            done_len.append(length[ended].clone())
            count += int(ended.sum())
            ret[ended] = 0.0
            length[ended] = 0.0
            if count >= episodes:
                break
    if count < episodes:
        raise RuntimeError(f"only {count} of {episodes} episodes ended within {max_steps} steps")
    rets, lens = torch.cat(done_ret)[:episodes], torch.cat(done_len)[:episodes]
    out = {"std": std, "return": float(rets.mean()), "return_sd": float(rets.std()), "length": float(lens.mean()),
           "episodes": episodes}
    terms = env.episode_metrics() if hasattr(env, "episode_metrics") else {}
    out.update({k.split("/", 1)[-1]: float(v) for k, v in terms.items()})
    return out


def markdown(task: str, num_envs: int, rows: Sequence[Dict[str, float]], terms: Sequence[str], note: str) -> str:
    head = ["action std", "mean return", "sd", "mean length", "episodes"] + list(terms)
    lines = [f"# {task}: return without learning", "",
             f"Actions: the action space's midpoint plus Gaussian noise (policy units, clipped to [-1, 1]); "
             f"{num_envs} envs; the first episodes to end. {note}", "",
             "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        cells = [f"{r['std']:g}", f"{r['return']:.2f}", f"{r['return_sd']:.2f}", f"{r['length']:.0f}",
                 f"{r['episodes']}"] + [f"{r.get(t, float('nan')):.3f}" for t in terms]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def main(argv: Optional[List[str]] = None) -> int:
    from rllib_fast.envs import registry

    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("task", help="a registered env name, e.g. envpool:Go1JoystickFlatTerrain-v1")
    p.add_argument("--num-envs", type=int, default=64)
    p.add_argument("--stds", default="0,0.1,0.2,0.3", help="comma list of action noise stds (policy units)")
    p.add_argument("--episodes", type=int, default=128, help="episodes per std")
    p.add_argument("--seed", type=int, default=7)
    p.add_argument("--terms", default="tracking_lin_vel,tracking_ang_vel,pose",
                   help="reward terms to show (those the source reports)")
    p.add_argument("--out", default=None, help="write the markdown table here")
    args = p.parse_args(argv)
    kwargs = {"num_threads": 2} if args.task.startswith("envpool:") else {}
    env = registry.make(args.task, num_envs=args.num_envs, seed=args.seed, **kwargs)
    gen = torch.Generator().manual_seed(args.seed)
    rows = []
    for std in (float(s) for s in args.stds.split(",")):
        t = time.time()
        rows.append(noise_policy_returns(env, std, args.episodes, gen))
        print(f"std {std:g}: {rows[-1]['return']:.2f} (length {rows[-1]['length']:.0f}, {time.time() - t:.0f} s)",
              flush=True)
    env.close()
    terms = [t for t in args.terms.split(",") if any(t in r for r in rows)]
    cpu = platform.processor() or platform.machine()
    note = (f"Seed {args.seed}; {time.strftime('%Y-%m-%d')}; {os.cpu_count()} cores ({cpu}). "
            f"Command: `python benchmarks/action_baselines.py {' '.join(argv if argv is not None else sys.argv[1:])}`.")
    text = markdown(args.task, args.num_envs, rows, terms, note)
    print(text)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
