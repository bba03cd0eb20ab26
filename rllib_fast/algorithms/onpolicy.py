"""Shared machinery of the synchronous on-policy algorithms (FastPPO, FastA2C).

Stooke & Abbeel's batched sampler: every step one forward for all N envs,
written into preallocated ``[T, N]`` storage; then targets from one batched
critic pass and GAE (``_targets``). ``training_step`` reads rollout ->
targets -> update. The update is an object composed in (:class:`UpdateRule`:
PPO's minibatch epochs, A2C's one step), so the other iteration shapes
(HTS-RL's overlapped rounds, the asynchronous learners' driver) are written
once over both updates by plain subclassing of :class:`OnPolicyAlgorithm`.
"""
from __future__ import annotations

import contextlib
import math
from typing import Any, Callable, Dict, NamedTuple, Optional

import ray
import torch

from ..core.algorithm import FastAlgorithm, FastConfig
from ..core.compile import COMPILE, compiled, whole_gradient_step
from ..core.multi_learner import episode_report, log_learner_episodes
from ..core.nets import ACTIVATIONS, INITS
from ..core.params import POSITIVE_INT_LIST, Param
from ..core.rollout import RolloutStorage, compute_gae
from ..envs.base import Step
from .recurrent_module import actor_critic_class, recurrent_model_config
from .asymmetric import ASYMMETRIC_CRITIC, current_states, final_states, state_dim, step_states



def masked_mean(x: torch.Tensor, w: torch.Tensor | None, denom: torch.Tensor | None,
                dim: int | None = None) -> torch.Tensor:
    """Mean of ``x`` over the transitions ``w`` marks valid, as ``sum / denom``
    (plain mean when neither weights nor denominator are given). ``dim``: reduce
    only that axis (a population's ``[K, B]`` batch: one mean per member, ``denom``
    then ``[K]``); None: over everything."""
    if w is None and denom is None:
        return x.mean() if dim is None else x.mean(dim)
    x = x if w is None else x * w
    return (x.sum() if dim is None else x.sum(dim)) / denom


def standardize(a: torch.Tensor, w: torch.Tensor | None, reduce=None, unbiased: bool = False,
                dim: int | None = None) -> torch.Tensor:
    """Standardise advantages with (optionally masked) statistics; ``reduce``
    sums the moments over data-parallel learners so all use the global ones;
    ``unbiased``: Bessel's n / (n - 1) on the variance (rsl_rl's whole-batch form);
    ``dim``: moments along that axis only (each member of a ``[K, B]`` batch its own)."""
    w = torch.ones_like(a) if w is None else w
    total = (lambda x: x.sum()) if dim is None else (lambda x: x.sum(dim))  # noqa: E731
    m = torch.stack([total(w), total(a * w), total(a * a * w)])
    if reduce is not None:
        reduce(m)
    n = m[0].clamp_min(1.0)
    mean = m[1] / n
    var = (m[2] / n - mean ** 2).clamp_min(0.0)
    if unbiased:
        var = var * n / (n - 1.0).clamp_min(1.0)
    std = var.sqrt()
    if dim is not None:
        mean, std = mean.unsqueeze(dim), std.unsqueeze(dim)
    return (a - mean) / (std + 1e-8)


def resolve_normalize_obs(setting: Any, env: Any) -> bool:
    """``normalize_obs`` in effect: an explicit True/False, or for ``'auto'`` the
    source's ``normalize_obs_hint`` (the task authors' choice, e.g. mjlab's rsl_rl
    configs: off for Cartpole, on for the robots) and True where it gives none.
    Why the source decides: on mjlab's Cartpole balance running observation
    statistics slowed FastPPO's defaults so much that they did not reach a mean
    return of 45 within 120 s (N=256, docs/sources.md); the robots' configs ask
    for normalisation."""
    if setting != "auto":
        return bool(setting)
    hint = env.normalize_obs_hint   # declared by TensorVecEnv (None: the source gives no advice)
    return True if hint is None else bool(hint)


