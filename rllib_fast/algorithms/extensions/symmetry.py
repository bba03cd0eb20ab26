"""Symmetry augmentation and mirror loss (Mittal et al., "Symmetry
Considerations for Learning Task Symmetric Robot Policies", ICRA 2024; rsl_rl's
``symmetry_cfg``), FastPPO's ``symmetry`` key.

A task symmetry is a user function ``mirror_fn(obs=None, actions=None,
states=None) -> (obs_m, actions_m, states_m)``: each tensor it is given
(``[B, ...]``) comes back as its ``k >= 1`` transformed copies stacked copy by
copy (``[k * B, ...]``: rows ``j*B .. (j+1)*B-1`` are copy ``j``; the identity
is not among them), a None argument as None. What it receives:

* ``obs``: the raw (un-normalised) observations, flat ``[B, obs_dim]``;
* ``actions``: actions in the policy's units -- continuous actions before the
  affine map to the env's bounds (``[-1, 1]`` is the action space), discrete
  actions as int64 indices ``[B]``;
* ``states``: the source's raw privileged states ``[B, S]`` (asymmetric critic).

Two uses, either or both (rsl_rl's):

* ``use_data_augmentation``: every minibatch of ``m`` transitions grows to
  ``(k + 1) * m``: the originals, then the mirrored observations with the
  mirrored actions. The policy's log-probabilities and the critic's values are
  computed anew on all rows; the stored behaviour log-probabilities, old
  values, advantages and value targets of the originals are copied to their
  mirrors (a mirrored transition is as good as its original under the
  symmetry). Entropy and the KL the adaptive lr reads stay the originals'.
* ``use_mirror_loss``: ``mirror_loss_coeff * MSE(pi(mirror(o)), mirror(pi(o)))``
  on the policy's means (continuous) or action probabilities (discrete: the
  mirror of an action is a permutation of the action indices), the target side
  detached. Without it the loss is still computed and logged (no gradient).

Normalisation: the mirror acts on raw observations, then the mirrored ones
are normalised with the statistics that normalised their originals (the
rollout's frozen observation statistics, kept by :meth:`Symmetry.freeze_obs_norm`).
"""
from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any, Callable, Mapping, NamedTuple, Optional, Tuple

import torch
from torch.nn import functional as F

from .callables import resolve_callable
from .settings import dict_key_error

#: the keys of FastPPO's ``symmetry`` dict and their defaults
SYMMETRY_KEYS = {"mirror_fn": None, "use_data_augmentation": False, "use_mirror_loss": False,
                 "mirror_loss_coeff": 0.0}


def symmetry_error(value: Any, owner: str = "FastPPOConfig") -> Optional[str]:
    """Why ``symmetry`` = ``value`` is not allowed (one line), or None."""
    if value is None:
        return None
    shape = dict_key_error("symmetry", value, SYMMETRY_KEYS, owner)
    if shape:
        return shape
    try:
        resolve_callable(value.get("mirror_fn"), "symmetry.mirror_fn")
    except ValueError as err:
        return f"{owner}: {err}"
    for key in ("use_data_augmentation", "use_mirror_loss"):
        if not isinstance(value.get(key, False), bool):
            return f"{owner}: `symmetry.{key}` = {value[key]!r}; allowed: True or False"
    coeff = value.get("mirror_loss_coeff", 0.0)
    if isinstance(coeff, bool) or not isinstance(coeff, (int, float)) or not coeff >= 0.0 or coeff == float("inf"):
        return f"{owner}: `symmetry.mirror_loss_coeff` = {coeff!r}; allowed: a finite number >= 0"
    return None


class MirroredBatch(NamedTuple):
    """A rollout's mirrored transitions, ``k`` copies of the ``B`` originals
    stacked copy by copy (``[k * B, ...]``), as the update reads them."""

    obs: torch.Tensor        # normalised like their originals
    actions: torch.Tensor
    critic_in: torch.Tensor  # the critic's prepared input (normalised observations or states)


