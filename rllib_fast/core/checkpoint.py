"""What a FastAlgorithm checkpoint holds and how it is restored (split out of
``core/algorithm.py``): :class:`CheckpointedAlgorithm` implements RLlib's
``Checkpointable`` obligations once for every algorithm -- ``get_state`` /
``set_state`` (CPU copies of the stateful components, env state, the
simulator's training state, RNG stream, metrics, the applied lr), the episodes
kept from a source that cannot restore its own state, the setup record a checkpoint must match and the one-line
mismatch/read errors, ``save_to_path`` / ``restore_from_path``. Subclasses list
their parts in ``stateful_components()`` and ``extra_state()``."""
from __future__ import annotations

from typing import Any, Dict, Optional

import torch
from ray.rllib.utils.checkpoints import Checkpointable

from .export import save_policy_module
from .state import load_optimizer_state


class CheckpointMismatchError(ValueError):
    """A checkpoint written by another algorithm or setup (num_envs, network
    sizes, ...) than the one restoring it."""

    def __init__(self, detail: str):
        super().__init__(detail if detail.startswith("checkpoint ") else f"checkpoint state {detail}")
        self.detail = detail


class CheckpointReadError(ValueError):
    """A checkpoint whose state file cannot be read (truncated, corrupted, missing)."""


def _to_cpu(tree: Any) -> Any:
    """Deep-copy a state tree with every tensor moved to the CPU (so a GPU
    checkpoint loads on a CPU machine)."""
    if isinstance(tree, torch.Tensor):
        return tree.detach().to("cpu", copy=True)
    if isinstance(tree, dict):
        return {k: _to_cpu(v) for k, v in tree.items()}
    if isinstance(tree, (list, tuple)):
        return type(tree)(_to_cpu(v) for v in tree)
    return tree