class Targets(NamedTuple):
    """A rollout's learning targets, flat over ``T * N`` transitions, value
    quantities in the critic's (normalised) units."""

    advantages: torch.Tensor
    value_targets: torch.Tensor
    old_values: torch.Tensor
    weights: Optional[torch.Tensor]  # 1 for valid transitions, 0 else; None when all are valid


class OnPolicyBatch(NamedTuple):
    """Everything an update rule learns from: a rollout's transitions and
    targets, flat over ``T * N`` (what ``UpdateRule.learn`` receives)."""

    obs: torch.Tensor            # normalised observations, as the policy saw them
    actions: torch.Tensor
    logp: torch.Tensor           # log-probabilities under the parameters that acted
    critic_in: torch.Tensor      # the critic's input: the observations, or the source's states (asymmetric)
    advantages: torch.Tensor
    value_targets: torch.Tensor
    old_values: torch.Tensor
    weights: Optional[torch.Tensor]  # 1 for valid transitions, 0 else; None when all are valid
    #: log-probabilities of the actions under the policy at the update's start, when the adaptive
    #: lr's KL is measured from it (FastPPO's ``kl_reference``); None: from ``logp``
    kl_logp: Optional[torch.Tensor] = None
    #: FastPPO's symmetry extension: the rollout's mirrored transitions
    #: (``extensions.symmetry.MirroredBatch``); None without it
    mirrored: Optional[Any] = None
    #: a recurrent actor-critic's sequence layout (``recurrent_module.Sequences``): where each env's
    #: episodes start and the memory states the rollout began from; None for feed-forward modules
    sequences: Optional[Any] = None


class LearnerCollectives:
    """What one learner's update shares with the other data-parallel learners
    (``dist``: a ``core.distributed.DistributedContext`` once the learner joined
    its group, else None). With one learner every method is the identity, so
    an update rule is written once for one and for L learners."""

    def __init__(self) -> None:
        self.dist = None

    @property
    def sum_(self) -> Optional[Callable[[torch.Tensor], torch.Tensor]]:
        """In-place sum over learners, or None for one learner (the ``reduce``
        argument of :func:`standardize` and of the normalisers' updates)."""
        return None if self.dist is None else self.dist.sum_

    def mean_(self, t: torch.Tensor) -> torch.Tensor:
        """In place: the mean over learners (every learner adapts from the same number)."""
        return t if self.dist is None else self.dist.mean_(t)

    def average_gradients(self, params) -> None:
        if self.dist is not None:
            self.dist.average_gradients(params)

    def mean_denominator(self, w: torch.Tensor | None, n: int, device) -> torch.Tensor | None:
        """Denominator for :func:`masked_mean` over a batch of ``n`` transitions
        with weights ``w`` (None: all valid). With L data-parallel learners it
        is the global valid count / L, so the average of the learners' losses
        (and gradients) is the masked mean over all learners' data even when
        their valid counts differ; every learner calls it (one all-reduce),
        whether or not it saw invalid transitions."""
        if self.dist is None:
            return None if w is None else w.sum().clamp_min(1.0)
        count = w.sum() if w is not None else torch.full((), float(n), device=device)
        return self.dist.sum_(count.detach().clone()).clamp_min(1.0) / self.dist.world_size


class ParamSync:
    """How a learner's parameters meet other learners' between its own steps.
    One learner alone (and data-parallel learners, whose gradients are
    averaged inside the step): nothing to do. Asynchronous learners use the
    central store's sync (``appo.learner.CentralStoreSync``)."""

    def after_update(self) -> None:
        """After every optimizer step."""

    def after_sampling_step(self, t: int) -> None:
        """Between two batched env steps of a rollout (``t``: the step just taken)."""

    def after_learn(self) -> None:
        """After the learning phase of an iteration."""


LOCAL_PARAMETERS = ParamSync()


