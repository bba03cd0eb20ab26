"""Hyperparameters of PQL and its sequential baselines DDPGN / SACN.

Defaults are the paper's and the released code's (Li et al. 2023, §4 and App. B),
with the sizes that only make sense for 4096 GPU envs resolved by ``"auto"``
from the env's size: ``batch_size`` = 2·N clamped to [256, 8192] (the paper's
8192 at N = 4096), ``buffer_size`` = 1221·N (the paper's 5M at 4096) clamped to
[50k, 5M] and capped by ``max_replay_bytes``, ``hidden_sizes`` = the paper's
[512, 256, 128] for observations of 16+ dims and [128, 128] for tiny ones.
"""
from __future__ import annotations

import os
from typing import Dict, Optional, Tuple

import numpy as np
import torch

from ...core.algorithm import DEVICE_CHECK, FastConfig
from ...core.nets import ACTIVATIONS, auto_hidden_sizes
from ...core.compile import COMPILE
from ...core.precision import UPDATE_DTYPES
from ...core.params import AUTO_OR_INT_LIST, Param, learning_starts_error, real_pair, with_defaults
from ...core.start_method import START_METHODS
from .transition_replay import replay_bytes
from ...envs.probe import probe_spaces
from ..asymmetric import ASYMMETRIC_CRITIC


def _auto_or_pos_int(v) -> bool:
    return v == "auto" or (isinstance(v, int) and not isinstance(v, bool) and v >= 1)


AUTO_INT = (_auto_or_pos_int, "'auto' or a positive int")


