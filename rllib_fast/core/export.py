"""Policy export: a trained policy as one ONNX or TorchScript file.

What is exported is the greedy actor alone, as ``get_module().forward_inference``
computes it: raw observations in, the env action out, with the observation
normalisation and the action scaling/clipping baked in. Nothing of rllib_fast,
Ray or the simulator is needed to run it (``onnxruntime`` or ``torch.jit.load``).
Which policy a file holds, the algorithm and the module say themselves
(``FastAlgorithm.policy_module``, ``FastTorchRLModule.select``): an algorithm of
one policy exports it; a population exports one member, the best one (CEM-RL:
its mean policy) or ``member=k``.

A recurrent policy (FastPPO's ``rnn_type`` with a memory on the actor) is
exported with its memory state as explicit inputs and outputs, named as
rsl_rl's exports name them: ``(obs, h_in) -> (actions, h_out)`` for a GRU,
``(obs, h_in, c_in) -> (actions, h_out, c_out)`` for an LSTM, states
``[num_layers, batch, rnn_hidden_size]``. The caller starts every episode from
zeros and feeds each step's outputs back as the next step's inputs.

Every algorithm checkpoint also holds its policy as an RLlib module checkpoint
at ``<checkpoint>/learner_group/learner/rl_module/default_policy`` (where RLlib
places the module of its own algorithms), so ``RLModule.from_checkpoint`` on
that path works as for RLlib's PPO, and exporting from a checkpoint only reads
that directory (no env, no learner is built).
"""
from __future__ import annotations

import copy
import json
import os
import pathlib
import warnings
from typing import Optional, Union

import numpy as np
import torch
from ray.rllib.core.columns import Columns
from ray.rllib.core.rl_module.rl_module import RLModule
from torch import nn

MODULE_PATH = "learner_group/learner/rl_module/default_policy"
FORMATS = ("onnx", "torchscript")
SUFFIX = {"onnx": ".onnx", "torchscript": ".pt"}
# Written next to the module checkpoint; bumped when what a module directory holds changes.
POLICY_FORMAT = 1
POLICY_INFO_FILE = "rllib_fast_policy.json"


class ExportError(ValueError):
    """A policy that cannot be loaded or exported (one line naming why)."""


# ---------------------------------------------------------------------------
# checkpoints
# ---------------------------------------------------------------------------
def save_policy_module(algo, path: Union[str, pathlib.Path], filesystem=None, use_msgpack: bool = False) -> None:
    """Write ``algo.get_module()`` as an RLModule checkpoint under
    ``<path>/learner_group/learner/rl_module/default_policy`` (called by
    ``FastAlgorithm.save_to_path``)."""
    module = algo.get_module()
    if module is None:
        return
    sub = f"{str(path).rstrip('/')}/{MODULE_PATH}"
    module.save_to_path(sub, filesystem=filesystem, use_msgpack=use_msgpack)
    info = json.dumps({"format": POLICY_FORMAT, "algorithm": type(algo).__name__,
                       "rllib_fast": _version()}).encode()
    if filesystem is None:
        pathlib.Path(sub, POLICY_INFO_FILE).write_bytes(info)
    else:
        with filesystem.open_output_stream(f"{sub}/{POLICY_INFO_FILE}") as f:
            f.write(info)


def _version() -> str:
    from .. import __version__

    return __version__


def load_policy_module(checkpoint: Union[str, pathlib.Path], member: Optional[int] = None) -> RLModule:
    """The greedy policy module of an algorithm checkpoint (or of a module
    directory itself), on the CPU; ``member`` picks a population member.
    Raises :class:`ExportError` (one line) for anything unusable."""
    ckpt = pathlib.Path(checkpoint)
    if not ckpt.is_dir():
        raise ExportError(f"checkpoint {ckpt} does not exist or is not a directory")
    mdir = ckpt if (ckpt / POLICY_INFO_FILE).is_file() else ckpt / MODULE_PATH
    info_file = mdir / POLICY_INFO_FILE
    if not info_file.is_file():
        raise ExportError(f"checkpoint {ckpt} has no rllib_fast policy at {MODULE_PATH}; it is not an rllib_fast "
                          "algorithm checkpoint or was written by another rllib_fast version (restore it with "
                          "Algorithm.from_checkpoint and save it again)")
    try:
        info = json.loads(info_file.read_text())
        fmt = info["format"]
    except Exception as err:  # noqa: BLE001 - any unreadable info file means the same thing
        raise ExportError(f"checkpoint {ckpt}: {info_file} cannot be read ({type(err).__name__}); "
                          "the checkpoint is incomplete or corrupted") from None
    if fmt != POLICY_FORMAT:
        raise ExportError(f"checkpoint {ckpt} was written by another rllib_fast version (policy format {fmt!r}, "
                          f"rllib_fast {info.get('rllib_fast', '?')}); this version ({_version()}) reads policy "
                          f"format {POLICY_FORMAT}")
    try:
        module = RLModule.from_checkpoint(str(mdir))
    except Exception as err:  # noqa: BLE001 - pickle/torch/RLlib errors of a damaged directory
        reason = (str(err).strip().splitlines() or [""])[0][:200]
        raise ExportError(f"checkpoint {ckpt}: the policy module at {mdir} cannot be read "
                          f"({type(err).__name__}: {reason}); it is incomplete or corrupted") from None
    return _pick_member(module, member)


