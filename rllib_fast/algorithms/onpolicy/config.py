"""``OnPolicyConfig``: the keys every batched on-policy algorithm shares
(FastPPO, FastA2C, HTS-RL, the asynchronous learners, distillation), and what
two of them resolve to at build time."""
from __future__ import annotations

from typing import Any, Optional

from ...core.compile import COMPILE
from ...core.config import FastConfig
from ...core.nets import ACTIVATIONS, INITS
from ...core.params import POSITIVE_INT_LIST, Param
from ..asymmetric import ASYMMETRIC_CRITIC

#: env steps the default start-state decorrelation may cost at most (over this learner's envs)
DECORRELATION_BUDGET = 32_768


def decorrelation_horizon(setting: Optional[int], env: Any) -> int:
    """K of the start-state decorrelation (``decorrelate_steps``): the setting, or for
    None the time limit (or 100) capped at ``DECORRELATION_BUDGET / N`` env steps per
    env; 0 or less means no decorrelation phase."""
    if setting is None:
        return min(env.max_episode_steps or 100, max(1, DECORRELATION_BUDGET // env.num_envs))
    return max(0, int(setting))


def resolve_acting_threads(setting: Any, env: Any, overlapped: bool = False) -> Optional[int]:
    """torch threads a rollout acts with (``acting_threads``), None: unchanged. 'auto'
    is 1 for a CPU source that steps on its own worker threads in this process, unless
    the update runs while the policy acts (``overlapped``: FastPPO's learn_while_stepping,
    HTS-RL), whose minibatch steps want every thread."""
    if setting != "auto":
        return None if setting is None else int(setting)
    on_cpu = getattr(getattr(env, "device", None), "type", "cpu") == "cpu"
    return 1 if on_cpu and env.steps_on_worker_threads and not overlapped else None


def resolve_normalize_obs(setting: Any, env: Any) -> bool:
    """``normalize_obs`` in effect: an explicit True/False, or for ``'auto'`` the
    source's ``normalize_obs_hint`` (the task authors' choice, e.g. mjlab's rsl_rl
    configs: off for Cartpole, on for the robots) and True where it gives none.
    Why the source decides: whether running observation statistics help depends
    on the task (they slow learning on mjlab's Cartpole, docs/sources.md), and
    the task's authors tuned their own runner with that choice."""
    if setting != "auto":
        return bool(setting)
    hint = env.normalize_obs_hint   # declared by TensorVecEnv (None: the source gives no advice)
    return True if hint is None else bool(hint)


class OnPolicyConfig(FastConfig):
    """Keys shared by the batched on-policy algorithms."""

    HYPERPARAMETERS = {
        "rollout_length": Param(32, "env steps per env per iteration (horizon T)", (int,), low=1),
        "total_batch_size": Param(None, "Stooke's rule: fixed T*N; rollout_length = total_batch_size // num_envs",
                                  (int,), low=1, optional=True),
        "vf_loss_coeff": Param(0.5, "value loss weight", low=0.0, live=True),
        "entropy_coeff": Param(0.0, "entropy bonus weight", low=0.0, live=True),
        "lambda_": Param(0.95, "GAE lambda", low=0.0, high=1.0, live=True),
        "normalize_obs": Param("auto", "running mean/std observation normalisation on device: True, False, or "
                               "'auto' = the source's advice where it gives one (mjlab: the task's rsl_rl "
                               "config), else True", (bool, str),
                               check=(lambda v: v == "auto" or isinstance(v, bool), "'auto', True or False")),
        "normalize_values": Param(True, "critic predicts returns normalised by running statistics", (bool,)),
        "normalize_advantages": Param(True, "standardise advantages per minibatch", (bool,), live=True),
        "hidden_sizes": Param([64, 64], "hidden layer sizes of actor and critic", (list, tuple),
                              check=POSITIVE_INT_LIST),
        "critic_hidden_sizes": Param(None, "hidden layer sizes of the critic alone (None: hidden_sizes). The "
                                     "critic runs only in the update, the actor at every env step too, so a "
                                     "small actor with a larger critic keeps acting cheap while the value "
                                     "estimate keeps its capacity; not with shared_trunk", (list, tuple),
                                     optional=True, check=POSITIVE_INT_LIST),
        "activation": Param("tanh", "hidden activation", (str,), choices=tuple(ACTIVATIONS)),
        "init": Param("orthogonal", "layer init of actor and critic: 'orthogonal' (gain sqrt 2 hidden, 0.01 "
                      "policy head, 1 value head, zero biases) or 'torch' (PyTorch's nn.Linear default on "
                      "every layer: rsl_rl's; better on mjlab's ELU Cartpole, docs/sources.md)",
                      (str,), choices=INITS),
        "std_mode": Param("state_independent", "Gaussian std: a free parameter or a head output",
                          (str,), choices=("state_independent", "state_dependent")),
        "init_log_std": Param(0.0, "initial log std of the Gaussian policy", low=-10.0, high=5.0),
        "std_param": Param("log", "what the state-independent Gaussian std parameter is: 'log' (log std, init "
                           "init_log_std) or 'scalar' (std itself, init exp(init_log_std), clamped to "
                           "[1e-6, 1e6]: rsl_rl's std_type='scalar')", (str,), choices=("log", "scalar")),
        "clip_actions": Param(True, "clamp sampled continuous actions to the action space before the env (the "
                              "log-probability is always of the unclamped sample); False passes them through "
                              "(rsl_rl's clip_actions=None; mjlab: also env_config clip_actions=False)", (bool,)),
        "asymmetric_critic": ASYMMETRIC_CRITIC,
        "decorrelate_steps": Param(None, "start-state decorrelation: env i first takes k_i ~ U[0, this] random "
                                   "actions, after the source's episode clocks are randomised where it has "
                                   "them (None: the time limit or 100, at most 32768 / num_envs; 0: off)",
                                   (int,), low=0, optional=True),
        "acting_threads": Param("auto", "torch intra-op threads while a rollout acts (its forwards are small): "
                                "'auto' = 1 when the source steps on worker threads of its own in this "
                                "process (envpool on CPU: torch's spinning OpenMP threads would take their "
                                "cores), else unchanged; an int: that many; None: unchanged. The update "
                                "keeps torch's threads", (str, int), optional=True,
                                check=(lambda v: v == "auto" or (isinstance(v, int) and not isinstance(v, bool)
                                                                 and v >= 1), "'auto', an int >= 1 or None")),
        "compile": COMPILE,
    }

    def resolved_horizon(self) -> int:
        """Env steps per env per iteration (the rollout's T): ``rollout_length``, or
        under Stooke's rule ``total_batch_size // num_envs``. The algorithm keeps the
        result as ``algo.horizon``."""
        if self.total_batch_size is not None:
            return max(1, self.total_batch_size // self.num_envs)
        return self.rollout_length
