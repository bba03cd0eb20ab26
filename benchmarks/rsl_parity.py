"""FastPPO vs rsl_rl on mjlab Cartpole, difference by difference (issue 25, parts 1 and 3).

Every arm is FastPPO with mjlab's registered rsl_rl config for the task mapped onto its
keys (``MAPPED``: ELU [64, 64], init std 1, lr 1e-3 adaptive at KL 0.01, 5 epochs x 4
minibatches, entropy 0.01, clipped value loss, grad norm 1, 32 steps/env, no observation
normalisation), plus a set of *switches*, each of which replaces one FastPPO behaviour by
rsl_rl 5.4.2's (read from ``rsl_rl/algorithms/ppo.py``, ``models/mlp_model.py``,
``modules/distribution.py``, ``storage/rollout_storage.py``, ``runners/on_policy_runner.py``
and mjlab's ``rl/vecenv_wrapper.py``; docs/sources.md, "FastPPO vs rsl_rl, difference by
difference", lists them). Every switch but ``start`` is now a FastPPO config option
(``OPTIONS``; docs/sources.md names them), which the arms use by default; the in-file subclasses
of FastPPO's module and update that first implemented them remain for ``--impl subclasses``
(the rows measured before the options existed); ``ALL_RSL`` sets every one
(the parity arm), and the ``-<switch>`` arms set all but one (leave-one-out: what that
difference costs on top of full parity). The ``rsl_rl`` arm is mjlab's own runner with the
registered config, unchanged.

Switches (FastPPO's behaviour -> rsl_rl's):

* ``init``: orthogonal init (sqrt 2 hidden, 0.01 policy head, 1.0 value head, zero biases)
  -> PyTorch's default ``nn.Linear`` init on every layer (rsl_rl's Gaussian MLP calls no init);
* ``std``: a ``log_std`` parameter -> a ``std`` parameter (rsl_rl's ``std_type='scalar'``,
  clamped to [1e-6, 1e6]): Adam moves std, not log std;
* ``noclip``: sampled actions clamped to the +-1 bound before the env -> unclipped
  (mjlab's wrapper with ``clip_actions=None``; the actuator's ctrlrange still limits the
  force, but the reward's control term sees the raw action);
* ``kl``: the k3 KL estimate ``mean((r - 1) - log r)`` averaged over an epoch's minibatches,
  lr adapted once per epoch after it -> the analytic Gaussian KL(old || new) of each
  minibatch *before* its step, lr adapted per minibatch and used by that step (grows only
  when KL > 0, so never on the first minibatch); bounds [1e-5, 1e-2] instead of [1e-6, 1e-2];
* ``advnorm``: advantages standardised per minibatch (biased std) -> once over the whole
  batch (unbiased std);
* ``value``: values normalised by running return statistics, loss ``0.5 * coeff * mean(max(
  (v - R)^2, (v_clip - R)^2))`` with the clip 0.2 in normalised units -> raw values, no 0.5
  (``value_loss_coef`` 1 as is), the clip 0.2 in return units;
* ``gradclip``: one global norm clip over actor and critic -> actor and critic clipped
  separately, each to ``max_grad_norm``;
* ``adam``: fused Adam with eps 1e-5 -> ``torch.optim.Adam`` defaults (eps 1e-8);
* ``shuffle``: a new permutation every epoch -> one permutation per update, reused by every
  epoch (rsl_rl's ``mini_batch_generator``);
* ``bootstrap``: exact terminal observations (``V(s_T)`` of the true terminal state at a
  time-out) -> mjlab's auto-reset, bootstrapping from ``V(s_t)`` of the state the last action
  was taken from (rsl_rl adds ``gamma * V(s_t)`` to the time-out reward: the same target);
* ``start``: episode clocks randomised plus U{0, 1} random actions (``decorrelate_steps=1``)
  -> clocks only (``init_at_random_ep_len``).

The return each arm is judged by: the mean over the last 100 completed episodes, first
(partial) episodes excluded, checked after every iteration, on both sides. Env steps are
load-independent; wall-clock is recorded too, but the machine (2 cores) was shared with
other engineers' jobs: read times as indicative only.

Examples::

    python benchmarks/rsl_parity.py run --arms rsl_rl,parity,mapped --ns 128 --seeds 0,1,2,3
    python benchmarks/rsl_parity.py run --arms parity --task swingup --ns 256 --seeds 0,1,2,3
    python benchmarks/rsl_parity.py run --arms=-init,+init --ns 128 --seeds 0   # '=': names start with '-'
    python benchmarks/rsl_parity.py rate --ns 64,128,256,1024 --rounds 6
    python benchmarks/rsl_parity.py vs --task swingup --n 128 --rounds 8   # loop rate, paired with rsl_rl
    python benchmarks/rsl_parity.py report
"""
from __future__ import annotations

import argparse
import datetime
import importlib.util
import json
import math
import os
import platform
import statistics
import sys
import time
from typing import Any, Dict, List, Optional

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
# this folder holds benchmarks/mjlab.py, which would shadow the mjlab package
sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.getcwd()) != HERE]
# RSL_PARITY_CODE_ROOT: import rllib_fast from another tree (e.g. a `git archive` of a commit),
# so a study runs against one fixed version of FastPPO while the checkout changes under it
CODE_ROOT = os.environ.get("RSL_PARITY_CODE_ROOT") or ROOT
sys.path.insert(0, CODE_ROOT)
os.environ.setdefault("WARP_CACHE_PATH", os.path.join(ROOT, "build", "warp-cache"))
os.environ.setdefault("MJLAB_WARP_QUIET", "1")

