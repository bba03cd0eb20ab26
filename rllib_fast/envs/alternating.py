"""Two groups of simulator processes that take turns (Stooke & Abbeel 2018, §4.1):
while the main process runs inference for group A, group B's workers simulate,
and vice versa.

* :class:`AlternatingVecEnv` -- a :class:`~rllib_fast.envs.parallel.ParallelVecEnv`
  whose two halves are synchronised independently (``step_async_group`` /
  ``wait_group``).
* :func:`alternating_steps` / :func:`alternating_rollout` -- the driver loop that
  alternates inference and simulation between the groups; both work on any
  tensor vector env (one group, plain ``step``), so one algorithm loop runs on
  every sampler. :func:`concat_groups` / :func:`split_groups` convert between
  per-group and all-env tensors.

Usage and the step-time arithmetic are in :mod:`rllib_fast.envs.parallel`'s docstring.
"""
from __future__ import annotations

from typing import Any, Callable, Dict, Iterator, List, NamedTuple, Optional, Sequence, Tuple, Union

import torch

from .base import Step, TensorVecEnv
from .parallel import ParallelVecEnv
from .workers import MakeEnvFn

__all__ = ["AlternatingVecEnv", "GroupRollout", "alternating_steps", "alternating_rollout", "concat_groups",
           "split_groups"]


class AlternatingVecEnv(ParallelVecEnv):
    """:class:`ParallelVecEnv` with two groups (A = the first half of the envs
    and of the workers, B = the second) synchronised independently. Drive it
    with :func:`alternating_rollout` / :func:`alternating_steps`; its ``step()``
    (all envs at once) is correct but gains nothing over the sync sampler.
    ``num_workers`` counts all processes (2 = one per group)."""

    def __init__(self, make_env_fn: MakeEnvFn, num_envs: int, num_workers: int = 2, device: Any = "cpu",
                 seed: Optional[int] = None, affinity: Any = None, *, num_groups: int = 2, **kwargs: Any):
        super().__init__(make_env_fn, num_envs, num_workers, device=device, seed=seed, affinity=affinity,
                         num_groups=num_groups, **kwargs)


# ---------------------------------------------------------------------------
# the alternating driver loop
# ---------------------------------------------------------------------------
PolicyFn = Callable[[torch.Tensor, int], Union[torch.Tensor, Tuple[torch.Tensor, Dict[str, torch.Tensor]]]]


def _split_policy_out(out: Any) -> Tuple[torch.Tensor, Dict[str, torch.Tensor]]:
    if isinstance(out, tuple):
        actions, extras = out
        return actions, dict(extras or {})
    return out, {}


def _groups_of(env: TensorVecEnv) -> Tuple[int, List[slice]]:
    if hasattr(env, "step_async_group"):
        return int(env.num_groups), list(env.group_slices)
    return 1, [slice(0, env.num_envs)]


def split_groups(env: TensorVecEnv, x: torch.Tensor) -> List[torch.Tensor]:
    """Per-group rows of an all-env tensor (views), e.g. ``split_groups(env, env.reset(seed))``."""
    return [x[sl] for sl in _groups_of(env)[1]]


def alternating_steps(env: TensorVecEnv, policy_fn: PolicyFn, num_steps: int,
                      obs: Optional[Sequence[torch.Tensor]] = None, seed: Optional[int] = None
                      ) -> Iterator[Tuple[int, torch.Tensor, torch.Tensor, Step, Dict[str, torch.Tensor]]]:
    """Run ``num_steps`` steps of every group, alternating inference and simulation.

    Yields ``(g, obs, actions, step, policy_extras)`` for each group step, in
    the order ``(t=0, A), (t=0, B), (t=1, A), ...``: ``obs`` is what group ``g``
    acted on, ``step`` its result (``step.final_obs`` is the next observation,
    ``step.obs`` the one to act on next). ``obs`` = per-group observations to
    start from (a previous call's ``step.obs``); None calls ``env.reset(seed)``
    first (``split_groups(env, env.reset(s))`` gives ``obs`` for a reset done
    outside). When the
    generator is exhausted both groups are idle. Works on any TensorVecEnv
    (one group, plain ``step``) so the same algorithm code runs on every sampler.

    Don't abandon the generator half-way on an env with groups: a group may
    still have a step in flight (call ``wait_group`` for it).
    """
    G, slices = _groups_of(env)
    obs = split_groups(env, env.reset(seed=seed)) if obs is None else list(obs)
    if len(obs) != G:
        raise ValueError(f"obs must hold one tensor per group ({G}), got {len(obs)}")
    if num_steps <= 0:
        return
    if G == 1 and not hasattr(env, "step_async_group"):
        o = obs[0]
        for _ in range(num_steps):
            a, pe = _split_policy_out(policy_fn(o, 0))
            st = env.step(a)
            yield 0, o, a, st, pe
            o = st.obs
        return
    acts: List[Any] = [None] * G
    pex: List[Dict[str, torch.Tensor]] = [{}] * G
    for g in range(G):  # prime: act and send every group
        acts[g], pex[g] = _split_policy_out(policy_fn(obs[g], g))
        env.step_async_group(g, acts[g])
    for t in range(num_steps):
        last = t == num_steps - 1
        for g in range(G):
            st = env.wait_group(g)
            o, a, pe = obs[g], acts[g], pex[g]
            obs[g] = st.obs
            if not last:  # infer for g while the other groups simulate
                acts[g], pex[g] = _split_policy_out(policy_fn(st.obs, g))
                env.step_async_group(g, acts[g])
            yield g, o, a, st, pe