class UpdateRule:
    """An on-policy algorithm's learning phase (rsl_rl's ``PPO.update()`` shape):
    built with everything it uses, then ``learn(batch)`` returns the
    statistics the algorithm logs.

    Built from: the actor-critic ``module``, the ``optimizer``, the ``settings``
    (the rule's config keys, :meth:`settings_from`; the algorithm hands it new
    ones when live keys change), the data-parallel ``learners``
    (:class:`LearnerCollectives`), ``after_step`` (called after every optimizer
    step: an asynchronous learner's central-store sync), the minibatch
    shuffles' ``shuffle_generator`` and ``compile`` (the loss function runs
    compiled under the ``compile`` key).

    One minibatch's whole gradient step is :meth:`gradient_step`, a function of
    explicit tensors with static shapes (forward and loss, backward, gradient
    average over learners, global-norm clip, optimizer step): the unit a
    compiler can capture as one graph. ``learn`` only loops over it. The
    rule never reads the algorithm."""

    #: the statistics ``loss`` stacks, in order (``learn`` reports their means)
    STATS: tuple = ()

    def __init__(self, module: torch.nn.Module, optimizer: torch.optim.Optimizer, settings: Any,
                 learners: LearnerCollectives, *, after_step: Callable[[], None] = LOCAL_PARAMETERS.after_update,
                 shuffle_generator: Optional[torch.Generator] = None, compile: Any = False) -> None:
        self.module, self.optimizer, self.settings, self.learners = module, optimizer, settings, learners
        self.params = list(module.parameters())
        self.device = self.params[0].device
        self.after_step = after_step
        #: None: torch's default generator (the algorithm's own stream, checkpointed)
        self.shuffle_generator = shuffle_generator
        #: the loss (forward included) as ``compile`` runs it: the same function when eager
        self.loss_fn = compiled(self.loss, compile, self.device)
        #: under ``compile``, the whole gradient step as one graph where it can be (plain Adam,
        #: no before_apply hook; one learner at call time): core.compile.WholeGradientStep
        self.whole_step = whole_gradient_step(self, compile, self.device)

    @staticmethod
    def settings_from(config) -> Any:
        """The rule's settings read from ``config`` (at build and after a live change)."""
        raise NotImplementedError("abstract: UpdateRule.settings_from")

    @staticmethod
    def make_optimizer(params, lr: float, config) -> torch.optim.Optimizer:
        """The rule's optimizer over ``params`` at learning rate ``lr``."""
        raise NotImplementedError("abstract: UpdateRule.make_optimizer")

    def training_intensity(self) -> float:
        """Average number of gradient uses of each sample."""
        raise NotImplementedError("abstract: UpdateRule.training_intensity")

    def loss(self, batch: OnPolicyBatch, idx: Optional[torch.Tensor], denom: Optional[torch.Tensor]):
        """The loss of the transitions ``idx`` of ``batch`` (None: all) and a
        stack of its detached statistics (``STATS``); ``denom``: the masked
        means' denominator (:meth:`LearnerCollectives.mean_denominator`)."""
        raise NotImplementedError("abstract: UpdateRule.loss")

    def gradient_step(self, batch: OnPolicyBatch, idx: Optional[torch.Tensor],
                      denom: Optional[torch.Tensor]) -> torch.Tensor:
        """One minibatch's whole gradient step; returns the loss statistics."""
        if self.whole_step is not None and self.learners.dist is None:
            return self.whole_step(batch, idx, denom)
        loss, stats = self.loss_fn(batch, idx, denom)
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        self.before_apply()
        self.learners.average_gradients(self.params)
        if self.settings.grad_clip is not None:
            for group in self.clip_groups():
                torch.nn.utils.clip_grad_norm_(group, self.settings.grad_clip, foreach=True)
        self.optimizer.step()
        return stats

    def clip_groups(self) -> list:
        """The parameter groups ``grad_clip`` bounds the gradient norm of, each on
        its own: all parameters together (FastPPO's ``grad_clip_scope`` may split them)."""
        return [self.params]

    def before_apply(self) -> None:
        """Between backward and the gradient's application (HTSA2C's delayed
        gradient puts the learner's parameters back here)."""

    def learn(self, batch: OnPolicyBatch) -> Dict[str, Any]:
        """Gradient steps on a rollout's batch; returns ``{statistic: value}``
        (device tensors or numbers) for the algorithm to log."""
        raise NotImplementedError("abstract: UpdateRule.learn")

    def acting_parameters(self, behaviour):
        """Context in which targets and gradients of a batch are computed when
        the parameters that acted (``behaviour``, HTS-RL's snapshot) are not the
        learner's: nothing changes for PPO and plain A2C; HTSA2C's delayed
        gradient evaluates at ``behaviour`` (``hts.algorithm.DelayedA2CUpdate``)."""
        return contextlib.nullcontext()


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
        "activation": Param("tanh", "hidden activation", (str,), choices=tuple(ACTIVATIONS)),
        "init": Param("orthogonal", "layer init of actor and critic: 'orthogonal' (gain sqrt 2 hidden, 0.01 "
                      "policy head, 1 value head, zero biases) or 'torch' (PyTorch's nn.Linear default on "
                      "every layer: rsl_rl's; ~2x fewer env steps on mjlab's ELU Cartpole, docs/sources.md)",
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
        "compile": COMPILE,
    }

    def resolved_horizon(self) -> int:
        """Env steps per env per iteration (the rollout's T): ``rollout_length``, or
        under Stooke's rule ``total_batch_size // num_envs``. The algorithm keeps the
        result as ``algo.horizon``."""
        if self.total_batch_size is not None:
            return max(1, self.total_batch_size // self.num_envs)
        return self.rollout_length


#: env steps the default start-state decorrelation may cost at most (over this learner's envs)
DECORRELATION_BUDGET = 32_768


class OnPolicyAlgorithm(FastAlgorithm):
    """The synchronous batched on-policy loop around a composed update rule
    (``UPDATE``, built in :meth:`build` as ``self.update_rule``)."""

    SUPPORTS_DATA_PARALLEL = True
    UPDATE: type = UpdateRule
    # -- construction ------------------------------------------------------------
    def build(self) -> None:
        cfg, env = self.config, self.env
        self.normalize_obs = resolve_normalize_obs(cfg.normalize_obs, env)
        # asymmetric actor-critic: the critic (and its input normaliser) read the source's states
        self.state_dim = state_dim(cfg, env, type(self).__name__)
        self.critic_key, self.final_critic_key = (("states", "final_states") if self.state_dim is not None
                                                  else ("obs", "final_obs"))
        self.module = actor_critic_class(cfg)(
            observation_space=env.single_observation_space, action_space=env.single_action_space,
            inference_only=False,
            model_config={"hidden_sizes": list(cfg.hidden_sizes), "activation": cfg.activation,
                          "init": cfg.init, "std_mode": cfg.std_mode, "init_log_std": cfg.init_log_std,
                          "std_param": cfg.std_param, "clip_actions": cfg.clip_actions,
                          "normalize_obs": self.normalize_obs, "state_dim": self.state_dim,
                          **recurrent_model_config(cfg)},
        ).to(self.device)
        self.params = list(self.module.parameters())
        #: the minibatch shuffles' generator (None: torch's default generator, the algorithm's stream)
        self.shuffle_generator = self.make_shuffle_generator()
        self.optimizer = self.UPDATE.make_optimizer(self.params, self.configured_lr(), cfg)
        self.param_sync = LOCAL_PARAMETERS  # asynchronous learners swap in their central-store sync
        self.update_rule = self.make_update_rule()
        self.horizon = cfg.resolved_horizon()
        # The MLP policy sees flattened observations (`_normalize_obs`), so storage
        # holds them flat too (image sources such as MinAtar included).
        obs_shape, act_shape = (math.prod(env.obs_shape),), env.action_shape
        act_dtype = torch.int64 if env.is_discrete else torch.float32
        self.storage = RolloutStorage(self.horizon, env.num_envs, {
            "obs": (obs_shape, torch.float32), "final_obs": (obs_shape, torch.float32),
            "actions": (act_shape, act_dtype), "logp": ((), torch.float32),
            "rewards": ((), torch.float32), "terminated": ((), torch.bool), "done": ((), torch.bool),
            "valid": ((), torch.bool),
            **({"raw_obs": (obs_shape, torch.float32)} if self.normalize_obs else {}),
            # raw states; `_prepare_critic_inputs` normalises them in place once per batch
            **({k: ((self.state_dim,), torch.float32) for k in ("states", "final_states")}
               if self.state_dim is not None else {}),
        }, self.device)
        self.states = current_states(env) if self.state_dim is not None else None
        self.any_invalid = False  # flips to True the first time a source reports valid=False masks
        # the act step's tensor function, compiled when `compile` is set (the same function eager)
        self._act_fn = compiled(self._act_step, cfg.compile, self.device)
        self._decorrelate()

    def make_shuffle_generator(self) -> Optional[torch.Generator]:
        """The generator of the minibatch shuffles: None, torch's default one
        (the algorithm's own stream). HTS gives its learner thread its own."""
        return None

    def make_update_rule(self) -> UpdateRule:
        """The rule (``UPDATE``) built with what it uses: module, optimizer,
        settings, the learner group's collectives, the parameter sync."""
        cfg = self.config
        return self.UPDATE(self.module, self.optimizer, self.UPDATE.settings_from(cfg), self.collectives,
                           after_step=self.param_sync.after_update, shuffle_generator=self.shuffle_generator,
                           compile=cfg.compile)

    @property
    def collectives(self) -> LearnerCollectives:
        """This learner's collectives with the other data-parallel learners."""
        if "_collectives" not in self.__dict__:
            self._collectives = LearnerCollectives()
        return self._collectives

    @property
    def dist(self):
        """The ``DistributedContext`` when this is one of several data-parallel
        learners (set by ``core.multi_learner.join_group``), else None."""
        return self.collectives.dist

    @dist.setter
    def dist(self, value) -> None:
        self.collectives.dist = value

    def _normalize_obs(self, obs: torch.Tensor, update: bool) -> torch.Tensor:
        if update and self.normalize_obs:
            self.module.obs_norm.update(obs.float().reshape(obs.shape[0], -1), reduce=self.reduce_over_learners)
        return self.module.policy_input(obs)

    @torch.no_grad()
    def _decorrelate(self) -> None:
        """Start-state decorrelation, so the N envs do not move in lock-step.

        A source with episode clocks (``randomize_episode_progress``: mjlab,
        Isaac Lab, Isaac Gym, the built-in tasks) gets its clocks randomised
        (rsl_rl's ``init_at_random_ep_len``), at no env-step cost. Then Stooke &
        Abbeel §5.3: env i takes k_i ~ U[0, K] uniform-random actions, then the
        initial policy until K. By default K is the time limit (or 100) but at
        most ``DECORRELATION_BUDGET / N``, so the phase costs at most 32,768 env
        steps: on the built-in tasks at their default N it is the whole time
        limit (and helps: FastPPO CartPole needed 164k env steps to 475 with
        clocks only vs 159k with it, 32k of which were the cheap random phase),
        while on a slow simulator with long episodes an unbounded phase is most
        of a run (mjlab Cartpole, N=1024: 1M env steps, a minute of this CPU's
        physics; docs/sources.md). The first, partial episode of each env is not
        counted in the episode statistics."""
        k_max = self.config.decorrelate_steps
        n = self.env.num_envs
        if k_max is None:
            k_max = min(self.env.max_episode_steps or 100, max(1, DECORRELATION_BUDGET // n))
        elif k_max <= 0:
            return
        if hasattr(self.env, "randomize_episode_progress"):
            self.env.randomize_episode_progress()
        k = torch.randint(0, k_max + 1, (n,), device=self.device)
        for t in range(k_max):
            policy_a = self._exploration_action(self._normalize_obs(self.obs, update=True))
            random_a = self.env.sample_actions()
            use_random = (t < k).view(-1, *([1] * (random_a.dim() - 1)))
            step = self.env.step(torch.where(use_random, random_a, self.module.to_env_action(policy_a)))
            self._after_env_step(step)
            self.obs = step.obs
            if self.states is not None:
                self.states = step_states(step)
        self.log_env_steps(k_max * n * self.world_size)  # every learner decorrelates its envs
        self.tracker.skip_current_episodes()

    def _exploration_action(self, obs_n: torch.Tensor) -> torch.Tensor:
        """A sampled action (policy units) for the current normalised observations of
        the training envs (a recurrent policy also advances its memory)."""
        return self.module.sample(obs_n)[0]

    def _after_env_step(self, step: Step) -> None:
        """After every env step of the training envs (a recurrent policy forgets the
        episodes that ended)."""

    def pool_over_learners(self, reduce) -> None:
        # start-state decorrelation updated each learner's observation statistics alone
        # (at build, before the group existed): without this, the join's broadcast kept
        # learner 0's and dropped the others' observations
        if self.normalize_obs:
            self.module.obs_norm.pool(reduce)

    @property
    def reduce_over_learners(self):
        """In-place sum over data-parallel learners, or None for one learner."""
        return self.collectives.sum_

    def apply_live_hyperparameters(self) -> None:
        super().apply_live_hyperparameters()
        self.update_rule.settings = self.UPDATE.settings_from(self.config)

    def use_optimizer(self, optimizer: torch.optim.Optimizer, param_sync: "ParamSync | None" = None) -> None:
        """Replace the optimizer (and how parameters are synchronised with
        other learners): how an asynchronous learner (FastAPPO/FastA3C) makes a
        plain FastPPO/FastA2C step against the central store. The rule is
        built again around them."""
        self.optimizer = optimizer
        self.param_sync = param_sync if param_sync is not None else LOCAL_PARAMETERS
        self.update_rule = self.make_update_rule()

    def training_intensity(self) -> float:
        """Average number of gradient uses of each sample."""
        return self.update_rule.training_intensity()

    def _learn(self, targets: Targets) -> None:
        """The update: the rule learns from the rollout's batch, the algorithm logs its statistics."""
        for key, value in self.update_rule.learn(self._batch(targets)).items():
            self.log_learner(key, value)

    def _batch(self, targets: Targets) -> OnPolicyBatch:
        """The rollout in storage and its targets as the batch an update rule learns from."""
        st = self.storage
        return OnPolicyBatch(st.flat("obs"), st.flat("actions"), st.flat("logp"), st.flat(self.critic_key),
                             *targets)

    def optimizers(self) -> list:
        return [self.optimizer]

    def stateful_components(self) -> Dict[str, Any]:
        return {**super().stateful_components(), "module": self.module, "optimizer": self.optimizer}

    # -- acting --------------------------------------------------------------------
    @torch.no_grad()
    def compute_actions(self, obs: torch.Tensor, explore: bool = True) -> torch.Tensor:
        a, _ = self.module.sample(self._normalize_obs(obs, update=False), deterministic=not explore)
        return self.module.to_env_action(a)

    # -- one iteration: rollout, targets, update -----------------------------------------
    def training_step(self) -> None:
        """Rollout and learn; with data-parallel learners the remote ones run
        the same step concurrently (their collectives pair with ours)."""
        remote = self._dp_group.start_step() if self._dp_group is not None else []
        with self.metrics.log_time(("timers", "rollout")):
            self._rollout()
        with self.metrics.log_time(("timers", "learn")):
            batch = self._targets()
            self._learn(batch)
            self.param_sync.after_learn()
        if self.dist is None:
            self.tracker.log_to(self.metrics)
        elif self._dp_group is not None:  # learner 0 reports all learners' episodes as one population
            log_learner_episodes(self.metrics, [episode_report(self.tracker), *ray.get(remote)])
        n = self.horizon * self.env.num_envs * self.world_size
        self.log_env_steps(n)
        self.log_trained_steps(n)
        self.log_learner("training_intensity", self.training_intensity())
        self.log_learner("num_learners", self.world_size)

    @torch.no_grad()
    def _rollout(self) -> None:
        """T batched steps. Observation statistics stay frozen during the
        rollout (stored normalised obs are exactly what the policy saw) and
        absorb the whole rollout once at the end; episode accounting is also
        one batched update per rollout."""
        env, st, module = self.env, self.storage, self.module
        for t in range(self.horizon):
            if self.normalize_obs:
                st["raw_obs"][t].copy_(self.obs.reshape(self.obs.shape[0], -1))
            if self.states is not None:   # before the step: a source may reuse its states buffer
                st["states"][t].copy_(self.states)
            obs_n, action, logp, env_action = self._act_fn(self.obs)
            step = self._step_env(env_action)
            self._after_env_step(step)
            if step.valid is not None:
                self.any_invalid = True
                st["valid"][t].copy_(step.valid)
            else:
                st["valid"][t].fill_(True)
            st.insert(t, obs=obs_n, final_obs=self._normalize_obs(step.final_obs, update=False),
                      actions=action, logp=logp, rewards=step.reward, terminated=step.terminated,
                      done=step.terminated | step.truncated)
            self._record_step(t, step)
            self.obs = step.obs
            if self.states is not None:
                st["final_states"][t].copy_(final_states(step))
                self.states = step_states(step)
            self.param_sync.after_sampling_step(t)
        valid = st["valid"] if self.any_invalid else None
        self.tracker.update_batch(st["rewards"], st["done"], valid)
        if self.normalize_obs:
            module.obs_norm.update(st["raw_obs"], mask=valid, reduce=self.reduce_over_learners)

    def _record_step(self, t: int, step: Step) -> None:
        """After env step ``t`` of a rollout, before the next observation replaces
        the current one: where an algorithm's extensions read the step (FastPPO's
        curiosity keeps the next observations). Nothing by default."""

    def _step_env(self, actions: torch.Tensor) -> Step:
        """One batched env step of a rollout (FastPPO's learn_while_stepping learns
        while the simulator computes it: ``ppo.overlap``)."""
        return self.env.step(actions)

    def _act_step(self, obs: torch.Tensor):
        """The act step's tensor work (what ``compile`` compiles): normalised
        observations, sampled actions, their log-probabilities, env actions."""
        obs_n = self.module.policy_input(obs)
        action, logp = self.module.sample(obs_n)
        return obs_n, action, logp, self.module.to_env_action(action)

    @torch.no_grad()
    def _prepare_critic_inputs(self, valid) -> None:
        """Asymmetric critic: the batch's raw states absorb into the state
        statistics, then ``states``/``final_states`` are normalised in place
        (once per batch, so the critic sees one normalisation in targets and
        loss). Nothing to do when the critic reads the (already normalised)
        observations."""
        if self.state_dim is None:
            return
        st, module = self.storage, self.module
        if self.normalize_obs:
            module.state_norm.update(st["states"], mask=valid, reduce=self.reduce_over_learners)
        for key in ("states", "final_states"):
            st[key].copy_(module.critic_input(st.flat(key)).view_as(st[key]))

    def _target_values(self, critic_in: torch.Tensor) -> torch.Tensor:
        """State values (return units) of prepared critic inputs, for GAE and
        value targets: the current critic's. HTS may use the critic that
        acted instead (its ``value_targets`` key)."""
        v_n = self.module.value(critic_in)
        return self.module.value_norm.denormalize(v_n) if self.config.normalize_values else v_n

    def _rollout_values(self):
        """``V(s_t)`` and ``V(final_obs_t)`` ``[T, N]`` (return units) of the rollout's
        prepared critic inputs, in one batched critic pass."""
        st = self.storage
        both = torch.cat([st.flat(self.critic_key), st.flat(self.final_critic_key)])
        return self._target_values(both).view(2, self.horizon, self.env.num_envs)

    def _targets(self) -> Targets:
        """Values of the critic's inputs (normalised observations, or states)
        and of ``final_obs`` (``final_states``) in one batched critic
        pass, GAE with time-out bootstrapping, value-normaliser update."""
        cfg, st, module = self.config, self.storage, self.module
        T, N = self.horizon, self.env.num_envs
        B = T * N
        valid = st["valid"] if self.any_invalid else None
        self._prepare_critic_inputs(valid)
        with torch.no_grad():
            values, next_values = self._rollout_values()
            vnorm = module.value_norm
            adv, ret = compute_gae(st["rewards"], values, next_values, st["terminated"], st["done"],
                                   cfg.gamma, cfg.lambda_, valid)
            if cfg.normalize_values:
                vnorm.update(ret, mask=valid, reduce=self.reduce_over_learners)
                targets = vnorm.normalize(ret).reshape(B)
                old_v = vnorm.normalize(values).reshape(B)
            else:
                targets, old_v = ret.reshape(B), values.reshape(B)
        w = valid.reshape(B).float() if valid is not None else None
        return Targets(adv.reshape(B), targets, old_v, w)