class CheckpointedAlgorithm:
    """RLlib's checkpoint obligations of a FastAlgorithm (a base of :class:`~.algorithm.FastAlgorithm`)."""

    def stateful_components(self) -> Dict[str, Any]:
        """name -> object with state_dict/load_state_dict, saved in checkpoints."""
        return {"tracker": self.tracker}

    def extra_state(self) -> Dict[str, Any]:
        """Loose tensors/values to checkpoint: the current observation and, when
        the critic reads states, the states that go with it."""
        out = {"obs": self.obs}
        if self.states is not None:
            out["states"] = self.states
        return out

    def set_extra_state(self, state: Dict[str, Any]) -> None:
        self.obs = state["obs"].to(self.device)
        if self.states is not None and state.get("states") is not None:
            self.states = state["states"].to(self.device)

    # -- restoring with a source that cannot restore its own state ---------------------
    # Gymnasium, envpool, Isaac and mjlab sources return no state: after a restore the
    # env keeps running the episodes it runs now (fresh ones after a build), not the
    # checkpoint's. What belongs to those episodes -- the current observation (and
    # critic states), the tracker's running returns -- is therefore kept from the live
    # algorithm, and every episode the checkpoint had in flight ends at the checkpoint.
    def _live_episodes(self) -> Dict[str, Any]:
        states = self.states
        return {"obs": self.obs.clone(), "states": None if states is None else states.clone(),
                "tracker": self.tracker.in_flight()}

    def _keep_live_episodes(self, live: Dict[str, Any]) -> None:
        self.obs.copy_(live["obs"])    # in place: some algorithms share the buffer with workers
        if live["states"] is not None and self.states is not None:
            self.states.copy_(live["states"])
        self.tracker.set_in_flight(live["tracker"])

    def on_source_not_restored(self) -> None:
        """After a restore whose source kept its own episodes: end the episodes
        the checkpoint had in flight (algorithms with a replay or n-step windows
        cut them, as truncations at the checkpoint's observation)."""

    def get_state(self, components=None, *, not_components=None, **kwargs) -> Dict[str, Any]:
        env_state = self.env.get_state()   # None for a source that cannot restore (TensorVecEnv's default)
        return {
            "components": {k: _to_cpu(v.state_dict()) for k, v in self.stateful_components().items()},
            "extra": _to_cpu(self.extra_state()),
            "env": _to_cpu(env_state),
            # the simulator's own training state (curriculum counters), saved even when the
            # source cannot save its episodes (TensorVecEnv.get_training_state; None: nothing)
            "env_training": _to_cpu(self.env.get_training_state()),
            "rng": self.rng_stream.state_dict(),
            "metrics_logger": self.metrics.get_state(),
            "training_iteration": self.training_iteration,
            "seed": self.seed,
            "setup": self._setup(),
            # the configured lr this state was trained under (the lr in effect is in the optimizers' state)
            "applied_lr": self._applied_lr,
            "remote_learners": self._dp_group.get_states() if self._dp_group is not None else None,
        }

    def set_state(self, state: Dict[str, Any]) -> None:
        self._state_received = True  # restore_from_path: the file was read
        setup = state.get("setup") if isinstance(state, dict) else None
        # A different algorithm or env count fails late and obscurely (a tensor size
        # mismatch steps later), so these are checked before anything is loaded.
        detail = self._setup_mismatch(setup, keys=self.LAYOUT_KEYS)
        if detail is not None:
            raise CheckpointMismatchError(detail)
        source_restores = state.get("env") is not None
        live = None if source_restores else self._live_episodes()
        try:
            for k, v in self.stateful_components().items():
                if isinstance(v, torch.optim.Optimizer):   # moments from the checkpoint, settings from the config
                    load_optimizer_state(v, state["components"][k])
                else:
                    v.load_state_dict(state["components"][k])
            self.set_extra_state(state["extra"])
        except Exception as err:
            detail = self._setup_mismatch(setup)  # e.g. other hidden_sizes: name the keys, not the tensors
            if detail is not None:
                raise CheckpointMismatchError(detail) from err
            raise
        if source_restores:
            self.env.set_state(state["env"])
        else:
            self._keep_live_episodes(live)
            self.on_source_not_restored()
        if state.get("env_training") is not None:
            self.env.set_training_state(state["env_training"])
        self.rng_stream.load_state_dict(state["rng"])
        self.metrics.set_state(state["metrics_logger"])
        self._iteration = state["training_iteration"]
        if state.get("seed") is not None and int(state["seed"]) != self.seed:
            # the run's seed goes on with it: evaluation seeds its episodes from it (with
            # `seed=None` every build draws a new one, and a restored run evaluated others;
            # evaluate() reseeds its env from it at every call, so the env itself stays)
            self.seed = int(state["seed"])
        if state.get("remote_learners") and self._dp_group is not None:
            self._dp_group.set_states(state["remote_learners"])
        # Keep the restored lr in effect unless this config prescribes another lr than the
        # one the checkpoint was trained under (PBT mutated it); old checkpoints: the config's.
        self._applied_lr = state.get("applied_lr")
        self.apply_live_hyperparameters()

    def guarded_components(self) -> Dict[str, Any]:
        """The components ``nonfinite_guard='skip'`` snapshots and rolls back
        after a bad iteration (its modules and optimizers are copied): all
        stateful components unless an algorithm keeps some out."""
        return self.stateful_components()

    def get_checkpointable_components(self) -> list:
        return []

    def save_to_path(self, path=None, *, state=None, filesystem=None, use_msgpack=False) -> str:
        """Checkpointable's save, plus the policy as an RLModule checkpoint where RLlib
        puts one (``learner_group/learner/rl_module/default_policy``), so
        ``RLModule.from_checkpoint`` and ``rllib-fast export`` need no algorithm."""
        path = super().save_to_path(path, state=state, filesystem=filesystem, use_msgpack=use_msgpack)
        save_policy_module(self, path, filesystem=filesystem, use_msgpack=use_msgpack)
        return path

    def _setup(self) -> Dict[str, Any]:
        """What a checkpoint must match to be restored here: the algorithm, the
        env name and the keys that are not live (they shape envs, modules, storage)."""
        cfg = self.config
        keys = {k: getattr(cfg, k) for k, p in cfg.hyperparameter_spec().items() if not p.live}
        if isinstance(cfg.env, str):
            keys["env"] = cfg.env
        return {"algorithm": type(self).__name__, "config": keys}

    def _setup_mismatch(self, saved: Optional[Dict[str, Any]], keys=None) -> Optional[str]:
        """'was written by X with k=v; this algorithm has k=w' for the first
        differences among ``keys`` (all saved keys if None), or None."""
        if not saved:
            return None  # a checkpoint from before setups were recorded
        mine = self._setup()
        if saved["algorithm"] != mine["algorithm"]:
            return f"was written by {saved['algorithm']}; this algorithm is {mine['algorithm']}"
        theirs, ours = saved["config"], mine["config"]
        diff = [k for k in (keys or sorted(theirs)) if k in theirs and k in ours and theirs[k] != ours[k]]
        if not diff:
            return None
        return (f"was written by {saved['algorithm']} with " + ", ".join(f"{k}={theirs[k]!r}" for k in diff)
                + "; this algorithm has " + ", ".join(f"{k}={ours[k]!r}" for k in diff))

    def restore_from_path(self, path, *args, **kwargs):
        """Checkpointable's restore (Algorithm's version touches env_runner_group),
        with one-line errors for an unreadable checkpoint and for one written by
        another setup."""
        self._state_received = False
        try:
            Checkpointable.restore_from_path(self, path, *args, **kwargs)
        except CheckpointMismatchError as err:
            raise CheckpointMismatchError(f"checkpoint {path} {err.detail}") from None
        except Exception as err:
            if self._state_received:
                raise
            reason = (str(err).strip().splitlines() or [""])[0]
            raise CheckpointReadError(f"checkpoint {path} cannot be read ({type(err).__name__}: {reason}); "
                                      "it is incomplete or corrupted") from err
