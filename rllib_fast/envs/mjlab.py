"""mjlab tasks as tensor vector envs: ``mjlab:<task id>``.

mjlab implements Isaac Lab's manager-based RL API on MuJoCo Warp, so the
adapter is the Isaac Lab one (:class:`~rllib_fast.envs.isaaclab.IsaacLabVecEnv`)
with mjlab's observation group names and exact terminal observations:

* **final_obs is the true terminal observation.** With its default
  ``auto_reset=True`` mjlab resets ended envs inside ``step`` and the terminal
  observation is lost. The env is built with ``cfg.auto_reset=False`` instead:
  ``step`` then returns the terminal observation, and the adapter resets the
  ended envs (``env.reset(env_ids=...)``, mjlab's documented manual path, which
  fires the same reset events and zero-dt command update as its auto-reset) and
  puts their first observation into ``Step.obs``. Costs one extra
  ``sim.forward()`` over all envs (plus the reset observation) on steps where
  some env ended (on Cartpole with randomised episode clocks, most steps at
  N=1024; its cost relative to the step: docs/sources.md).
  ``exact_final_obs=False`` keeps mjlab's auto-reset instead (no extra
  forward): ``final_obs`` of an ended env is then the observation the action was
  taken from (a truncation bootstraps from ``V(s_t)``, as rsl_rl's and Isaac Lab's
  wrappers do; terminations do not bootstrap).
* **groups**: ``actor`` is the observation; ``critic``, when the task defines it
  *differently* from ``actor`` (Go1: 72 dims with privileged terms vs 48), is the
  asymmetric critic input: ``Step.extras["states"]``, ``env.states``,
  ``env.single_state_space``, and ``Step.extras["final_states"]`` (the critic
  observation at the terminal step). A critic group identical to the actor
  group (Cartpole) is not exposed.
* **flags**: ``time_outs`` -> ``truncated``, terminations -> ``terminated``
  (a time-out is a termination when ``cfg.is_finite_horizon``).
* **rewards** are passed through unchanged: mjlab scales them by the step
  duration (``scale_rewards_by_dt``), so returns are in reward-seconds; e.g.
  Cartpole's per-step reward is at most 1 x 0.05 s over 1000 steps: a maximum
  return of 50. ``env_config={"cfg": {"scale_rewards_by_dt": False}}`` turns it off.
* **episode statistics**: ``extras["log"]`` of the reset (per-term episode
  rewards, termination counts) is ``env.last_log``, as for Isaac Lab.
* **observation normalisation advice**: ``env.normalize_obs_hint`` is the task's
  registered rsl_rl config's ``obs_normalization`` (off for Cartpole, on for the
  robots); on-policy algorithms' ``normalize_obs='auto'`` (the default) follows it.
* **checkpoints**: mjlab's simulator state is not saved (``get_state()`` is None:
  a restored run keeps the live env's episodes), but its ``common_step_counter``,
  which schedules its curricula (Go1 velocity: wider command ranges after set step
  counts), is: ``get_training_state()``, saved in every checkpoint and restored,
  so a resumed run continues its curriculum instead of restarting it (as mjlab's
  own rsl_rl runner does). Per-env curriculum state (the rough-terrain tasks'
  terrain levels) is not saved: a resumed run's envs start from the levels its
  build gives them.
* **actions**: mjlab's action space is unbounded. The clip is the value of the
  task's registered rsl_rl config (``clip_actions``); every task bundled with
  mjlab 1.6 leaves it None (rsl_rl then does not clip), and policies here need
  finite bounds, so the fallback is 1.0 (the tasks scale actions themselves).

Creation (``make("mjlab:Mjlab-Cartpole-Balance", num_envs, device, seed,
cfg={...})``): imports ``mjlab.tasks`` (registers the task ids), deep-copies the
task's env config (``play=True``: its play config), applies ``cfg`` (dotted
overrides, e.g. ``{"episode_length_s": 5.0, "sim.mujoco.timestep": 0.005}``;
dict entries such as ``"terminations.my_term"`` may be added), sets num_envs and
seed and builds ``ManagerBasedRlEnv`` on ``device``. Or pass ``env``, a built
``ManagerBasedRlEnv`` (with ``auto_reset=False``; ``auto_reset=True`` together with
``exact_final_obs=False``). From an algorithm config:
``env_config={"exact_final_obs": False}``.

Partially observed tasks: ``drop_actor_terms`` removes observation terms from
the ``actor`` group (mjlab skips a term set to None), e.g. Cartpole without
velocities: ``env_config={"drop_actor_terms": ["cart_vel", "pole_vel"]}``. The
critic group keeps them, so it differs from the actor's and is exposed as the
privileged ``states`` (an asymmetric critic, a distillation teacher); a policy
must then infer the velocities from its history (FastPPO's ``rnn_type``).
"""
from __future__ import annotations