RESULTS = os.path.join(HERE, "results")
RUNS_FILE = os.path.join(RESULTS, "rsl_parity_runs.jsonl")
TASKS = {"balance": ("Mjlab-Cartpole-Balance", 9.0), "swingup": ("Mjlab-Cartpole-Swingup", 8.0)}
EPISODE_S = 10.0  # 200-step episodes, maximum return 10

#: mjlab's registered rsl_rl config for Cartpole (``cartpole_ppo_runner_cfg``), mapped onto
#: FastPPO's keys as tune_configs/mjlab-cartpole-*-fastppo.yaml map it
MAPPED = dict(rollout_length=32, num_epochs=5, num_minibatches=4, lr=1e-3, adaptive_lr_kl_target=0.01,
              gamma=0.99, lambda_=0.95, clip_param=0.2, vf_clip_param=0.2, vf_loss_coeff=1.0,
              entropy_coeff=0.01, grad_clip=1.0, hidden_sizes=[64, 64], activation="elu", init_log_std=0.0,
              normalize_obs=False, decorrelate_steps=1)
SWITCHES = ("init", "std", "noclip", "kl", "advnorm", "value", "gradclip", "adam", "shuffle", "bootstrap",
            "start")
ALL_RSL = frozenset(SWITCHES)


#: each switch as FastPPO config options (training keys, env_config keys): how the arms run by
#: default (``--impl options``); ``start`` has no option (clocks-only decorrelation), so it stays
#: a subclass (``_ClocksOnlyStart``). ``--impl subclasses`` runs the in-file re-implementations
#: below instead (how the rows before the options existed were measured).
OPTIONS: Dict[str, tuple] = {
    "init": ({"init": "torch"}, {}),
    "std": ({"std_param": "scalar"}, {}),
    "noclip": ({"clip_actions": False}, {"clip_actions": False}),
    "kl": ({"adaptive_lr_every": "minibatch", "kl_estimator": "analytic", "adaptive_lr_bounds": [1e-5, 1e-2]}, {}),
    "advnorm": ({"normalize_advantages_over": "batch"}, {}),
    # rsl_rl's value_loss_coef 1 without FastPPO's 0.5 = vf_loss_coeff 2 x MAPPED's; the clip is then in return units
    "value": ({"normalize_values": False, "vf_loss_coeff": 2.0}, {}),
    "gradclip": ({"grad_clip_scope": "per_network"}, {}),
    "adam": ({"adam_eps": 1e-8}, {}),
    "shuffle": ({"shuffle": "once"}, {}),
    "bootstrap": ({}, {"exact_final_obs": False}),
}


def arms() -> Dict[str, Dict[str, Any]]:
    """name -> dict(switches=..., overrides=...) (or kind='rsl_rl')."""
    out: Dict[str, Dict[str, Any]] = {
        "rsl_rl": dict(kind="rsl_rl", label="rsl_rl OnPolicyRunner (mjlab's config)"),
        "mapped": dict(switches=frozenset(), label="FastPPO, mjlab's rsl_rl config mapped (current code)"),
        "parity": dict(switches=ALL_RSL, label="FastPPO + every rsl_rl switch"),
    }
    for s in SWITCHES:
        out["-" + s] = dict(switches=ALL_RSL - {s}, label=f"parity but FastPPO's {s}")
        out["+" + s] = dict(switches=frozenset({s}), label=f"mapped + rsl_rl's {s}")
    return out


