"""FastPPO hyperparameters (names follow RLlib's PPO where one exists)."""
from __future__ import annotations

from ...core.precision import UPDATE_DTYPES
from ...core.params import Param, real_pair, with_defaults
from ...core.start_method import START_METHODS
from ..extensions.rnd import rnd_error
from ..extensions.symmetry import symmetry_error
from .loss import SURROGATE_CLIPS
from ..onpolicy.config import OnPolicyConfig
from ..recurrent_module import RECURRENT_HYPERPARAMETERS


class FastPPOConfig(OnPolicyConfig):
    """Synchronous batched-inference PPO (Stooke & Abbeel 2018, §4.1/§5).

    Batch per iteration = ``rollout_length * num_envs``. With
    ``total_batch_size`` set, Stooke's scaling rule holds the total batch fixed
    and derives the horizon: ``rollout_length = total_batch_size // num_envs``
    (the paper keeps 2,048 while going from 8 to 512 envs). Training intensity
    (uses of each sample) is ``num_epochs`` and is logged.
    """

    # Defaults: rsl_rl's / Isaac Lab's PPO recipe (lr 1e-3 held near an epoch KL
    # of 0.01, 5 epochs x 4 minibatches, clipped value loss) at 64 envs x 64
    # steps. The value clip stays (rsl_rl's 0.2, here in normalised value units):
    # the classic tasks learn without it too, but the simulator tasks these
    # defaults are for need it (docs/defaults.md has the runs behind both choices).
    HYPERPARAMETERS = {
        **with_defaults(OnPolicyConfig, lr=1e-3, grad_clip=0.5, rollout_length=64),
        "num_epochs": Param(5, "passes over each batch (= training intensity)", (int,), low=1),
        "num_minibatches": Param(4, "minibatches per epoch", (int,), low=1),
        "clip_param": Param(0.2, "PPO ratio clip epsilon", low=0.0, high=1.0, low_open=True, live=True),
        "vf_clip_param": Param(0.2, "value clip around old values, in normalised value units (None: off)",
                               low=0.0, low_open=True, optional=True, live=True),
        "adaptive_lr_kl_target": Param(0.01, "adapt lr to keep the epoch KL near this target (None: off)",
                                       low=0.0, low_open=True, optional=True),
        "learn_while_stepping": Param(False, "learn each rollout's batch during the next rollout, a few "
                                      "minibatch steps while the simulator computes each env step (the "
                                      "simulator runs in its own process; a registered env name is put in "
                                      "one): the simulator waits only for the policy's forward, the policy "
                                      "acts up to one update late (FastPPO only; docs/design-notes.md)",
                                      (bool,)),
        "learn_steps_per_env_step": Param(20, "learn_while_stepping: minibatch steps taken while the simulator "
                                          "computes one env step, from the rollout's first step until the "
                                          "update is done (None: spread evenly over the rollout); the policy "
                                          "acts stale only until the update is done, so the largest number "
                                          "that fits in about one step's simulation time is best (20: a 5 x 4 "
                                          "update in the first step's shadow; docs/design-notes.md)",
                                          (int,), low=1, optional=True),
        "simulator_start_method": Param("auto", "learn_while_stepping: how the simulator process of a registered "
                                        "env name starts ('auto': fork where the OS has it -- a copy of this "
                                        "process, the source already imported -- else spawn, which imports "
                                        "torch, rllib_fast and the source again)",
                                        (str,), choices=START_METHODS),
        "adaptive_lr_bounds": Param([1e-6, 1e-2], "min/max lr for adaptive-KL lr", (list, tuple),
                                    check=(lambda v: real_pair(v) and 0 < v[0] <= v[1], "[min, max] numbers, 0 < min <= max")),
        "adaptive_lr_every": Param("epoch", "when the adaptive-KL lr adapts: 'epoch' (after each epoch, from its "
                                   "minibatches' mean KL) or 'minibatch' (before each minibatch's step, from that "
                                   "minibatch's KL, and that step uses it; grows only when KL > 0: rsl_rl's; no "
                                   "host sync with the fused Adam)", (str,), choices=("epoch", "minibatch")),
        "kl_estimator": Param("k3", "the KL the adaptive lr reads: 'k3' (mean((r-1) - log r) over the sampled "
                              "actions) or 'analytic' (exact KL(old || new) of the Gaussians/categoricals, old = "
                              "the policy at the update's start: rsl_rl's)", (str,), choices=("k3", "analytic")),
        "kl_reference": Param("auto", "the policy the adaptive lr's k3 KL is measured from: 'behaviour' (the "
                              "parameters that acted: the rollout's stored log-probabilities) or 'update_start' "
                              "(the policy when this update began: one no-grad pass over the batch per update, so "
                              "the KL is this update's own movement, not also how far the acting policy lagged); "
                              "'auto': 'update_start' with learn_while_stepping (its first env steps act with "
                              "the policy one update behind), else 'behaviour' (the same policy then). The "
                              "analytic estimator measures from the update's start, or with 'previous_epoch' "
                              "from the policy each sample had when the previous epoch stepped on it (rl_games' "
                              "KL: one epoch's movement, so its adaptive lr runs higher; needs kl_estimator "
                              "'analytic')",
                              (str,), choices=("auto", "behaviour", "update_start", "previous_epoch")),
        "normalize_advantages_over": Param("minibatch", "with normalize_advantages, the statistics advantages are "
                                           "standardised with: 'minibatch' (each minibatch's, biased std) or "
                                           "'batch' (once over the whole batch, unbiased std: rsl_rl's)", (str,),
                                           choices=("minibatch", "batch"), live=True),
        "grad_clip_scope": Param("global", "how grad_clip applies: 'global' (one norm over all parameters) or "
                                 "'per_network' (actor and critic each clipped to grad_clip: rsl_rl's)", (str,),
                                 choices=("global", "per_network")),
        "shuffle": Param("epoch", "minibatch order: 'epoch' (a new permutation every epoch), 'once' (one "
                         "permutation per update, reused by every epoch: rsl_rl's) or 'none' (storage order; with "
                         "rnn_type, contiguous blocks of envs: rsl_rl's recurrent minibatches)", (str,),
                         choices=("epoch", "once", "none")),
        "surrogate_clip": Param("hard", "how the surrogate bounds the probability ratio: 'hard' (PPO's clamp to "
                                "[1 - clip_param, 1 + clip_param]) or 'smooth' (a sigmoid between the same bounds, "
                                "slope 1 at ratio 1, whose gradient shrinks instead of stopping: rl_games' "
                                "use_smooth_clamp, on in its MuJoCo/Isaac Gym configs)", (str,),
                                choices=SURROGATE_CLIPS, live=True),
        "bounds_loss_coeff": Param(0.0, "weight of rl_games' bound loss: sum over action dimensions of the squared "
                                   "amount each Gaussian mean leaves [-1.1, 1.1] (continuous actions, in the "
                                   "policy's [-1, 1] units; rl_games' Humanoid uses 0.0005); 0: off", low=0.0,
                                   live=True),
        "shared_trunk": Param(False, "one network for policy and value: every hidden layer shared, each a linear "
                              "head on top (rl_games' separate: False); vf_loss_coeff then weighs how much the "
                              "value loss shapes the policy's features. The critic reads the observation (with "
                              "asymmetric_critic 'auto' a source's states are then not used); not with rnn_type, "
                              "grad_clip_scope 'per_network' or asymmetric_critic True", (bool,)),
        "adam_eps": Param(1e-5, "Adam epsilon (rsl_rl: torch's default 1e-8)", low=0.0, low_open=True),
        "update_dtype": Param("float32", "precision of the update's training forward and backward: 'float32', "
                              "'bfloat16' (torch.autocast: the networks' matrix products in bfloat16, the "
                              "parameters, Adam, the loss's arithmetic and the acting forward stay float32; "
                              "about half the update's time where the hardware multiplies bfloat16 natively: "
                              "CPUs with AVX512-BF16 or AMX, GPUs since Ampere; slower where it is emulated; "
                              "feed-forward networks without the symmetry extension or compile), or 'auto' "
                              "(bfloat16 where the learner's device has it natively and the networks allow it, "
                              "else float32: core/precision.py)",
                              (str,), choices=UPDATE_DTYPES),
        "symmetry": Param(None, "symmetry augmentation and/or mirror loss (rsl_rl's symmetry_cfg; FastPPO, and "
                          "PopPPO per member): a dict {mirror_fn: 'module:function' or a callable (obs=, actions=, "
                          "states=) -> (mirrored obs, actions, states), use_data_augmentation: bool, "
                          "use_mirror_loss: bool, "
                          "mirror_loss_coeff: float >= 0}; built-in mirrors: "
                          "'rllib_fast.algorithms.extensions:cartpole_mirror' / ':pendulum_mirror' "
                          "(docs/rsl_rl-features.md); None: off", (dict,), optional=True),
        "rnd": Param(None, "random network distillation curiosity (rsl_rl's rnd_cfg; FastPPO): a dict of "
                     "{weight, weight_schedule, obs_group ('obs' or 'states'), obs_indices, num_outputs, "
                     "predictor_hidden_dims, target_hidden_dims, activation, state_normalization, "
                     "reward_normalization, learning_rate} (docs/rsl_rl-features.md); None: off",
                     (dict,), optional=True),
        **RECURRENT_HYPERPARAMETERS,
    }

    def validate_extensions(self) -> None:
        """The ``symmetry`` and ``rnd`` keys: well-formed, and set only for an
        algorithm that implements them (its ``EXTENSIONS``)."""
        for key, error in (("symmetry", symmetry_error), ("rnd", rnd_error)):
            value = getattr(self, key)
            if value is None:
                continue
            if key not in getattr(self.algo_class, "EXTENSIONS", ()):
                name = getattr(self.algo_class, "__name__", "this algorithm")
                self._value_error(f"{type(self).__name__}: `{key}` is FastPPO's extension; {name} does not "
                                  "implement it; allowed: None")
            msg = error(value, type(self).__name__)
            if msg:
                self._value_error(msg)
            if self.learn_while_stepping:
                self._value_error(f"{type(self).__name__}: `{key}` is not implemented with `learn_while_stepping` "
                                  "= True; allowed: learn_while_stepping = False")
        if self.rnd is not None and (self.num_learners or 0) > 1:   # each learner would train its own predictor
            self._value_error(f"{type(self).__name__}: `rnd` needs one learner (`num_learners` = "
                              f"{self.num_learners}); allowed: num_learners <= 1")

    def validate_shared_trunk(self) -> None:
        """``shared_trunk`` = True: one trunk reads one input for both heads, so
        nothing may give the critic its own input or its own gradient norm."""
        name = type(self).__name__
        if self.rnn_type is not None:
            self._value_error(f"{name}: `shared_trunk` = True is for feed-forward networks (`rnn_type` = "
                              f"{self.rnn_type!r}); allowed with shared_trunk: rnn_type = None")
        if self.grad_clip_scope != "global":
            self._value_error(f"{name}: `shared_trunk` = True shares parameters between actor and critic, so "
                              f"`grad_clip_scope` = {self.grad_clip_scope!r} cannot split them; allowed with "
                              "shared_trunk: grad_clip_scope = 'global'")
        if self.critic_hidden_sizes is not None:
            self._value_error(f"{name}: `shared_trunk` = True shares every hidden layer between actor and critic, "
                              f"so `critic_hidden_sizes` = {list(self.critic_hidden_sizes)} cannot apply; allowed "
                              "with shared_trunk: critic_hidden_sizes = None")
        if self.asymmetric_critic is True:
            self._value_error(f"{name}: `shared_trunk` = True has the critic read the observation, "
                              "`asymmetric_critic` = True asks for the source's states; allowed with shared_trunk: "
                              "asymmetric_critic = 'auto' or False")

    def __init__(self, algo_class=None):
        from .algorithm import FastPPO

        super().__init__(algo_class=algo_class or FastPPO)

    def validate_update_dtype(self) -> None:
        """``update_dtype='bfloat16'`` covers the plain surrogate's one forward of
        feed-forward networks; the paths it does not reach are refused, not run
        in float32 silently."""
        name = type(self).__name__
        for key, value, allowed in (("rnn_type", self.rnn_type, None), ("symmetry", self.symmetry, None),
                                    ("compile", self.compile, False)):
            if value is not None and value is not False:
                self._value_error(f"{name}: `update_dtype` = 'bfloat16' is implemented for the feed-forward, "
                                  f"uncompiled surrogate only; `{key}` = {value!r}; allowed with bfloat16: "
                                  f"{key} = {allowed!r}")

    def validate_algorithm(self) -> None:
        self.validate_extensions()
        if self.update_dtype == "bfloat16":
            self.validate_update_dtype()
        if self.shared_trunk:
            self.validate_shared_trunk()
        if self.kl_reference == "previous_epoch" and self.kl_estimator != "analytic":
            self._value_error(f"{type(self).__name__}: `kl_reference` = 'previous_epoch' keeps each sample's "
                              f"Gaussian from the previous epoch, which only the analytic KL reads "
                              f"(`kl_estimator` = {self.kl_estimator!r}); allowed: kl_estimator = 'analytic'")
        if self.learn_while_stepping:
            name = getattr(self.algo_class, "__name__", "this algorithm")
            if not getattr(self.algo_class, "LEARNS_WHILE_STEPPING", False):
                self._value_error(f"{type(self).__name__}: `learn_while_stepping` = True is FastPPO's; {name} "
                                  "overlaps (or not) by its own design; allowed: False")
            if (self.num_learners or 0) > 1:
                self._value_error(f"{type(self).__name__}: `learn_while_stepping` = True needs one learner "
                                  f"(`num_learners` = {self.num_learners}); allowed: num_learners <= 1")
        if self.rnn_type is not None:
            self._validate_recurrent()
        learners = max(1, int(self.num_learners or 0))
        batch = self.resolved_horizon() * self.num_envs // learners   # each data-parallel learner splits its own share
        if batch < self.num_minibatches:
            what = (f"each learner's batch rollout_length*num_envs/num_learners (num_learners = {learners})"
                    if learners > 1 else "the batch rollout_length*num_envs")
            self._value_error(f"FastPPOConfig: `num_minibatches` = {self.num_minibatches} exceeds {what} "
                              f"= {batch}; allowed: <= {batch}")

    def _validate_recurrent(self) -> None:
        """``rnn_type`` set: the combinations the recurrent actor-critic supports."""
        name = getattr(self.algo_class, "__name__", "this algorithm")
        if not getattr(self.algo_class, "SUPPORTS_RECURRENT", False):
            self._value_error(f"{type(self).__name__}: `rnn_type` = {self.rnn_type!r} is FastPPO's; {name} has no "
                              "recurrent actor-critic; allowed: None")
        for key, value, allowed in (("learn_while_stepping", self.learn_while_stepping, False),
                                    ("compile", self.compile, False), ("symmetry", self.symmetry, None)):
            if value not in (allowed, None):
                self._value_error(f"{type(self).__name__}: `{key}` = {value!r} does not combine with `rnn_type` = "
                                  f"{self.rnn_type!r}; allowed: {allowed}")
        if (self.num_learners or 0) > 1:
            self._value_error(f"{type(self).__name__}: `rnn_type` = {self.rnn_type!r} needs one learner "
                              f"(`num_learners` = {self.num_learners}); allowed: num_learners <= 1")
        if self.num_minibatches > self.num_envs:
            self._value_error(f"{type(self).__name__}: `num_minibatches` = {self.num_minibatches} exceeds `num_envs` "
                              f"= {self.num_envs} (with rnn_type a minibatch is a set of envs' whole sequences); "
                              f"allowed: <= {self.num_envs}")
