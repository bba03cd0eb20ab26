"""Distillation hyperparameters (rsl_rl's ``Distillation`` names where it has them)."""
from __future__ import annotations

from ...core.memory import RNN_TYPES
from ...core.nets import ACTIVATIONS
from ...core.params import Param, with_defaults
from ..onpolicy.config import OnPolicyConfig
from ..recurrent_module import RECURRENT_HYPERPARAMETERS

#: the student's memory keys: FastPPO's, without ``rnn_on`` (the student is an actor alone)
STUDENT_RECURRENT = {
    "rnn_type": Param(
        None, "recurrent student: an 'lstm' or 'gru' memory in front of the student's MLP (rsl_rl's RNNModel "
        "student), its state carried across steps and rollouts, zeroed at episode ends; the update replays the "
        "rollout in time order from the state it began with, the state carried across gradient windows and "
        "detached between them (truncated BPTT of gradient_length steps, rsl_rl's; docs/recurrent.md); "
        "None: feed-forward", (str,), choices=RNN_TYPES, optional=True),
    "rnn_hidden_size": RECURRENT_HYPERPARAMETERS["rnn_hidden_size"],
    "rnn_num_layers": RECURRENT_HYPERPARAMETERS["rnn_num_layers"],
}


class DistillationConfig(OnPolicyConfig):
    """Student-teacher distillation (DAgger-style behaviour cloning, rsl_rl's
    ``Distillation``): the student acts on the actor observations, a trained
    teacher labels each visited state from the privileged observations, the
    student learns the teacher's actions. The rollout keys of the on-policy
    loop apply (``rollout_length``, ``num_envs``, ``normalize_obs``,
    ``hidden_sizes``...; the student is the actor of an actor-critic module,
    its critic unused); the return and value keys do not."""

    # rsl_rl's Distillation defaults: lr 1e-3, one epoch, gradient_length 15, no
    # gradient clip; Isaac Lab's 24 steps per env per iteration
    HYPERPARAMETERS = {
        **with_defaults(OnPolicyConfig, lr=1e-3, grad_clip=None, rollout_length=24),
        "teacher_checkpoint": Param(None, "the teacher: an rllib_fast algorithm checkpoint directory of an "
                                    "actor-critic policy (FastPPO, FastA2C, ...) or an rsl_rl checkpoint file "
                                    "(its actor_state_dict, or an actor state dict alone); required", (str,),
                                    optional=True),
        "teacher_obs": Param("auto", "what the teacher reads: 'states' (the source's privileged states, e.g. "
                             "the masked CartPole's full state), 'obs' (the student's observations) or 'auto' "
                             "(states when the source has them)", (str,), choices=("auto", "states", "obs")),
        "teacher_activation": Param("elu", "hidden activation of an rsl_rl teacher's MLP (its state dict does not "
                                    "say; rsl_rl's default 'elu')", (str,), choices=tuple(ACTIVATIONS)),
        "loss_type": Param("mse", "behaviour-cloning loss between the student's and the teacher's action means "
                           "(continuous) or action probabilities (discrete)", (str,), choices=("mse", "huber")),
        "gradient_length": Param(15, "env steps of the rollout per gradient step (rsl_rl's gradient_length): "
                                 "the loss of that many consecutive steps is summed, then one step",
                                 (int,), low=1),
        "num_epochs": Param(1, "passes over each rollout", (int,), low=1),
        **STUDENT_RECURRENT,
    }

    def validate_algorithm(self) -> None:
        if self.rnn_type is not None and self.compile not in (False, None):
            self._value_error(f"{type(self).__name__}: `compile` = {self.compile!r} does not combine with "
                              f"`rnn_type` = {self.rnn_type!r}; allowed: False")

    def __init__(self, algo_class=None):
        from .algorithm import Distillation

        super().__init__(algo_class=algo_class or Distillation)