# ---------------------------------------------------------------------------------------
# the switches, as subclasses of FastPPO's parts
# ---------------------------------------------------------------------------------------
def _build_classes():
    import torch
    from torch import nn

    from rllib_fast.algorithms.actor_critic import ActorCriticModule
    from rllib_fast.algorithms.onpolicy import standardize
    from rllib_fast.algorithms.ppo import FastPPO
    from rllib_fast.algorithms.ppo.algorithm import PPOUpdate

    class RslModule(ActorCriticModule):
        """ActorCriticModule with rsl_rl's std parameter (``std`` switch) and/or
        unclipped actions (``noclip``); set by ``ParityPPO.build``."""

        scalar_std = False
        unclipped = False

        def dist_params(self, obs_n):
            if not self.scalar_std:
                return super().dist_params(obs_n)
            out = self.pi(obs_n)
            return out, self.std_param.clamp(1e-6, 1e6).log().expand_as(out)

        def to_env_action(self, a):
            return a if self.unclipped else super().to_env_action(a)

    class ParityUpdate(PPOUpdate):
        """PPOUpdate with rsl_rl's KL/lr rule, advantage normalisation, value loss,
        grad clipping, optimizer and minibatch order, each behind its switch."""

        algo = None   # the arm (ParityPPO.make_update_rule): its switches, storage and actor params

        def learn(self, batch):
            algo = self.algo
            sw, cfg, st, module = algo.switches, algo.config, algo.storage, algo.module
            B = algo.horizon * algo.env.num_envs
            adv, targets, old_v, w = batch.advantages, batch.value_targets, batch.old_values, batch.weights
            obs, actions, old_logp = st.flat("obs"), st.flat("actions"), st.flat("logp")
            if "advnorm" in sw:
                adv = (adv - adv.mean()) / (adv.std() + 1e-8)
            with torch.no_grad():
                old_mean, old_log_std = module.dist_params(obs)
                old_log_std = old_log_std.expand_as(old_mean)
            mb = B // cfg.num_minibatches
            perm = torch.randperm(B, device=algo.device)
            lo, hi = (1e-5, 1e-2) if "kl" in sw else tuple(cfg.adaptive_lr_bounds)
            for _ in range(cfg.num_epochs):
                if "shuffle" not in sw:
                    perm = torch.randperm(B, device=algo.device)
                epoch_kl = 0.0
                for i in range(cfg.num_minibatches):
                    idx = perm[i * mb:(i + 1) * mb]
                    mean, log_std = module.dist_params(obs[idx])
                    logp = module.gauss_logp(actions[idx], mean, log_std)
                    entropy = (0.5 + 0.5 * math.log(2 * math.pi) + log_std).sum(-1)
                    log_ratio = logp - old_logp[idx]
                    ratio = log_ratio.exp()
                    a = adv[idx]
                    if "advnorm" not in sw and cfg.normalize_advantages:
                        a = standardize(a, None)
                    if "kl" in sw and cfg.adaptive_lr_kl_target is not None:
                        with torch.no_grad():
                            ls_new = log_std.expand_as(mean)
                            om, ols = old_mean[idx], old_log_std[idx]
                            kl = (ls_new - ols + (torch.exp(2 * ols) + (om - mean) ** 2)
                                  / (2 * torch.exp(2 * ls_new)) - 0.5).sum(-1).mean()
                            kl = float(kl)
                        tgt = cfg.adaptive_lr_kl_target
                        lr = algo.optimizer.param_groups[0]["lr"]
                        if kl > 2 * tgt:
                            lr = max(lo, lr / 1.5)
                        elif 0.0 < kl < 0.5 * tgt:
                            lr = min(hi, lr * 1.5)
                        for g in algo.optimizer.param_groups:
                            g["lr"] = lr
                    surr = torch.min(ratio * a, ratio.clamp(1 - cfg.clip_param, 1 + cfg.clip_param) * a)
                    pg_loss = -surr.mean()
                    v = module.value(obs[idx])
                    vf = (v - targets[idx]) ** 2
                    if cfg.vf_clip_param is not None:
                        v_clip = old_v[idx] + (v - old_v[idx]).clamp(-cfg.vf_clip_param, cfg.vf_clip_param)
                        vf = torch.max(vf, (v_clip - targets[idx]) ** 2)
                    vf_loss = vf.mean() * (1.0 if "value" in sw else 0.5)
                    loss = pg_loss + cfg.vf_loss_coeff * vf_loss - cfg.entropy_coeff * entropy.mean()
                    algo.optimizer.zero_grad(set_to_none=True)
                    loss.backward()
                    if "gradclip" in sw:
                        nn.utils.clip_grad_norm_(algo.actor_params, cfg.grad_clip)
                        nn.utils.clip_grad_norm_(list(module.vf.parameters()), cfg.grad_clip)
                    else:
                        nn.utils.clip_grad_norm_(algo.params, cfg.grad_clip, foreach=True)
                    algo.optimizer.step()
                    if "kl" not in sw:
                        with torch.no_grad():
                            epoch_kl += float(((ratio.detach() - 1) - log_ratio.detach()).mean())
                if "kl" not in sw and cfg.adaptive_lr_kl_target is not None:
                    self._adapt_lr(epoch_kl / cfg.num_minibatches)
            return {"curr_lr": algo.optimizer.param_groups[0]["lr"]}

    class ParityPPO(FastPPO):
        """FastPPO whose module, update and start are swapped per ``switches``
        (``config.extra_switches`` is not a FastPPO key: the set is a class attribute
        of a per-arm subclass)."""

        UPDATE = ParityUpdate
        SWITCHES: frozenset = frozenset()

        def build(self):
            self.switches = self.SWITCHES
            self._late_decorrelate = True
            super().build()   # its _decorrelate is deferred (below) until the module is final
            m, sw = self.module, self.switches
            m.__class__ = RslModule
            if "init" in sw:
                for net in (m.pi, m.vf):
                    for layer in net:
                        if isinstance(layer, nn.Linear):
                            layer.reset_parameters()
            if "std" in sw:
                init_std = math.exp(float(self.config.init_log_std))
                del m.log_std
                m.std_param = nn.Parameter(torch.full((m.act_dim,), init_std, device=self.device))
                m.scalar_std = True
            m.unclipped = "noclip" in sw
            self.params = list(m.parameters())
            self.actor_params = [p for n, p in m.named_parameters() if not n.startswith("vf.")]
            self.optimizer = (torch.optim.Adam(self.params, lr=self.configured_lr()) if "adam" in sw
                              else self.UPDATE.make_optimizer(self.params, self.configured_lr(), self.config))
            self.update_rule = self.make_update_rule()
            self._late_decorrelate = False
            self._decorrelate()

        def make_update_rule(self):
            rule = super().make_update_rule()
            rule.algo = self
            return rule

        def _decorrelate(self):
            if self._late_decorrelate:
                return
            if "start" in self.switches:
                self.env.randomize_episode_progress()  # init_at_random_ep_len, no random actions
                self.tracker.skip_current_episodes()
                return
            super()._decorrelate()

    return ParityPPO


