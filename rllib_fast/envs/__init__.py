"""Tensor vector envs: the contract, built-in torch tasks and adapters."""
from .base import EnvContractError, Step, TensorVecEnv, validate_env
from .registry import UnknownEnvError, is_known, list_envs, make

__all__ = ["EnvContractError", "Step", "TensorVecEnv", "validate_env", "UnknownEnvError",
           "is_known", "list_envs", "make"]