class PQLFamilyConfig(FastConfig):
    """Shared by PQL (concurrent), DDPGN and SACN (sequential)."""

    HYPERPARAMETERS = {
        **with_defaults(FastConfig, lr=5e-4, grad_clip=0.5, num_envs=64),
        "gamma": Param(0.99, "discount factor (not live: it is folded into stored n-step returns)",
                       low=0.0, high=1.0),
        "steps_per_iteration": Param(100, "vectorised Actor steps per training iteration", (int,), low=1),
        "batch_size": Param("auto", "transitions per update ('auto': 2*num_envs in [256, 8192]; paper 8192)",
                            (str, int), check=AUTO_INT),
        "buffer_size": Param("auto", "replay capacity in transitions ('auto': 1221*num_envs in [50k, 5M], "
                             "capped by max_replay_bytes; paper 5M)", (str, int), check=AUTO_INT),
        "max_replay_bytes": Param("auto", "bytes the replays may use ('auto': half the free GPU memory, or a "
                                  "quarter of the host RAM on CPU); a larger explicit buffer_size fails validation",
                                  (str, int), check=AUTO_INT),
        "n_step": Param(3, "n-step returns (windows cut at terminations and truncations)", (int,), low=1),
        "tau": Param(0.05, "soft target update per critic update", low=0.0, high=1.0, low_open=True, live=True),
        "actor_lr": Param(None, "policy learning rate (None: `lr`)", low=0.0, low_open=True, optional=True,
                          live=True),
        "weight_decay": Param(0.01, "AdamW weight decay of both networks' optimizers (PyTorch's default, as PQL's "
                              "reference code; FastTD3: 0.1)", low=0.0),
        "hidden_sizes": Param("auto", "MLP sizes of the policy, and of the critics unless critic_hidden_sizes is "
                              "set ('auto': [512, 256, 128] for obs_dim >= 16, else [128, 128])", (str, list, tuple),
                              check=AUTO_OR_INT_LIST),
        "critic_hidden_sizes": Param(None, "MLP sizes of the critics when they differ from the policy's (None: "
                                     "hidden_sizes; FastTD3: critic [1024, 512, 256], actor [512, 256, 128])",
                                     (str, list, tuple), check=AUTO_OR_INT_LIST, optional=True),
        "activation": Param("elu", "hidden activation", (str,), choices=tuple(ACTIVATIONS)),
        "obs_norm": Param(True, "normalise observations with the Actor's running mean/std (on the device; learners "
                          "use the copy shipped with each batch, so acting and learning normalise alike)", (bool,)),
        "asymmetric_critic": ASYMMETRIC_CRITIC,
        "obs_clip": Param(5.0, "clamp normalised observations to +-obs_clip", low=0.0, low_open=True),
        "reward_scale": Param(1.0, "multiply rewards before storing", low=0.0, low_open=True),
        "warmup_steps": Param(32, "vectorised steps of uniform random actions before the policy acts", (int,),
                              low=0),
        "randomize_episode_clocks": Param(False, "spread the source's episode clocks once at the start (rsl_rl's "
                                          "init_at_random_ep_len; mjlab, Isaac Lab, Isaac Gym and the built-in tasks), "
                                          "so the N envs do not all time out on the same step; the shortened first "
                                          "episodes are left out of the episode statistics", (bool,)),
        "learning_starts": Param("auto", "stored transitions before learning ('auto': batch_size)", (str, int),
                                 check=AUTO_INT),
        "noise_type": Param("mixed", "exploration noise of the deterministic policy: 'mixed' (PQL: sigma per env "
                            "slot linearly spaced over the global env index in [noise_std_min, noise_std_max], "
                            "fixed), 'mixed_random' (FastTD3: sigma per env drawn uniformly from [noise_std_min, "
                            "noise_std_max] and redrawn at that env's episode end) or 'fixed' (one sigma, noise_std, "
                            "optionally decayed)", (str,), choices=("mixed", "mixed_random", "fixed")),
        "noise_std_min": Param(0.05, "mixed / mixed_random noise: the smallest sigma (and the floor of "
                               "decay schedules)", low=0.0),
        "noise_std_max": Param(0.8, "mixed / mixed_random noise: the largest sigma", low=0.0),
        "noise_std": Param(0.4, "fixed noise sigma", low=0.0),
        "noise_decay": Param(None, "fixed noise schedule over vectorised steps", (str,), choices=(None, "exp", "linear"),
                             optional=True),
        "noise_decay_rate": Param(0.99, "'exp' schedule factor per vectorised step", low=0.0, high=1.0),
        "noise_decay_steps": Param(10_000, "'linear' schedule length in vectorised steps", (int,), low=1),
        "target_noise": Param(0.8, "target-policy smoothing std", low=0.0),
        "target_noise_clip": Param(0.2, "target-policy smoothing clip", low=0.0),
        "beta_av": Param(8.0, "critic updates per vectorised env step (beta_a:v = 1:beta_av; DDPGN/SACN do exactly "
                         "this many per step, fractions carried over: FastTD3's updates per step; PQL holds its "
                         "concurrent V-learner at this ratio)", low=0.0, low_open=True),
        "beta_pv": Param(2.0, "critic updates per policy update (beta_p:v = 1:beta_pv; TD3's policy delay)", low=0.0,
                         low_open=True),
        "distributional": Param(False, "C51 critic (PQL-D, FastTD3): each twin outputs num_atoms logits over a "
                                "fixed support [v_min, v_max], trained by cross-entropy to the projected n-step target "
                                "distribution of the twin with the lower expected value; the policy maximises the "
                                "expected value (off by default: scalar twin Q)", (bool,)),
        "num_atoms": Param(51, "C51 atoms (FastTD3: 101)", (int,), low=3),
        "v_min": Param(-10.0, "C51 support minimum (returns beyond it are clipped to it)"),
        "v_max": Param(10.0, "C51 support maximum (returns beyond it are clipped to it)"),
        "layer_norm": Param(False, "LayerNorm after each hidden layer of the policy and both critics "
                            "(FastTD3/FastSAC's normalised networks; off: plain MLPs)", (bool,)),
        "policy_learner": Param("ddpg", "policy learner: deterministic (DDPG/TD3-style) or SAC", (str,),
                                choices=("ddpg", "sac")),
        "sac_alpha_lr": Param(0.005, "SAC temperature learning rate", low=0.0, low_open=True),
        "sac_init_alpha": Param(0.1, "SAC initial temperature alpha, learned from there towards the target entropy "
                                "(FastSAC: 0.001)", low=0.0, low_open=True),
        "sac_target_entropy": Param("auto", "SAC target entropy ('auto': -action_dim)", (str, float),
                                    check=(lambda v: v == "auto" or isinstance(v, (int, float)),
                                           "'auto' or a number")),
        "sac_log_std_bounds": Param([-5.0, 2.0], "SAC log-std range", (list, tuple),
                                    check=(lambda v: real_pair(v) and v[0] < v[1], "[low, high] numbers, low < high")),
        "checkpoint_replay": Param(False, "store the replay buffers in checkpoints", (bool,)),
        "compile": COMPILE,
        "update_dtype": Param("float32", "precision of the critic and policy updates' forward and backward: "
                              "'float32', 'bfloat16' (torch.autocast: the networks' matrix products in "
                              "bfloat16; parameters, AdamW, the targets, the C51 projection, the losses and "
                              "the Actor's acting forward stay float32; about half a critic update's time where "
                              "the hardware multiplies bfloat16 natively: CPUs with AVX512-BF16 or AMX, GPUs "
                              "since Ampere; slower where it is emulated; not with compile), or 'auto' "
                              "(bfloat16 where each learner's device has it natively and compile is off, else "
                              "float32: core/precision.py)", (str,), choices=UPDATE_DTYPES),
    }

    def __init__(self, algo_class=None):
        super().__init__(algo_class=algo_class)
        # RLlib's iteration keys (not ours): an iteration is `steps_per_iteration` Actor steps
        self.min_sample_timesteps_per_iteration = 0
        self.min_time_s_per_iteration = None
        self.min_train_timesteps_per_iteration = 0

    # -- resolution of "auto" -----------------------------------------------------
    def resolved_batch_size(self) -> int:
        return self.batch_size if self.batch_size != "auto" else int(min(8192, max(256, 2 * self.num_envs)))

    def resolved_hidden(self, obs_dim: int) -> list:
        """The policy's hidden sizes."""
        return auto_hidden_sizes(self.hidden_sizes, obs_dim, large=(512, 256, 128))

    def resolved_critic_hidden(self, obs_dim: int) -> list:
        """The critics' hidden sizes: ``critic_hidden_sizes``, or the policy's when None.
        ``obs_dim`` is the policy's observation width ('auto' sizes both by it)."""
        setting = self.hidden_sizes if self.critic_hidden_sizes is None else self.critic_hidden_sizes
        return auto_hidden_sizes(setting, obs_dim, large=(512, 256, 128))

    def resolved_learning_starts(self) -> int:
        return self.resolved_batch_size() if self.learning_starts == "auto" else int(self.learning_starts)

    def resolved_max_replay_bytes(self) -> Optional[int]:
        """The replay memory cap in bytes; None when it cannot be known here: a
        CUDA placement validated on a machine without CUDA (a GPU experiment file
        checked on a laptop) -- the GPU's free memory is read where it runs."""
        if self.max_replay_bytes != "auto":
            return int(self.max_replay_bytes)
        dev = self.resolved_device()
        if dev.type == "cuda":
            if not torch.cuda.is_available():
                return None
            free, _ = torch.cuda.mem_get_info(dev)
            return int(free // 2)
        try:
            return int(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // 4)
        except (ValueError, OSError, AttributeError):
            return 4 << 30

    def replay_fields(self, obs_dim: int, act_dim: int, state_dim: Optional[int] = None) -> Tuple[Dict, Dict]:
        """(V-learner fields, P-learner fields) per transition. With an
        asymmetric critic (``state_dim``) the V-learner also keeps the states
        and next states (its critic's inputs; observations stay for the target
        policy) and the P-learner the states (the critic's input next to the
        policy's observation)."""
        f32 = torch.float32
        v = {"obs": ((obs_dim,), f32), "action": ((act_dim,), f32), "reward": ((), f32),
             "next_obs": ((obs_dim,), f32), "discount": ((), f32), "valid": ((), torch.bool)}
        p = {"obs": ((obs_dim,), f32), "valid": ((), torch.bool)}
        if state_dim is not None:
            v.update(states=((state_dim,), f32), next_states=((state_dim,), f32))
            p.update(states=((state_dim,), f32))
        return v, p

    def bytes_per_transition(self, obs_dim: int, act_dim: int, state_dim: Optional[int] = None) -> int:
        v, p = self.replay_fields(obs_dim, act_dim, state_dim)
        return replay_bytes(1, v) + (replay_bytes(1, p) if self.separate_state_replay else 0)

    separate_state_replay = True   # PQL's P-learner keeps its own states-only replay

    def resolved_buffer_size(self, obs_dim: int, act_dim: int, state_dim: Optional[int] = None) -> int:
        if self.buffer_size != "auto":
            return int(self.buffer_size)
        want = int(min(5_000_000, max(50_000, 1221 * self.num_envs)))
        cap_bytes = self.resolved_max_replay_bytes()
        if cap_bytes is None:
            return want
        cap = cap_bytes // max(1, self.bytes_per_transition(obs_dim, act_dim, state_dim))
        return max(self.num_envs, min(want, cap))

    # -- validation --------------------------------------------------------------
    def validate_algorithm(self) -> None:
        name = type(self).__name__
        if self.update_dtype == "bfloat16" and self.compile:
            self._value_error(f"{name}: `update_dtype` = 'bfloat16' is implemented for the eager update; "
                              f"`compile` = {self.compile!r}; allowed with bfloat16: compile = False "
                              f"(or update_dtype 'auto', which is float32 under compile)")
        if self.noise_std_min > self.noise_std_max:
            self._value_error(f"{name}: `noise_std_min` = {self.noise_std_min} must be <= `noise_std_max` = "
                              f"{self.noise_std_max}")
        if self.noise_decay is not None and self.noise_type != "fixed":
            self._value_error(f"{name}: `noise_decay` = {self.noise_decay!r} applies to noise_type='fixed' only; "
                              f"allowed with noise_type={self.noise_type!r}: None")
        if self.distributional and not self.v_min < self.v_max:
            self._value_error(f"{name}: the C51 critic (distributional=True) needs `v_min` < `v_max`; got v_min = "
                              f"{self.v_min}, v_max = {self.v_max}; allowed: v_min < v_max")
        if self.noise_type == "mixed_random" and self.policy_learner == "sac":
            self._value_error(f"{name}: `noise_type` = 'mixed_random' adds exploration noise to a deterministic "
                              f"policy, but policy_learner='sac' explores by sampling; allowed with "
                              f"policy_learner='sac': 'mixed' or 'fixed' (both unused)")
        if self.buffer_size != "auto" and self.buffer_size < self.num_envs:
            self._value_error(f"{name}: `buffer_size` = {self.buffer_size} is smaller than one write of "
                              f"`num_envs` = {self.num_envs} transitions; allowed: >= {self.num_envs}")
        if self.buffer_size != "auto":
            starts = self.resolved_learning_starts()
            err = learning_starts_error(name, starts, self.buffer_size, self.num_envs,
                                        None if self.learning_starts != "auto" else f"'auto' (= batch_size {starts})")
            if err:
                self._value_error(err)
            spaces = probe_spaces(self.env, self.env_config)
            if spaces is not None:
                state = None if self.asymmetric_critic is False else spaces.state
                err = self.replay_bytes_error(_flat(spaces.observation), _flat(spaces.action), _flat(state))
                if err:
                    self._value_error(err)

    def replay_bytes_error(self, obs_dim: int, act_dim: int, state_dim: Optional[int]) -> Optional[str]:
        """Why an explicit ``buffer_size`` does not fit ``max_replay_bytes``, or None.
        Checked at validation where the env's spaces are cheap to know, and when the
        algorithm builds its replays (simulator sources)."""
        if self.buffer_size == "auto":
            return None
        cap = self.resolved_max_replay_bytes()
        per = self.bytes_per_transition(obs_dim, act_dim, state_dim)
        need = self.buffer_size * per
        if cap is None or need <= cap:
            return None
        return (f"{type(self).__name__}: `buffer_size` = {self.buffer_size} needs {need} bytes of replay "
                f"({need / 2**30:.2f} GiB) on {self.resolved_device()}, more than `max_replay_bytes` = "
                f"{cap}; allowed: buffer_size <= {cap // per}")


def _flat(space) -> Optional[int]:
    """Flat width of a Box space (1 for a space without a shape), None for None."""
    if space is None:
        return None
    return int(np.prod(getattr(space, "shape", ()) or (1,)))


class PQLConfig(PQLFamilyConfig):
    """Parallel Q-Learning (Li et al. 2023): Actor, V-learner and P-learner
    run concurrently; their speeds are held at beta_a:v and beta_p:v by waiting."""

    HYPERPARAMETERS = {
        "backend": Param("auto", "concurrency: threads in one process sharing tensors, a process per learner "
                         "sharing CPU memory (no shared GIL), or Ray actors; 'auto': 'process' when the env and "
                         "both learners are on the CPU, else 'thread' (docs/pql.md)", (str,),
                         choices=("auto", "thread", "process", "ray")),
        "process_start_method": Param("auto", "backend='process': how the learner processes start ('auto': fork "
                                      "where the OS has it -- no re-import -- else spawn, which imports "
                                      "torch and rllib_fast again and needs a __main__ guard)", (str,),
                                      choices=START_METHODS),
        "learner_nice": Param(10, "backend='process': niceness added to the learner processes, so the OS gives the "
                              "Actor's simulator a core first and the learners the rest (0: equal shares)", (int,),
                              low=0, high=19),
        "v_learner_device": Param("auto", "V-learner device ('auto': env_device for threads; under Ray 'cuda' "
                                  "when the V actor was given a GPU, else 'cpu')", (str,), check=DEVICE_CHECK),
        "p_learner_device": Param("auto", "P-learner device (as v_learner_device)", (str,), check=DEVICE_CHECK),
        "num_gpus_per_v_learner": Param(0.0, "Ray back-end: GPUs of the V-learner actor's bundle", low=0.0),
        "num_gpus_per_p_learner": Param(0.0, "Ray back-end: GPUs of the P-learner actor's bundle", low=0.0),
        "num_cpus_per_pql_learner": Param(1.0, "Ray back-end: CPUs of each learner actor's bundle", low=0.0),
        "ray_transport": Param("object_store", "Ray back-end: how tensors move between the Actor and the learners: "
                               "inside the Ray calls (host memory; any cluster, mixed devices) or point to point "
                               "over a torch.distributed group (NCCL device to device on CUDA, gloo on CPU)",
                               (str,), choices=("object_store", "collective")),
        "ratio_window_s": Param(5.0, "time window of the reported achieved rates", low=0.0, low_open=True),
        "ratio_depth": Param("auto", "how far back (in critic updates) a lead or deficit counts; older history "
                             "is forgotten ('auto': 4*slack)", (str, float), check=(
                                 lambda v: v == "auto" or (isinstance(v, (int, float)) and v > 0),
                                 "'auto' or a positive number")),
        "ratio_slack": Param("auto", "allowed lead in critic updates before a component waits "
                             "('auto': 2*beta_av, at least the smallest slack that cannot deadlock)", (str, float), check=(
                                 lambda v: v == "auto" or (isinstance(v, (int, float)) and v > 0),
                                 "'auto' or a positive number")),
        "max_wait_s": Param(1.0, "longest a component waits for another before proceeding anyway", low=0.0,
                            low_open=True),
        "weight_sync_every": Param(2, "updates between weight publications (P->Actor/V, V->P)", (int,), low=1),
    }

    def __init__(self, algo_class=None):
        from .algorithm import PQL

        super().__init__(algo_class=algo_class or PQL)

    def min_slack(self) -> float:
        """The smallest slack with which no two components wait for each other.

        For a constraint whose leading side moves the balance by ``b`` critic
        updates per unit (the Actor: ``beta_av``; the P-learner: ``beta_pv``)
        and the critic by 1, both sides block at once when
        ``slack - b < balance < 1 - slack``, which is possible unless
        ``2 * slack >= 1 + b``; and one step of the leading side must fit
        (``slack >= b``)."""
        return max(max(b, (1.0 + b) / 2.0) for b in (self.beta_av, self.beta_pv))

    def resolved_slack(self) -> float:
        if self.ratio_slack == "auto":
            return max(2.0 * self.beta_av, self.min_slack())
        return float(self.ratio_slack)

    def resolved_backend(self) -> str:
        """``backend`` with 'auto' resolved: on a CPU the learners' Python dispatch and the
        Actor's share one GIL as threads, so separate processes overlap where threads take
        turns (docs/pql.md); on a GPU kernels release the GIL and threads share tensors for free."""
        if self.backend != "auto":
            return self.backend
        devices = (self.resolved_device(), self.v_learner_device, self.p_learner_device)
        on_cpu = all(str(d) == "auto" or torch.device(d).type == "cpu" for d in devices)
        return "process" if on_cpu else "thread"

    def resolved_depth(self) -> float:
        return 4.0 * self.resolved_slack() if self.ratio_depth == "auto" else float(self.ratio_depth)

    def local_device_keys(self) -> Dict[str, object]:
        """Thread learners run in the building process: their devices are checked there
        too. The Ray back-end's learners check theirs in their own actors (ray_backend.py)."""
        keys = dict(super().local_device_keys())
        if self.resolved_backend() == "thread":
            keys.update(v_learner_device=self.v_learner_device, p_learner_device=self.p_learner_device)
        return keys

    def validate_algorithm(self) -> None:
        super().validate_algorithm()
        if self.ray_transport != "object_store" and self.resolved_backend() != "ray":
            self._value_error(f"{type(self).__name__}: `ray_transport` = {self.ray_transport!r} applies only to "
                              f"backend='ray' (got backend={self.backend!r}); allowed: backend='ray', or "
                              f"ray_transport='object_store'")
        if self.resolved_backend() == "process":
            placed = {"env_device": self.resolved_device(), "v_learner_device": self.v_learner_device,
                      "p_learner_device": self.p_learner_device}
            gpu = {k: str(d) for k, d in placed.items() if str(d) != "auto" and torch.device(d).type != "cpu"}
            if gpu:
                self._value_error(f"{type(self).__name__}: backend='process' shares CPU memory between processes, "
                                  f"but {gpu} is not the CPU; allowed: CPU devices with backend='process' (e.g. "
                                  f"env_device='cpu'), or backend='thread' (one GPU: its kernels overlap) / "
                                  f"backend='ray' (learners on other GPUs)")
        if self.ratio_slack != "auto" and self.ratio_slack < self.min_slack():
            self._value_error(f"{type(self).__name__}: `ratio_slack` = {self.ratio_slack} lets the critic and "
                              f"another component wait for each other (beta_av = {self.beta_av}, beta_pv = "
                              f"{self.beta_pv}); allowed: 'auto' or >= {self.min_slack():g}")
        if self.ratio_depth != "auto" and self.ratio_depth < self.resolved_slack():
            self._value_error(f"{type(self).__name__}: `ratio_depth` = {self.ratio_depth} must be >= the slack "
                              f"({self.resolved_slack()}); allowed: 'auto' or >= {self.resolved_slack()}")


class DDPGNConfig(PQLFamilyConfig):
    """DDPG(n): PQL's networks, targets and replay run sequentially:
    ``beta_av`` critic updates per vectorised env step, a policy update every
    ``beta_pv`` critic updates (the paper's baseline, update_times = 8)."""

    separate_state_replay = False

    def __init__(self, algo_class=None):
        from .algorithm import DDPGN

        super().__init__(algo_class=algo_class or DDPGN)


class SACNConfig(DDPGNConfig):
    """SAC(n): as DDPGN with SAC's squashed-Gaussian policy and learned temperature."""

    HYPERPARAMETERS = with_defaults(DDPGNConfig, policy_learner="sac")

    def __init__(self, algo_class=None):
        from .algorithm import SACN

        super().__init__(algo_class=algo_class or SACN)