def _options_arm(switches: frozenset):
    """(algorithm class, training keys, env_config keys) of an arm run with FastPPO's options."""
    from rllib_fast.algorithms.ppo import FastPPO

    kw: Dict[str, Any] = {}
    env_config: Dict[str, Any] = {}
    for s in switches - {"start"}:
        kw.update(OPTIONS[s][0])
        env_config.update(OPTIONS[s][1])
    if "start" not in switches:
        return FastPPO, kw, env_config

    class _ClocksOnlyStart(FastPPO):
        """rsl_rl's start (``init_at_random_ep_len``): episode clocks randomised, no random actions."""

        def _decorrelate(self):
            self.env.randomize_episode_progress()
            self.tracker.skip_current_episodes()

    return _ClocksOnlyStart, kw, env_config


def _fastppo_run(task: str, n: int, seed: int, switches: frozenset, overrides: Dict[str, Any],
                 target: float, cap: int, compile_: bool = False, impl: str = "options") -> Dict[str, Any]:
    kw = dict(MAPPED)
    env_config: Dict[str, Any] = {"cfg": {"episode_length_s": EPISODE_S}}
    if impl == "options":
        cls, opt_kw, opt_env = _options_arm(frozenset(switches))
        kw.update(opt_kw)
        kw.update(overrides)
        env_config.update(opt_env)
        return _train(task, n, seed, cls, kw, env_config, target, cap, compile_)
    ParityPPO = _build_classes()
    kw.update(overrides)
    if "bootstrap" in switches:
        env_config["exact_final_obs"] = False
    if "noclip" in switches:
        env_config["clip_actions"] = 1e9   # finite, so the adapter keeps it: effectively no clip
    if "value" in switches:
        kw["normalize_values"] = False
    if compile_:
        kw["compile"] = True
    if switches:
        cls = type("ParityPPO_" + "_".join(sorted(switches)), (ParityPPO,), {"SWITCHES": frozenset(switches)})
    else:   # the mapped config on FastPPO's own code, untouched
        from rllib_fast.algorithms.ppo import FastPPO as cls
    return _train(task, n, seed, cls, kw, env_config, target, cap, False)


def _train(task: str, n: int, seed: int, cls, kw: Dict[str, Any], env_config: Dict[str, Any], target: float,
           cap: int, compile_: bool) -> Dict[str, Any]:
    """Train one FastPPO arm until the target return or the env-step cap."""
    from rllib_fast.algorithms.ppo import FastPPOConfig

    if compile_:
        kw = dict(kw, compile=True)
    t0 = time.time()
    cfg = (FastPPOConfig(algo_class=cls).environment(f"mjlab:{task}", num_envs=n, env_device="cpu",
                                                        env_config=env_config)
           .training(**kw).debugging(seed=seed))
    algo = cfg.build_algo()
    t_built = time.time()
    curve, reached = [], None
    try:
        while True:
            r = algo.train()
            steps = int(r["num_env_steps_sampled_lifetime"])
            ret = r["env_runners"].get("episode_return_mean")
            ret = float(ret) if ret is not None and math.isfinite(float(ret)) else None
            curve.append((steps, ret, round(time.time() - t0, 2)))
            if ret is not None and ret >= target:
                reached = steps
                break
            if steps >= cap:
                break
    finally:
        algo.stop()
    t1 = time.time()
    return dict(steps=reached, last_steps=curve[-1][0], best=max([c[1] for c in curve if c[1] is not None],
                                                                  default=None),
                wall_s=t1 - t0, build_s=t_built - t0, train_s=t1 - t_built,
                sps=(curve[-1][0] / (t1 - t_built)) if t1 > t_built else None, curve=curve[::4])


def _rsl_rl_runner(task: str, n: int, seed: int, rl_cfg: Any):
    """mjlab's Cartpole env (10 s episodes) in mjlab's rsl_rl wrapper and mjlab's runner for it,
    as mjlab's own train script builds them: ``(wrapped env, runner)``."""
    import dataclasses

    from mjlab.envs import ManagerBasedRlEnv
    from mjlab.rl import RslRlVecEnvWrapper
    from mjlab.rl.runner import MjlabOnPolicyRunner
    from mjlab.tasks.registry import load_env_cfg, load_runner_cls

    env_cfg = load_env_cfg(task)
    env_cfg.scene.num_envs, env_cfg.seed, env_cfg.episode_length_s = n, seed, EPISODE_S
    env = RslRlVecEnvWrapper(ManagerBasedRlEnv(env_cfg, device="cpu"), clip_actions=rl_cfg.clip_actions)
    return env, (load_runner_cls(task) or MjlabOnPolicyRunner)(env, dataclasses.asdict(rl_cfg), None, "cpu")