import dataclasses
import importlib.util
from typing import Any, Dict, List, Optional

from .base import canonical_device, check_num_envs
from .isaaclab import IsaacLabVecEnv, set_path
from .registry import register_prefix

__all__ = ["MjlabVecEnv", "make_mjlab", "MjlabNotInstalledError", "mjlab_tasks", "DEFAULT_CLIP_ACTIONS"]

DEFAULT_CLIP_ACTIONS = 1.0


class MjlabNotInstalledError(ImportError):
    """mjlab cannot be imported."""


def _require_mjlab() -> None:
    if importlib.util.find_spec("mjlab") is None:
        raise MjlabNotInstalledError(
            'mjlab: mjlab is not installed; install it with pip install -e ".[mjlab]" (mjlab==1.6.0)')


def mjlab_tasks() -> List[str]:
    """Registered mjlab task ids ([] when mjlab is not installed)."""
    if importlib.util.find_spec("mjlab") is None:
        return []
    import mjlab.tasks  # noqa: F401  (registers the Mjlab-* ids)
    from mjlab.tasks.registry import list_tasks

    return list(list_tasks())


def _effective_terms(group: Any) -> Dict[str, Any]:
    """A group's terms as they act: noise dropped when the group disables corruption."""
    return {name: (t if t is None or group.enable_corruption else dataclasses.replace(t, noise=None))
            for name, t in group.terms.items()}


def critic_differs(cfg: Any, policy_group: str = "actor", critic_group: str = "critic") -> bool:
    """Whether the critic group gives the critic anything the actor does not see."""
    groups = getattr(cfg, "observations", {}) or {}
    actor, critic = groups.get(policy_group), groups.get(critic_group)
    if critic is None or actor is None:
        return critic is not None
    fields = [f.name for f in dataclasses.fields(critic) if f.name not in ("terms", "enable_corruption")]
    try:
        return (_effective_terms(actor) != _effective_terms(critic)
                or any(getattr(actor, f) != getattr(critic, f) for f in fields))
    except Exception:  # a term config that does not compare (e.g. tensors): treat as different
        return True


class MjlabVecEnv(IsaacLabVecEnv):
    """An mjlab ``ManagerBasedRlEnv`` as a ``TensorVecEnv``: built with ``auto_reset=False``
    (exact terminal observations), or with ``auto_reset=True`` when ``exact_final_obs=False``
    (mjlab resets inside its step; ``final_obs`` of an ended env is the observation the
    action was taken from, the approximation rsl_rl's and Isaac Lab's wrappers make)."""

    def __init__(self, env: Any, clip_obs: Optional[float] = None, clip_actions: Optional[float] = None,
                 default_clip_actions: float = DEFAULT_CLIP_ACTIONS, exact_final_obs: bool = True):
        base = getattr(env, "unwrapped", env)
        auto_reset = bool(getattr(base.cfg, "auto_reset", True))
        if auto_reset == bool(exact_final_obs):
            raise ValueError(f"mjlab: exact_final_obs={bool(exact_final_obs)} needs an env built with "
                             f"cfg.auto_reset={not exact_final_obs} (the adapter resets ended envs itself only "
                             "when the terminal observation is kept); allowed: exact_final_obs=True with "
                             "auto_reset=False, or exact_final_obs=False with auto_reset=True")
        super().__init__(env, clip_obs=clip_obs, clip_actions=clip_actions, policy_group="actor",
                         critic_group="critic", reset_done=not auto_reset,
                         default_clip_actions=default_clip_actions, use_critic_group=critic_differs(base.cfg))
        self.step_dt = float(base.step_dt)

    def get_training_state(self) -> Dict[str, Any]:
        """mjlab's ``common_step_counter``: the env steps its curricula are scheduled on
        (the velocity tasks widen their command ranges at set counts), what mjlab's own
        rsl_rl runner saves with its checkpoints."""
        return {"common_step_counter": int(self._base.common_step_counter)}

    def set_training_state(self, state: Dict[str, Any]) -> None:
        """Restore the counter; mjlab's curriculum terms read it at the next resets."""
        self._base.common_step_counter = int(state["common_step_counter"])