class GroupRollout(NamedTuple):
    """``num_steps`` transitions of one group, time-major ``[T, n_g, ...]``."""

    obs: torch.Tensor
    actions: torch.Tensor
    reward: torch.Tensor
    terminated: torch.Tensor
    truncated: torch.Tensor
    final_obs: torch.Tensor
    valid: Optional[torch.Tensor]
    next_obs: torch.Tensor           # [n_g, ...]: obs to act on after the last step
    extras: Dict[str, torch.Tensor]  # env extras, [T, n_g, ...]
    policy_extras: Dict[str, torch.Tensor]  # what policy_fn returned next to the actions


def alternating_rollout(env: TensorVecEnv, policy_fn: PolicyFn, num_steps: int,
                        obs: Optional[Sequence[torch.Tensor]] = None,
                        seed: Optional[int] = None) -> List[GroupRollout]:
    """:func:`alternating_steps` collected into one :class:`GroupRollout` per
    group (see the module docstring for how an algorithm uses it)."""
    G, _ = _groups_of(env)
    cols: List[Dict[str, list]] = [dict(obs=[], actions=[], reward=[], terminated=[], truncated=[],
                                        final_obs=[], valid=[], extras=[], pex=[]) for _ in range(G)]
    nxt: List[Optional[torch.Tensor]] = [None] * G if obs is None else list(obs)
    for g, o, a, st, pe in alternating_steps(env, policy_fn, num_steps, obs, seed):
        c = cols[g]
        c["obs"].append(o)
        c["actions"].append(torch.as_tensor(a))
        c["reward"].append(st.reward)
        c["terminated"].append(st.terminated)
        c["truncated"].append(st.truncated)
        c["final_obs"].append(st.final_obs)
        c["valid"].append(st.valid)
        c["extras"].append(st.extras or {})
        c["pex"].append(pe)
        nxt[g] = st.obs
    out = []
    for g, c in enumerate(cols):
        if not c["obs"]:
            raise ValueError("alternating_rollout needs num_steps >= 1")
        valid = None
        if any(v is not None for v in c["valid"]):
            valid = torch.stack([v if v is not None else torch.ones_like(tm)
                                 for v, tm in zip(c["valid"], c["terminated"])])
        extras = {k: torch.stack([e[k] for e in c["extras"]]) for k in c["extras"][0]}
        pex = {k: torch.stack([e[k] for e in c["pex"]]) for k in c["pex"][0]}
        out.append(GroupRollout(obs=torch.stack(c["obs"]), actions=torch.stack(c["actions"]),
                                reward=torch.stack(c["reward"]), terminated=torch.stack(c["terminated"]),
                                truncated=torch.stack(c["truncated"]), final_obs=torch.stack(c["final_obs"]),
                                valid=valid, next_obs=nxt[g], extras=extras, policy_extras=pex))
    return out


def concat_groups(groups: Sequence[GroupRollout]) -> GroupRollout:
    """Join per-group rollouts along the env dimension (dim 1; ``next_obs`` dim 0),
    giving ``[T, N, ...]`` in the env order of the sampler."""
    if len(groups) == 1:
        return groups[0]

    def cat(xs: Sequence[torch.Tensor], dim: int = 1) -> torch.Tensor:
        return torch.cat(list(xs), dim=dim)

    g0 = groups[0]
    valid = None
    if any(g.valid is not None for g in groups):
        valid = cat([g.valid if g.valid is not None else torch.ones_like(g.terminated) for g in groups])
    return GroupRollout(obs=cat([g.obs for g in groups]), actions=cat([g.actions for g in groups]),
                        reward=cat([g.reward for g in groups]), terminated=cat([g.terminated for g in groups]),
                        truncated=cat([g.truncated for g in groups]), final_obs=cat([g.final_obs for g in groups]),
                        valid=valid, next_obs=cat([g.next_obs for g in groups], dim=0),
                        extras={k: cat([g.extras[k] for g in groups]) for k in g0.extras},
                        policy_extras={k: cat([g.policy_extras[k] for g in groups]) for k in g0.policy_extras})