def _rsl_rl_run(task: str, n: int, seed: int, target: float, cap: int,
                overrides: Optional[Dict[str, Any]] = None) -> Dict[str, Any]:
    """mjlab's runner with the registered config (``overrides``: runner cfg keys such as
    ``num_steps_per_env`` or ``algorithm.num_learning_epochs``, for the part-3 study)."""
    import collections

    import torch
    import mjlab.tasks  # noqa: F401
    from mjlab.tasks.registry import load_rl_cfg

    rl_cfg = load_rl_cfg(task)
    rl_cfg.seed = seed
    for k, v in (overrides or {}).items():
        obj, *path = k.split(".")
        tgt = rl_cfg if not path else getattr(rl_cfg, obj)
        setattr(tgt, path[0] if path else obj, v)
    torch.manual_seed(seed)
    t0 = time.time()
    env, runner = _rsl_rl_runner(task, n, seed, rl_cfg)
    t_built = time.time()
    returns: collections.deque = collections.deque(maxlen=100)
    acc = torch.zeros(n)
    clean = torch.zeros(n, dtype=torch.bool)   # the env's current episode started after training began
    step = env.step

    def counted(actions):
        out = step(actions)
        acc.add_(out[1])
        done = out[2] > 0
        if bool(done.any()):
            returns.extend(acc[done & clean].tolist())
            acc[done] = 0.0
            clean[done] = True
        return out

    env.step = counted
    steps, first, curve, reached = 0, True, [], None
    while True:
        runner.learn(1, init_at_random_ep_len=first)
        first = False
        steps += rl_cfg.num_steps_per_env * n
        ret = sum(returns) / len(returns) if returns else None
        curve.append((steps, ret, round(time.time() - t0, 2)))
        if ret is not None and ret >= target:
            reached = steps
            break
        if steps >= cap:
            break
    env.close()
    t1 = time.time()
    return dict(steps=reached, last_steps=steps, best=max([c[1] for c in curve if c[1] is not None], default=None),
                wall_s=t1 - t0, build_s=t_built - t0, train_s=t1 - t_built, sps=steps / (t1 - t_built),
                curve=curve[::4])


def run(args) -> None:
    import torch

    torch.set_num_threads(args.threads)
    table = arms()
    task, target = TASKS[args.task]
    target = args.target if args.target is not None else target
    extra = json.loads(args.overrides) if args.overrides else {}
    os.makedirs(RESULTS, exist_ok=True)
    for name in [a for a in args.arms.split(",") if a]:
        spec = table[name]
        for n in [int(x) for x in args.ns.split(",")]:
            for seed in [int(s) for s in args.seeds.split(",")]:
                t = time.strftime("%H:%M:%S")
                if spec.get("kind") == "rsl_rl":
                    res = _rsl_rl_run(task, n, seed, target, args.cap, extra.get("rsl_rl"))
                    ov = extra.get("rsl_rl") or {}
                else:
                    ov = {k: v for k, v in extra.items() if k != "rsl_rl"}
                    res = _fastppo_run(task, n, seed, spec["switches"], ov, target, args.cap, args.compile,
                                       args.impl)
                rec = dict(arm=name, tag=args.tag or name, task=args.task, n=n, seed=seed, target=target,
                           overrides=ov, compile=bool(args.compile), started=t, code=CODE_ROOT,
                           impl=None if spec.get("kind") == "rsl_rl" else args.impl,
                           date=datetime.date.today().isoformat(), **res)
                with open(args.out or RUNS_FILE, "a") as f:
                    f.write(json.dumps(rec) + "\n")
                print(f"{t} {rec['tag']:28s} {args.task} N={n} seed={seed}: "
                      f"{'%dk' % (res['steps'] // 1000) if res['steps'] else 'not reached (best %s)' % res['best']}"
                      f" wall {res['wall_s']:.0f}s sps {res['sps']:.0f}", flush=True)


