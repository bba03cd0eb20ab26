"""FastPPO hyperparameters (names follow RLlib's PPO where one exists)."""
from __future__ import annotations

from ...core.algorithm import FastConfig
from ...core.params import POSITIVE_INT_LIST, Param
from ...core.nets import ACTIVATIONS


class FastPPOConfig(FastConfig):
    """Synchronous batched-inference PPO (Stooke & Abbeel 2018, §4.1/§5).

    Batch per iteration = ``rollout_length * num_envs``. With
    ``total_batch_size`` set, Stooke's scaling rule holds the total batch fixed
    and derives the horizon: ``rollout_length = total_batch_size // num_envs``
    (the paper keeps 2,048 while going from 8 to 512 envs). Training intensity
    (uses of each sample) is ``num_epochs`` and is logged.
    """

    HYPERPARAMETERS = {
        "rollout_length": Param(32, "env steps per env per iteration (horizon T)", (int,), low=1),
        "total_batch_size": Param(None, "Stooke's rule: fixed T*N; rollout_length = total_batch_size // num_envs",
                                  (int,), low=1, optional=True),
        "num_epochs": Param(4, "passes over each batch (= training intensity)", (int,), low=1),
        "num_minibatches": Param(4, "minibatches per epoch", (int,), low=1),
        "clip_param": Param(0.2, "PPO ratio clip epsilon", low=0.0, high=1.0, low_open=True, live=True),
        "vf_clip_param": Param(0.2, "value clip around old values, in normalised value units (None: off)",
                               low=0.0, low_open=True, optional=True, live=True),
        "vf_loss_coeff": Param(0.5, "value loss weight", low=0.0, live=True),
        "entropy_coeff": Param(0.0, "entropy bonus weight", low=0.0, live=True),
        "lambda_": Param(0.95, "GAE lambda", low=0.0, high=1.0, live=True),
        "normalize_obs": Param(True, "running mean/std observation normalisation on device", (bool,)),
        "normalize_values": Param(True, "critic predicts returns normalised by running statistics", (bool,)),
        "normalize_advantages": Param(True, "standardise advantages per minibatch", (bool,), live=True),
        "hidden_sizes": Param([64, 64], "hidden layer sizes of actor and critic", (list, tuple),
                              check=POSITIVE_INT_LIST),
        "activation": Param("tanh", "hidden activation", (str,), choices=tuple(ACTIVATIONS)),
        "std_mode": Param("state_independent", "Gaussian std: a free parameter or a head output",
                          (str,), choices=("state_independent", "state_dependent")),
        "init_log_std": Param(0.0, "initial log std of the Gaussian policy", low=-10.0, high=5.0),
        "decorrelate_steps": Param(None, "start-state decorrelation: env i first takes k_i ~ U[0, this] random "
                                   "actions (None: the env's time limit or 100; 0: off)", (int,), low=0,
                                   optional=True),
        "adaptive_lr_kl_target": Param(None, "adapt lr to keep the epoch KL near this target (None: off)",
                                       low=0.0, low_open=True, optional=True),
        "adaptive_lr_bounds": Param([1e-6, 1e-2], "min/max lr for adaptive-KL lr", (list, tuple),
                                    check=(lambda v: len(v) == 2 and 0 < v[0] <= v[1], "[min, max] with 0 < min <= max")),
    }

    def __init__(self, algo_class=None):
        from .algorithm import FastPPO

        super().__init__(algo_class=algo_class or FastPPO)
        self.lr = 3e-4
        self.grad_clip = 0.5

    def horizon(self) -> int:
        if self.total_batch_size is not None:
            return max(1, self.total_batch_size // self.num_envs)
        return self.rollout_length

    def validate_algorithm(self) -> None:
        batch = self.horizon() * self.num_envs
        if batch < self.num_minibatches:
            self._value_error(f"FastPPOConfig: `num_minibatches` = {self.num_minibatches} exceeds the batch "
                              f"rollout_length*num_envs = {batch}; allowed: <= {batch}")
