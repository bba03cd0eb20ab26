"""Helpers of tests/test_resume.py: tiny configs for any registered algorithm, and the
"new process" half of the exact-resume check (``python -m tests._resume_worker JOB.json``).

Tiny configs are derived from each config's declared ``Param`` specs, so an
algorithm registered later gets one without editing this file: small nets,
few envs, small replay, learning from the first steps. A key is only set when
the algorithm declares it and the value passes its spec.
"""
from __future__ import annotations

import json
import math
import os
import sys
from typing import Any, Dict

import torch

TINY = {
    "num_envs": 4, "hidden_sizes": [16], "rollout_length": 8, "num_minibatches": 2, "num_epochs": 1,
    "buffer_size": 512, "batch_size": 16, "learning_starts": 16, "min_sample_timesteps_per_iteration": 0,
    "steps_per_iteration": 8, "warmup_steps": 4, "checkpoint_replay": True, "decorrelate_steps": 0,
    "num_async_learners": 1, "num_executors": 2, "population_size": 2, "num_members": 2,
    "pop_size": 2, "v_min": 0.0, "v_max": 50.0, "total_batch_size": 32, "epsilon_timesteps": 100,
    "target_update_period": 8, "elite_size": 1, "num_elites": 1,
}
ENVS = ("CartPole", "Pendulum")
#: What build_tiny adds to the tiny configs where one training iteration would still run
#: whole episodes: a CEMRL generation evaluates its members over full episodes (Pendulum's
#: 200 steps) unless cut. Set by build_tiny, not tiny_config, so the fingerprints
#: (tests/fingerprints.py) stay those of the tiny configs.
SHORT_ITERATIONS = {"cem_max_episode_steps": 16}

# Extra runs of a registered algorithm with settings the tiny defaults leave off:
# case name -> (algorithm, overrides). The adaptive-KL lr lives in the optimizer
# state, not the config, so it must survive the restore (a KL target this high
# grows the lr every epoch).
VARIANTS = {
    "FastPPO[adaptive_lr_kl]": ("FastPPO", {"adaptive_lr_kl_target": 1.0, "num_epochs": 2}),
    # the extensions' state (RND networks, normalisers, discounted sums, schedule clock) resumes too
    "FastPPO[symmetry,rnd]": ("FastPPO", {
        "symmetry": {"mirror_fn": "rllib_fast.algorithms.extensions:cartpole_mirror", "use_data_augmentation": True,
                     "use_mirror_loss": True, "mirror_loss_coeff": 0.1},
        "rnd": {"weight": 0.5, "reward_normalization": True,
                "weight_schedule": {"mode": "linear", "initial_step": 0, "final_step": 64, "final_value": 0.1}}}),
    # recurrent actor-critic: the memory states are part of the exact resume
    "FastPPO[lstm]": ("FastPPO", {"rnn_type": "lstm", "rnn_hidden_size": 8}),
    "FastPPO[gru_actor]": ("FastPPO", {"rnn_type": "gru", "rnn_on": "actor", "rnn_hidden_size": 8}),
}


def tiny_config(name: str, env: str, seed: int = 0):
    from rllib_fast.algorithms import CONFIGS

    name, overrides = VARIANTS.get(name, (name, {}))
    cfg = CONFIGS[name]()
    spec = cfg.hyperparameter_spec()
    cfg.environment(env)
    for key, value in TINY.items():
        if key in spec:
            if spec[key].error(key, value) is None:
                setattr(cfg, key, value)
        elif key == "min_sample_timesteps_per_iteration":
            cfg.min_sample_timesteps_per_iteration = value
    if "teacher_checkpoint" in spec:   # a distillation student needs a teacher for this env
        cfg.teacher_checkpoint = tiny_teacher(env)
    for key, value in overrides.items():
        setattr(cfg, key, value)
    cfg.debugging(seed=seed)
    return cfg


_TEACHERS: Dict[str, str] = {}


def tiny_teacher(env: str) -> str:
    """The checkpoint of an untrained tiny FastPPO on ``env`` (one per env and
    process, in a temporary directory): a teacher for the tiny distillation configs."""
    if env not in _TEACHERS:
        import tempfile

        from rllib_fast.algorithms import FastPPOConfig

        teacher = (FastPPOConfig().environment(env, num_envs=4)
                   .training(hidden_sizes=[16], rollout_length=8, decorrelate_steps=0).debugging(seed=0).build_algo())
        _TEACHERS[env] = teacher.save_to_path(tempfile.mkdtemp(prefix=f"tiny-teacher-{env}-"))
        teacher.stop()
    return _TEACHERS[env]


def build_tiny(name: str, seed: int = 0, default_decorrelation: bool = False):
    """(algorithm, env) built on the first built-in task the algorithm accepts, with
    ``SHORT_ITERATIONS``; with ``default_decorrelation`` the start-state decorrelation
    stays at its default (on) where the algorithm has one, instead of the tiny configs' 0."""
    errors = []
    for env in ENVS:
        cfg = tiny_config(name, env, seed)
        spec = cfg.hyperparameter_spec()
        for key, value in SHORT_ITERATIONS.items():
            if key in spec:
                setattr(cfg, key, value)
        if default_decorrelation and "decorrelate_steps" in spec:
            cfg.decorrelate_steps = None
        try:
            cfg.validate()
            return cfg.build_algo(), env
        except Exception as err:  # e.g. a continuous-control algorithm on CartPole
            errors.append(f"{env}: {type(err).__name__}: {err}")
    raise RuntimeError(f"{name}: no tiny config builds: {errors}")


def params(algo) -> Dict[str, torch.Tensor]:
    """Every floating tensor of every module in stateful_components()."""
    out = {}
    for cname, comp in algo.stateful_components().items():
        if isinstance(comp, torch.nn.Module):
            for pname, t in comp.state_dict().items():
                if torch.is_tensor(t) and t.is_floating_point():
                    out[f"{cname}.{pname}"] = t.detach().cpu().clone()
    return out


def counters(result: Dict[str, Any]) -> Dict[str, float]:
    er = result.get("env_runners", {})
    ret = er.get("episode_return_mean", math.nan)
    return {"training_iteration": result["training_iteration"],
            "env_steps": result.get("num_env_steps_sampled_lifetime", er.get("num_env_steps_sampled_lifetime")),
            "episodes": er.get("num_episodes_lifetime"),
            "return": None if ret is None or (isinstance(ret, float) and math.isnan(ret)) else float(ret),
            "curr_lr": _float(result.get("learners", {}).get("default_policy", {}).get("curr_lr"))}


def _float(value):
    return None if value is None else float(value)


def main(job_file: str) -> int:
    """Restore each listed checkpoint in this (new) process, check the restored
    parameters, train one more iteration and save parameters + counters."""
    torch.set_num_threads(1)
    from ray.rllib.algorithms.algorithm import Algorithm

    with open(job_file) as f:
        jobs = json.load(f)
    for job in jobs:
        out: Dict[str, Any] = {}
        try:
            algo = Algorithm.from_checkpoint(job["checkpoint"])
            torch.save(params(algo), job["restored_params"])
            result = algo.train()
            out["counters"] = counters(result)
            torch.save(params(algo), job["after_params"])
            algo.stop()
        except Exception as err:  # reported by the test of this algorithm
            import traceback

            out["error"] = f"{type(err).__name__}: {err}\n{traceback.format_exc()[-3000:]}"
        with open(job["out"], "w") as f:
            json.dump(out, f)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