def make_mjlab(task_id: str, num_envs: int = 1, device: Any = "cpu", seed: Optional[int] = None, *,
               env: Any = None, cfg: Optional[Dict[str, Any]] = None, play: bool = False,
               clip_obs: Optional[float] = None, clip_actions: Optional[float] = None,
               exact_final_obs: bool = True, drop_actor_terms: Optional[List[str]] = None) -> MjlabVecEnv:
    """Creator behind ``mjlab:<task id>`` (e.g. ``mjlab:Mjlab-Cartpole-Balance``,
    ``mjlab:Mjlab-Velocity-Flat-Unitree-Go1``); see the module docstring."""
    num_envs = check_num_envs(num_envs)
    if not isinstance(exact_final_obs, bool):
        raise ValueError(f"mjlab: exact_final_obs={exact_final_obs!r}; allowed: True or False")
    if env is not None:
        if int(getattr(env, "unwrapped", env).num_envs) != num_envs:
            raise ValueError(f"mjlab: the given env has num_envs={env.unwrapped.num_envs} but "
                             f"num_envs={num_envs} was requested; they must match")
        return MjlabVecEnv(env, clip_obs=clip_obs, clip_actions=clip_actions, exact_final_obs=exact_final_obs)
    _require_mjlab()
    from .isolated import seed_everything

    seed_everything(seed)
    import mjlab.tasks  # noqa: F401  (registers the Mjlab-* task ids)
    from mjlab.envs import ManagerBasedRlEnv
    from mjlab.tasks.registry import list_tasks, load_env_cfg, load_rl_cfg

    tasks = list_tasks()
    if task_id not in tasks:
        raise ValueError(f"mjlab: unknown task {task_id!r}; allowed: {', '.join(tasks)}")
    env_cfg = load_env_cfg(task_id, play=bool(play))
    for k, v in dict(cfg or {}).items():
        try:
            set_path(env_cfg, k, v, strict=True)
        except (AttributeError, KeyError) as e:
            raise ValueError(f"mjlab: cannot set env config override {k!r} on {task_id} ({e})") from None
    drop_terms(env_cfg, task_id, drop_actor_terms)
    env_cfg.scene.num_envs = num_envs
    env_cfg.seed = seed
    env_cfg.auto_reset = not exact_final_obs
    rl_cfg = load_rl_cfg(task_id)
    if clip_actions is None:
        clip_actions = getattr(rl_cfg, "clip_actions", None)
    dev = str(canonical_device(device))
    out = MjlabVecEnv(ManagerBasedRlEnv(env_cfg, device=dev), clip_obs=clip_obs, clip_actions=clip_actions,
                      exact_final_obs=exact_final_obs)
    out.normalize_obs_hint = rsl_rl_obs_normalization(rl_cfg)
    return out


def drop_terms(env_cfg: Any, task_id: str, names: Optional[List[str]], group: str = "actor") -> None:
    """Remove the observation terms ``names`` from ``group`` of ``env_cfg`` (set to
    None, which mjlab skips); an unknown term is a one-line ValueError."""
    if not names:
        return
    if isinstance(names, str) or not all(isinstance(n, str) for n in names):
        raise ValueError(f"mjlab: drop_actor_terms = {names!r}; allowed: a list of term names")
    terms = env_cfg.observations[group].terms
    active = [k for k, v in terms.items() if v is not None]
    for name in names:
        if name not in active:
            raise ValueError(f"mjlab: drop_actor_terms: {task_id} has no {group} observation term {name!r}; "
                             f"allowed: {', '.join(active)}")
        terms[name] = None
    if not any(v is not None for v in terms.values()):
        raise ValueError(f"mjlab: drop_actor_terms removes every {group} observation term of {task_id}; "
                         "allowed: a proper subset")


def rsl_rl_obs_normalization(rl_cfg: Any) -> Optional[bool]:
    """Whether the task's registered rsl_rl config normalises the actor's
    observations (mjlab 1.6: ``actor.obs_normalization``; older rsl_rl configs:
    ``empirical_normalization``), or None when it does not say."""
    actor = getattr(rl_cfg, "actor", None)
    value = getattr(actor, "obs_normalization", None)
    if value is None:
        value = getattr(rl_cfg, "empirical_normalization", None)
    return None if value is None else bool(value)


register_prefix("mjlab", make_mjlab, probe=False)   # a simulator: not started for config checks