@dataclass(frozen=True)
class SymmetrySettings:
    mirror_fn: Callable
    use_data_augmentation: bool
    use_mirror_loss: bool
    mirror_loss_coeff: float

    @classmethod
    def from_dict(cls, value: Mapping[str, Any]) -> "SymmetrySettings":
        merged = {**SYMMETRY_KEYS, **dict(value)}
        merged["mirror_fn"] = resolve_callable(merged["mirror_fn"], "symmetry.mirror_fn")
        merged["mirror_loss_coeff"] = float(merged["mirror_loss_coeff"])
        return cls(**merged)


class Symmetry:
    """The symmetry extension an algorithm holds (None when ``symmetry`` is off):
    mirrors a rollout once per update (:meth:`mirror_batch`), augments each
    minibatch (:meth:`augment`) and computes the mirror loss (:meth:`mirror_loss`)."""

    def __init__(self, settings: SymmetrySettings, discrete: bool, num_actions: Optional[int] = None) -> None:
        self.settings = settings
        self.discrete = discrete
        self.num_actions = num_actions
        self._obs_norm = None
        #: running sum of the mirror loss and the number of minibatches since the last report
        self._loss_sum: Optional[torch.Tensor] = None
        self._loss_count = 0

    # -- mirroring --------------------------------------------------------------------
    def mirror(self, obs=None, actions=None, states=None) -> Tuple[Any, Any, Any]:
        out = self.settings.mirror_fn(obs=obs, actions=actions, states=states)
        if not (isinstance(out, tuple) and len(out) == 3):
            raise TypeError("symmetry.mirror_fn must return a tuple (obs, actions, states) of the mirrored "
                            f"tensors (None for an argument it was not given); got {type(out).__name__}")
        for name, given, got in zip(("obs", "actions", "states"), (obs, actions, states), out):
            if given is not None and (got is None or got.shape[0] % given.shape[0] != 0
                                      or got.shape[1:] != given.shape[1:]):
                raise ValueError(f"symmetry.mirror_fn: mirrored {name} has shape "
                                 f"{None if got is None else tuple(got.shape)}; allowed: k * {given.shape[0]} rows "
                                 f"of shape {tuple(given.shape[1:])}")
        return out

    def freeze_obs_norm(self, obs_norm: torch.nn.Module) -> None:
        """Keep the observation statistics a rollout is normalised with (they are
        updated after the rollout, before its mirrors are normalised)."""
        self._obs_norm = copy.deepcopy(obs_norm)

    def normalize_like_rollout(self, obs: torch.Tensor) -> torch.Tensor:
        """``obs`` normalised with the statistics kept by :meth:`freeze_obs_norm`."""
        return self._obs_norm.normalize(obs)

    @torch.no_grad()
    def mirror_batch(self, raw_obs: torch.Tensor, actions: torch.Tensor, normalize_obs: bool,
                     critic_in: Optional[Callable[[torch.Tensor], torch.Tensor]] = None) -> MirroredBatch:
        """The rollout's mirrored transitions: ``raw_obs`` (flat, un-normalised)
        and ``actions`` mirrored, the observations normalised with the rollout's
        statistics; ``critic_in``: the mirrored critic inputs when the critic reads
        something else than the observations (None: the mirrored observations)."""
        obs_m, act_m, _ = self.mirror(obs=raw_obs, actions=actions)
        if act_m.shape[0] != obs_m.shape[0]:
            raise ValueError("symmetry.mirror_fn returned a different number of copies for obs and actions")
        obs_n = self.normalize_like_rollout(obs_m.float()) if normalize_obs else obs_m.float()
        return MirroredBatch(obs_n, act_m.to(actions.dtype), obs_n if critic_in is None else critic_in)

    @staticmethod
    def copies(mirrored: MirroredBatch, batch_size: int) -> int:
        return mirrored.obs.shape[0] // batch_size

    @staticmethod
    def mirror_rows(idx: torch.Tensor, batch_size: int, k: int) -> torch.Tensor:
        """Rows of the mirrored batch that mirror the originals ``idx``, copy by copy."""
        offsets = torch.arange(k, device=idx.device) * batch_size
        return (offsets[:, None] + idx[None, :]).reshape(-1)

    # -- the update ---------------------------------------------------------------------
    def augment(self, obs: torch.Tensor, actions: torch.Tensor, critic_in: torch.Tensor,
                mirrored: MirroredBatch, rows: torch.Tensor):
        """A minibatch's observations, actions and critic inputs with their
        mirrors appended (``rows``: :meth:`mirror_rows`)."""
        return (torch.cat([obs, mirrored.obs[rows]]), torch.cat([actions, mirrored.actions[rows]]),
                torch.cat([critic_in, mirrored.critic_in[rows]]))

    def mirror_loss(self, module, obs_n: torch.Tensor, mirrored_obs_n: torch.Tensor) -> torch.Tensor:
        """``MSE(pi(mirror(o)), mirror(pi(o)).detach())`` over the mirrored rows
        (means, or action probabilities for discrete actions); detached unless
        ``use_mirror_loss``. Accumulated for the update's report."""
        k = mirrored_obs_n.shape[0] // obs_n.shape[0]
        p_orig, _ = module.dist_params(obs_n)
        p_mirr, _ = module.dist_params(mirrored_obs_n)
        if self.discrete:
            probs, probs_m = F.softmax(p_orig, -1), F.softmax(p_mirr, -1)
            # where each action index goes under each of the k copies: [k, n]
            perm = self.action_permutation(p_orig.device, k)
            target = torch.empty_like(probs_m).view(k, -1, probs.shape[-1])
            target.scatter_(-1, perm[:, None, :].expand(k, probs.shape[0], -1),
                            probs.detach()[None].expand(k, -1, -1))
            loss = F.mse_loss(probs_m, target.reshape_as(probs_m))
        else:
            _, target, _ = self.mirror(actions=p_orig.detach())
            loss = F.mse_loss(p_mirr, target)
        self.record_loss(loss)
        return loss if self.settings.use_mirror_loss else loss.detach()

    @torch.no_grad()
    def record_loss(self, loss: torch.Tensor) -> None:
        """Add one minibatch's mirror loss (a scalar, or one per population member,
        reported as their mean) to the running report."""
        loss = loss.detach().mean()
        self._loss_sum = loss if self._loss_sum is None else self._loss_sum + loss
        self._loss_count += 1

    def action_permutation(self, device, k: int) -> torch.Tensor:
        """int64 ``[k, n]``: where each discrete action index goes under each of the ``k`` copies."""
        n = int(self.num_actions)
        _, perm, _ = self.mirror(actions=torch.arange(n, device=device))
        return perm.long().view(k, n)

    def take_loss_report(self) -> Optional[torch.Tensor]:
        """The mean mirror loss since the last report (a device tensor), or None."""
        if self._loss_sum is None:
            return None
        out = self._loss_sum / self._loss_count
        self._loss_sum, self._loss_count = None, 0
        return out