def rate(args) -> None:
    """Physics and training-loop rates per N, alternating short windows of every N in
    one process (the host's drift and the other jobs' load then hit every N alike).
    Per round and N: a raw window (the mjlab env under the learners' workload: random
    clocks, actions ~ N(0, 0.5), mjlab's auto-reset) and one training iteration of the
    parity arm (FastPPO with every rsl_rl switch, ``--overrides`` applied: e.g. another
    schedule), so env steps / loop rate + build time estimates the time to the target."""
    import torch

    torch.set_num_threads(args.threads)
    import mjlab.tasks  # noqa: F401
    from mjlab.envs import ManagerBasedRlEnv
    from mjlab.tasks.registry import load_env_cfg

    from rllib_fast.algorithms.ppo import FastPPOConfig

    ParityPPO = _build_classes()
    cls = type("ParityPPO_all", (ParityPPO,), {"SWITCHES": ALL_RSL})
    task, _ = TASKS[args.task]
    ns = [int(x) for x in args.ns.split(",")]
    extra = json.loads(args.overrides) if args.overrides else {}
    envs, algos = {}, {}
    for n in ns:
        cfg = load_env_cfg(task)
        cfg.scene.num_envs, cfg.seed, cfg.episode_length_s = n, 0, EPISODE_S
        env = ManagerBasedRlEnv(cfg, device="cpu")
        env.reset()
        env.episode_length_buf = torch.randint_like(env.episode_length_buf, 0, int(env.max_episode_length))
        envs[n] = env
        kw = dict(MAPPED, normalize_values=False, **extra)
        algos[n] = (FastPPOConfig(algo_class=cls).environment(
            f"mjlab:{task}", num_envs=n, env_device="cpu",
            env_config={"cfg": {"episode_length_s": EPISODE_S}, "exact_final_obs": False, "clip_actions": 1e9})
            .training(**kw).debugging(seed=0).build_algo())
    raw: Dict[int, List[float]] = {n: [] for n in ns}
    loop: Dict[int, List[float]] = {n: [] for n in ns}
    for r in range(args.rounds + 1):   # round 0 warms up
        for n in ns:
            env = envs[n]
            steps = max(8, int(args.window_steps // n))
            t0 = time.perf_counter()
            for _ in range(steps):
                env.step(torch.randn(n, 1) * 0.5)
            raw_r = steps * n / (time.perf_counter() - t0)
            algo = algos[n]
            t0 = time.perf_counter()
            it = 0
            while True:
                algo.train()
                it += 1
                if it * algo.horizon * n >= args.window_steps // 2:
                    break
            loop_r = it * algo.horizon * n / (time.perf_counter() - t0)
            if r:
                raw[n].append(raw_r)
                loop[n].append(loop_r)
        if r:
            print("round", r, {n: (round(raw[n][-1]), round(loop[n][-1])) for n in ns}, flush=True)
    for a in algos.values():
        a.stop()
    out = dict(task=args.task, date=datetime.datetime.now().strftime("%Y-%m-%d %H:%M"), rounds=args.rounds,
               window_steps=args.window_steps, threads=args.threads, overrides=extra,
               raw_median={n: statistics.median(v) for n, v in raw.items()},
               loop_median={n: statistics.median(v) for n, v in loop.items()},
               loop_over_raw={n: statistics.median([l / w for l, w in zip(loop[n], raw[n])]) for n in ns},
               raw=raw, loop=loop)
    tag = ("_" + args.tag) if args.tag else ""
    with open(os.path.join(RESULTS, f"rsl_parity_rate_{args.task}{tag}.json"), "w") as f:
        json.dump(out, f, indent=1)
    print(json.dumps({k: out[k] for k in ("raw_median", "loop_median", "loop_over_raw")}))


def vs(args) -> None:
    """Whole-loop rates against rsl_rl's runner at the same N, paired: rsl_rl's runner (mjlab's
    config), the parity arm synchronous, and the parity arm learning in the simulator's shadow
    (``learn_while_stepping``, ``--lws-k`` minibatch steps per env step), all built in one
    process, all learning from scratch, alternating windows of ``--iters`` whole iterations per
    arm in every round; the ratio to rsl_rl is taken within each round (the host's drift cancels)
    and its median over rounds reported. Writes ``results/rsl_parity_vs_<task>.json``."""
    import torch

    torch.set_num_threads(args.threads)
    import mjlab.tasks  # noqa: F401
    from mjlab.tasks.registry import load_rl_cfg

    from rllib_fast.algorithms.ppo import FastPPOConfig

    task, _ = TASKS[args.task]
    n = int(args.n)
    rl_cfg = load_rl_cfg(task)
    rl_cfg.seed = 0
    renv, runner = _rsl_rl_runner(task, n, 0, rl_cfg)
    cls, opt_kw, opt_env = _options_arm(ALL_RSL)
    env_config = {"cfg": {"episode_length_s": EPISODE_S}, **opt_env}
    algos = {}
    for name, lws in (("parity", False), ("parity_lws", True)):
        kw = {**MAPPED, **opt_kw, "learn_while_stepping": lws}
        if lws:
            kw["learn_steps_per_env_step"] = args.lws_k
        algos[name] = (FastPPOConfig(algo_class=cls).environment(f"mjlab:{task}", num_envs=n, env_device="cpu",
                                                                 env_config=env_config)
                       .training(**kw).debugging(seed=0).build_algo())
    first = [True]

    def rsl_iteration() -> None:
        runner.learn(1, init_at_random_ep_len=first[0])
        first[0] = False

    arms_ = {"rsl_rl": (rsl_iteration, rl_cfg.num_steps_per_env * n)}
    arms_.update({k: (a.train, a.horizon * n) for k, a in algos.items()})
    for fn, _ in arms_.values():   # warm-up: two iterations each (the overlapped arm's first has no update)
        fn()
        fn()
    rates: Dict[str, List[float]] = {k: [] for k in arms_}
    try:
        for r in range(args.rounds):
            for k, (fn, per_iteration) in arms_.items():
                t0 = time.perf_counter()
                for _ in range(args.iters):
                    fn()
                rates[k].append(args.iters * per_iteration / (time.perf_counter() - t0))
            print("round", r, {k: round(v[-1]) for k, v in rates.items()}, flush=True)
    finally:
        for a in algos.values():
            a.stop()
        renv.close()
    ratios = {k: [v[i] / rates["rsl_rl"][i] for i in range(args.rounds)] for k, v in rates.items() if k != "rsl_rl"}
    out = dict(task=args.task, n=n, date=datetime.datetime.now().strftime("%Y-%m-%d %H:%M"), rounds=args.rounds,
               iters=args.iters, lws_k=args.lws_k, threads=args.threads,
               median={k: statistics.median(v) for k, v in rates.items()},
               ratio_median={k: statistics.median(v) for k, v in ratios.items()},
               ratio_range={k: [min(v), max(v)] for k, v in ratios.items()}, rates=rates, ratios=ratios)
    with open(os.path.join(RESULTS, f"rsl_parity_vs_{args.task}.json"), "w") as f:
        json.dump(out, f, indent=1)
    print(json.dumps({k: out[k] for k in ("median", "ratio_median", "ratio_range")}))


# ---------------------------------------------------------------------------------------
# report
# ---------------------------------------------------------------------------------------
def _load(path: str) -> List[Dict[str, Any]]:
    if not os.path.exists(path):
        return []
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def _fmt(x: Optional[float]) -> str:
    if x is None:
        return "–"
    return f"{x / 1e6:.2f}M" if x >= 1e6 else f"{x / 1e3:.0f}k"


def _row_tag(rec: Dict[str, Any]) -> str:
    """A run's row: its tag, marked ``(subclasses)`` when its switches were the in-file
    subclasses (``--impl subclasses``, and every run from before ``impl`` was recorded: the
    first parity rows), so those never pool with runs of FastPPO's options."""
    if rec["arm"] == "rsl_rl" or rec.get("impl") == "options":
        return rec["tag"]
    return f"{rec['tag']} (subclasses)"


def summarize(recs: List[Dict[str, Any]]) -> List[Dict[str, Any]]:
    groups: Dict[tuple, List[Dict[str, Any]]] = {}
    for r in recs:
        groups.setdefault((r["task"], _row_tag(r), r["n"]), []).append(r)
    rows = []
    for (task, tag, n), rs in groups.items():
        # a seed run again (the same arm, code and settings) counts once: its latest run
        rs = sorted({r["seed"]: r for r in rs}.values(), key=lambda r: r["seed"])
        # a run that did not reach the target counts as its cap (an upper bound) in the median
        vals = [r["steps"] if r["steps"] else math.inf for r in rs]
        med = statistics.median(vals) if vals else None
        rows.append(dict(task=task, tag=tag, arm=rs[0]["arm"], n=n, seeds=[r["seed"] for r in rs],
                         reached=sum(1 for r in rs if r["steps"]), runs=len(rs), median=med,
                         per_seed=[r["steps"] for r in rs], best=[r["best"] for r in rs],
                         caps=[r["last_steps"] for r in rs],
                         sps=statistics.median([r["sps"] for r in rs if r.get("sps")] or [0]),
                         wall=statistics.median([r["wall_s"] for r in rs]),
                         overrides=rs[0].get("overrides") or {}))
    return rows


def report(args) -> None:
    recs = _load(args.out or RUNS_FILE)
    rows = summarize(recs)
    table = arms()
    lines = ["# FastPPO vs rsl_rl on mjlab Cartpole, difference by difference", "",
             f"Generated {datetime.datetime.now().strftime('%Y-%m-%d %H:%M')} by `benchmarks/rsl_parity.py report` "
             f"from {len(recs)} runs ({platform.machine()}, {os.cpu_count()} CPU cores shared with other "
             "engineers' jobs, 1 torch thread, CPU). 10 s episodes (200 steps, max return 10); targets: Balance "
             "9.0, Swingup 8.0 (mean over the last 100 completed episodes, checked every iteration). Cells: env "
             "steps to the target per seed (`–` = not reached by the cap, shown as `>cap`), the median over seeds "
             "(a run that did not reach it counts as infinite), env-steps/s of the whole training loop (median; "
             "**shared machine**: indicative only). Arm names: `parity` sets every rsl_rl switch (module "
             "docstring); `-x` is parity with FastPPO's own behaviour for difference x; `+x` is the mapped config "
             "(current FastPPO) with rsl_rl's behaviour for x only.", ""]
    for task in ("balance", "swingup"):
        trows = [r for r in rows if r["task"] == task]
        if not trows:
            continue
        lines += [f"## {task.capitalize()} (target {TASKS[task][1]})", "",
                  "| arm | N | overrides | reached | median env steps | per seed | env-steps/s | arm |",
                  "| :--- | ---: | :--- | ---: | ---: | :--- | ---: | :--- |"]
        for r in sorted(trows, key=lambda r: (r["n"], r["tag"] != "rsl_rl", r["median"] or math.inf)):
            per = ", ".join(_fmt(s) if s else f">{_fmt(c)}" for s, c in zip(r["per_seed"], r["caps"]))
            label = table.get(r["arm"], {}).get("label", r["arm"])
            ov = ", ".join(f"{k}={v}" for k, v in r["overrides"].items()) or ""
            lines.append(f"| {r['tag']} | {r['n']} | {ov} | {r['reached']}/{r['runs']} | "
                         f"{_fmt(r['median']) if r['median'] != math.inf else '> cap'} | {per} | "
                         f"{r['sps'] / 1e3:.1f}k | {label} |")
        lines.append("")
    import glob

    for p in sorted(glob.glob(os.path.join(RESULTS, "rsl_parity_rate_*.json"))):
        with open(p) as f:
            rr = json.load(f)
        ov = ", ".join(f"{k}={v}" for k, v in (rr.get("overrides") or {}).items()) or "parity schedule"
        lines += [f"## Rates per N, {rr['task']} ({ov}; {rr['date']}, {rr['rounds']} alternating rounds in one "
                  "process, shared machine)", "",
                  "Raw: the mjlab env alone under the learners' workload; loop: whole FastPPO parity iterations "
                  "(rollout + update) in the same round; loop/raw: the median of the per-round ratios (drift "
                  "cancels within a round).", "",
                  "| N | raw env-steps/s | loop env-steps/s | loop / raw |", "| ---: | ---: | ---: | ---: |"]
        for n in rr["raw_median"]:
            lines.append(f"| {n} | {rr['raw_median'][n] / 1e3:.1f}k | {rr['loop_median'][n] / 1e3:.1f}k | "
                         f"{rr['loop_over_raw'][n]:.2f} |")
        lines.append("")
    for p in sorted(glob.glob(os.path.join(RESULTS, "rsl_parity_vs_*.json"))):
        with open(p) as f:
            vv = json.load(f)
        lines += [f"## Whole-loop rate against rsl_rl's runner, {vv['task']}, N={vv['n']} ({vv['date']}, "
                  f"{vv['rounds']} rounds of {vv['iters']} iterations per arm, alternating in one process)", "",
                  "All arms learn from scratch at rsl_rl's schedule (32 steps/env, 5 x 4). `parity`: FastPPO with "
                  "every rsl_rl switch, synchronous; `parity_lws`: the same learning in the simulator's shadow "
                  f"(`learn_while_stepping`, {vv['lws_k']} minibatch steps per env step). Ratio: the arm's rate over "
                  "rsl_rl's in the same round, median [range] over rounds.", "",
                  "| arm | env-steps/s (median) | ratio to rsl_rl |", "| :--- | ---: | ---: |",
                  f"| rsl_rl | {vv['median']['rsl_rl'] / 1e3:.2f}k | 1 |"]
        for k, med in vv["ratio_median"].items():
            lo, hi = vv["ratio_range"][k]
            lines.append(f"| {k} | {vv['median'][k] / 1e3:.2f}k | **{med:.3f}x** [{lo:.2f}-{hi:.2f}] |")
        lines.append("")
    md = "\n".join(lines)
    with open(os.path.join(RESULTS, "rsl_parity.md"), "w") as f:
        f.write(md + "\n")
    with open(os.path.join(RESULTS, "rsl_parity.json"), "w") as f:
        json.dump(dict(rows=rows, runs=recs), f, indent=1, default=str)
    print(md)


def main(argv: Optional[List[str]] = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run", help="run arms serially and append one JSON line per run")
    r.add_argument("--arms", default="rsl_rl,parity,mapped", help="comma list; --list-arms shows them")
    r.add_argument("--task", default="balance", choices=tuple(TASKS))
    r.add_argument("--ns", default="128")
    r.add_argument("--seeds", default="0,1,2,3")
    r.add_argument("--target", type=float, default=None)
    r.add_argument("--cap", type=int, default=1_500_000, help="env steps per run before giving up")
    r.add_argument("--overrides", default="", help="JSON of FastPPO keys (and 'rsl_rl': runner cfg keys)")
    r.add_argument("--tag", default="", help="row name in the report (default: the arm name)")
    r.add_argument("--compile", action="store_true")
    r.add_argument("--impl", default="options", choices=("options", "subclasses"),
                   help="FastPPO arms: the switches as FastPPO's config options (default) or as this file's "
                        "subclasses (how rows before the options existed were measured)")
    r.add_argument("--threads", type=int, default=1)
    r.add_argument("--out", default="")
    q = sub.add_parser("rate", help="raw physics rate per N, alternating windows in one process")
    q.add_argument("--task", default="balance", choices=tuple(TASKS))
    q.add_argument("--ns", default="64,128,256,1024")
    q.add_argument("--rounds", type=int, default=6)
    q.add_argument("--window-steps", type=int, default=20_000)
    q.add_argument("--threads", type=int, default=1)
    q.add_argument("--overrides", default="", help="JSON of FastPPO keys for the loop windows")
    q.add_argument("--tag", default="", help="suffix of the rate file")
    v = sub.add_parser("vs", help="paired whole-loop rates against rsl_rl's runner at one N (part 1)")
    v.add_argument("--task", default="balance", choices=tuple(TASKS))
    v.add_argument("--n", type=int, default=128)
    v.add_argument("--rounds", type=int, default=8)
    v.add_argument("--iters", type=int, default=3, help="whole iterations per arm per round")
    v.add_argument("--lws-k", type=int, default=8, help="learn_steps_per_env_step of the overlapped parity arm")
    v.add_argument("--threads", type=int, default=1)
    s = sub.add_parser("report", help="tables from the runs file")
    s.add_argument("--out", default="")
    sub.add_parser("list", help="the arms")
    args = p.parse_args(argv)
    if args.cmd == "list":
        for k, v in arms().items():
            print(f"{k:14s} {v['label']}")
    else:
        {"run": run, "rate": rate, "vs": vs, "report": report}[args.cmd](args)


if __name__ == "__main__":
    main()