def _pick_member(module: RLModule, member: Optional[int]) -> RLModule:
    """The one policy of a loaded module that a file holds (``module.select``)."""
    try:
        return module.select(member)
    except ValueError as err:
        raise ExportError(str(err)) from None


def _algorithm_module(algo, member: Optional[int]) -> RLModule:
    """The algorithm's greedy policy on its own (``algo.policy_module``)."""
    try:
        return algo.policy_module(member)
    except ValueError as err:
        raise ExportError(str(err)) from None


# ---------------------------------------------------------------------------
# export
# ---------------------------------------------------------------------------
class PolicyGraph(nn.Module):
    """``obs -> actions``: an RLModule's ``forward_inference`` as a plain
    tensor function (what ONNX and TorchScript trace)."""

    def __init__(self, module: RLModule):
        super().__init__()
        self.module = module

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return self.module.forward_inference({Columns.OBS: obs})[Columns.ACTIONS]


class RecurrentPolicyGraph(nn.Module):
    """``(obs, h_in[, c_in]) -> (actions, h_out[, c_out])``: one greedy step of a
    recurrent policy (``recurrent_module.RecurrentActorCriticModule.act``) with its
    memory state explicit, what ONNX and TorchScript trace."""

    def __init__(self, module: RLModule):
        super().__init__()
        self.module = module
        self.lstm = module.pi_memory.parts == 2

    def forward(self, obs: torch.Tensor, h_in: torch.Tensor, c_in: Optional[torch.Tensor] = None):
        memory = torch.stack((h_in, c_in)) if self.lstm else h_in.unsqueeze(0)
        _, _, actions, memory = self.module.act(obs, memory, deterministic=True)
        if self.lstm:
            return actions, memory[0], memory[1]
        return actions, memory[0]


def is_recurrent_policy(module: RLModule) -> bool:
    """Whether ``module``'s greedy policy reads a memory (exported with state inputs)."""
    return getattr(module, "pi_memory", None) is not None


def example_states(module: RLModule, batch: int = 2) -> tuple:
    """Zero memory states ``[num_layers, batch, hidden]`` (h, and c for an LSTM)."""
    m = module.pi_memory
    return tuple(torch.zeros(m.num_layers, batch, m.hidden_size) for _ in range(m.parts))


def example_observations(module: RLModule, batch: int = 2) -> torch.Tensor:
    space = module.observation_space
    space.seed(0)
    return torch.as_tensor(np.stack([space.sample() for _ in range(batch)]))


def export_module(module: RLModule, path: Union[str, pathlib.Path], format: str = "onnx") -> str:
    """Write ``module``'s greedy policy to ``path`` (a copy on the CPU is traced)."""
    if format not in FORMATS:
        raise ExportError(f"format={format!r}; allowed: {', '.join(FORMATS)}")
    # parameters frozen: the traced file's actions carry no autograd history (`.numpy()` works)
    recurrent = is_recurrent_policy(module)
    graph = (RecurrentPolicyGraph if recurrent else PolicyGraph)(copy.deepcopy(module).cpu())
    graph = graph.eval().requires_grad_(False)
    inputs = (example_observations(module),) + (example_states(module) if recurrent else ())
    in_names = ["obs", "h_in", "c_in"][:len(inputs)]
    out_names = ["actions", "h_out", "c_out"][:len(inputs)]
    batch = torch.export.Dim("batch")
    dynamic = ({0: batch},) + tuple({1: batch} for _ in inputs[1:])
    path = str(path)
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with torch.no_grad(), warnings.catch_warnings():
        # shape checks of the stacked layers are constants for a fixed member count
        warnings.simplefilter("ignore", torch.jit.TracerWarning)
        if format == "torchscript":
            torch.jit.trace(graph, inputs, check_trace=False).save(path)
        else:
            _require_onnx()
            # torch.export-based exporter (the legacy TorchScript-based one is deprecated)
            torch.onnx.export(graph, inputs, path, input_names=in_names, output_names=out_names,
                              dynamic_shapes=dynamic, dynamo=True, verbose=False, external_data=False)
    return path


def _require_onnx() -> None:
    import importlib.util

    missing = [m for m in ("onnx", "onnxscript") if importlib.util.find_spec(m) is None]
    if missing:
        raise ExportError(f"ONNX export needs {' and '.join(missing)}: pip install 'rllib_fast[export]' "
                          "(or use format='torchscript', which needs only torch)")


def export_policy(algo, path: Union[str, pathlib.Path], format: str = "onnx", member: Optional[int] = None) -> str:
    """``algo.export_policy``: the algorithm's greedy policy (a population's
    best member, or ``member``) as an ONNX or TorchScript file."""
    if format not in FORMATS:
        raise ExportError(f"format={format!r}; allowed: {', '.join(FORMATS)}")
    return export_module(_algorithm_module(algo, member), path, format)


def export_checkpoint(checkpoint: Union[str, pathlib.Path], format: str = "onnx",
                      out: Optional[Union[str, pathlib.Path]] = None, member: Optional[int] = None) -> str:
    """Export the policy stored in an algorithm checkpoint (``rllib-fast export``);
    ``out`` defaults to ``<checkpoint>/policy.onnx`` (``policy.pt`` for TorchScript)."""
    if format not in FORMATS:
        raise ExportError(f"format={format!r}; allowed: {', '.join(FORMATS)}")
    module = load_policy_module(checkpoint, member)
    if out is None:
        out = pathlib.Path(checkpoint) / f"policy{SUFFIX[format]}"
    return export_module(module, out, format)