# -- built-in task symmetries --------------------------------------------------------------
def cartpole_mirror(obs=None, actions=None, states=None):
    """The built-in CartPole's left-right mirror: ``[x, x_dot, theta, theta_dot]
    -> -[...]`` and push left <-> push right (one copy). Masked variants that
    observe only positions ``[x, theta]`` mirror the same way."""
    return (None if obs is None else -obs, None if actions is None else 1 - actions,
            None if states is None else -states)


def pendulum_mirror(obs=None, actions=None, states=None):
    """The built-in Pendulum's mirror about the vertical: ``[cos th, sin th,
    th_dot] -> [cos th, -sin th, -th_dot]`` and torque ``u -> -u`` (one copy)."""
    sign = None if obs is None else torch.tensor([1.0, -1.0, -1.0], dtype=obs.dtype, device=obs.device)
    return (None if obs is None else obs * sign, None if actions is None else -actions,
            None if states is None else states * sign)


def make_symmetry(value: Optional[Mapping[str, Any]], env: Any) -> Optional[Symmetry]:
    """The extension for FastPPO's ``symmetry`` key (None: off)."""
    if value is None:
        return None
    space = env.single_action_space
    discrete = hasattr(space, "n")
    return Symmetry(SymmetrySettings.from_dict(value), discrete, int(space.n) if discrete else None)
