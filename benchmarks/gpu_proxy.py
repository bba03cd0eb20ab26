"""GPU readiness measured on CPU: kernel launches and host syncs per iteration.

No GPU is lent to this project, so this script counts, on CPU, what a GPU
pays for (rules: ``benchmarks/launch_count.py``): kernels launched per
training iteration, eager and ``compile=True`` (generated kernels counted by
call, so the compiled path's real launch count is seen), and device-to-host
syncs, split by where they happen: per rollout step, per gradient update
(minibatch), and once per iteration. The split is a fit, not a guess: the
same arm is counted at two rollout lengths and two update counts, and
``count = fixed + per_step * steps + per_update * updates`` is solved
exactly (a sync inside the rollout loop makes the per-iteration count grow
with the rollout length, one inside the minibatch loop with the updates).

Arms (the issue's task: Pendulum, N=4096, T=24, 5 epochs x 4 minibatches,
[64, 64] networks):

* ``fastppo``, ``htsppo`` (sync_interval = T, 4 executor threads),
* ``rsl_rl``: rsl_rl 5.4.2's own ``OnPolicyRunner`` and ``PPO`` (one
  ``learn(1)`` per iteration, no log dir, like the ``rsl_rl_mjlab`` adapter of
  ``benchmarks/adapters.py``)
  on the same built-in Pendulum tensor env through :class:`RslVecEnv`, with
  the same N, T, epochs x minibatches, [64, 64] networks and observation
  normalisation; ``rsl_rl_compiled`` is the same with rsl_rl's own
  ``torch_compile_mode='default'`` (it compiles the actor and critic modules),
* ``pql`` (thread backend, Pendulum, T = steps_per_iteration = 24, its
  defaults otherwise; its learners run concurrently, so its updates per
  iteration vary and the per-update counts are the ones to compare),
* ``fastdqn`` (CartPole: a discrete task; rollout_length = T, batch 1024,
  training_intensity 4 -> 384 updates would be too many on 2 cores, so
  training_intensity 0.25 -> 24 updates per iteration at N=4096).

Throughput (env-steps/s) is timed without the counter, every arm built in
this one process and their iterations interleaved round-robin, so all arms
share whatever load the machine has (it is shared: treat it as indicative).

    python benchmarks/gpu_proxy.py                      # the issue's setting, all arms, eager and compiled
    python benchmarks/gpu_proxy.py --arms fastppo,rsl_rl --num-envs 256 --no-compile
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Optional, Tuple

HERE = os.path.dirname(os.path.abspath(__file__))
if HERE not in sys.path:
    sys.path.insert(0, HERE)

import torch  # noqa: E402

from launch_count import LaunchCounter  # noqa: E402

RESULTS = os.path.join(HERE, "results")


# ---------------------------------------------------------------------------------------------
# arms
# ---------------------------------------------------------------------------------------------
@dataclass
class Shape:
    """An arm's iteration shape: vectorised env steps T and the update knob
    (PPO: minibatches per epoch; DQN: training_intensity; PQL: beta_av)."""

    num_envs: int = 4096
    steps: int = 24
    epochs: int = 5
    minibatches: int = 4
    compile: Any = False
    extra: Dict[str, Any] = field(default_factory=dict)


class Arm:
    """Builds a runnable and reads one iteration's (steps, updates)."""

    name = ""
    task = "Pendulum"

    def build(self, s: Shape):
        raise NotImplementedError

    def iterate(self, runner) -> Tuple[int, int]:
        """One training iteration; returns (vectorised env steps, gradient updates) it did."""
        raise NotImplementedError

    def close(self, runner) -> None:
        stop = getattr(runner, "stop", None)
        if stop is not None:
            stop()

    def scale_steps(self, s: Shape) -> Shape:
        return Shape(s.num_envs, s.steps * 2, s.epochs, s.minibatches, s.compile, dict(s.extra))

    def scale_updates(self, s: Shape) -> Shape:
        return Shape(s.num_envs, s.steps, s.epochs, s.minibatches * 2, s.compile, dict(s.extra))

    def scale_epochs(self, s: Shape) -> Optional[Shape]:
        """PPO: a variant with more epochs (syncs once per epoch show there); None: no epochs."""
        return None


def _learner(result: Dict[str, Any]) -> Dict[str, Any]:
    return result.get("learners", {}).get("default_policy", {})


class FastPPOArm(Arm):
    name = "fastppo"

    def config(self, s: Shape):
        from rllib_fast.algorithms.ppo import FastPPOConfig

        return FastPPOConfig().environment(self.task, num_envs=s.num_envs).training(
            rollout_length=s.steps, num_epochs=s.epochs, num_minibatches=s.minibatches, hidden_sizes=[64, 64],
            compile=s.compile, **s.extra).debugging(seed=0)

    def build(self, s: Shape):
        self.shape = s
        return self.config(s).build_algo()

    def iterate(self, algo) -> Tuple[int, int]:
        algo.train()
        return self.shape.steps, self.shape.epochs * self.shape.minibatches

    def scale_epochs(self, s: Shape) -> Optional[Shape]:
        return Shape(s.num_envs, s.steps, s.epochs * 2, s.minibatches, s.compile, dict(s.extra))


class HTSPPOArm(FastPPOArm):
    name = "htsppo"

    def config(self, s: Shape):
        from rllib_fast.algorithms.hts import HTSPPOConfig

        return HTSPPOConfig().environment(self.task, num_envs=s.num_envs).training(
            sync_interval=s.steps, num_epochs=s.epochs, num_minibatches=s.minibatches, hidden_sizes=[64, 64],
            compile=s.compile, **s.extra).debugging(seed=0)


class FastDQNArm(Arm):
    name = "fastdqn"
    task = "CartPole"

    def build(self, s: Shape):
        from rllib_fast.algorithms.dqn import FastDQNConfig

        kw = dict(batch_size=1024, training_intensity=0.25 * s.minibatches / 4, learning_starts=0)
        kw.update(s.extra)
        cfg = FastDQNConfig().environment(self.task, num_envs=s.num_envs).training(
            rollout_length=s.steps, hidden_sizes=[64, 64], compile=s.compile, **kw).debugging(seed=0)
        cfg.min_sample_timesteps_per_iteration = 0
        self.shape = s
        return cfg.build_algo()

    def iterate(self, algo) -> Tuple[int, int]:
        before = algo.num_updates
        algo.train()
        return self.shape.steps, int(algo.num_updates - before)


class PQLArm(Arm):
    name = "pql"

    def build(self, s: Shape):
        from rllib_fast.algorithms.pql import PQLConfig

        kw = dict(beta_av=8.0 * s.minibatches / 4)
        kw.update(s.extra)
        cfg = PQLConfig().environment(self.task, num_envs=s.num_envs).training(
            steps_per_iteration=s.steps, backend="thread", compile=s.compile, **kw).debugging(seed=0)
        cfg.min_sample_timesteps_per_iteration = 0
        self.shape = s
        algo = cfg.build_algo()
        if s.compile:   # a learner thread compiling its first update on a loaded CPU outlasts the 60 s pause wait
            import functools

            algo.backend.pause = functools.partial(algo.backend.pause, timeout=3600.0)
        return algo

    def iterate(self, algo) -> Tuple[int, int]:
        r = _learner(algo.train())
        return self.shape.steps, int(r.get("num_critic_updates", 0)) + int(r.get("num_policy_updates", 0))


class RslVecEnv:
    """rsl_rl's ``VecEnv`` contract over one of this project's tensor envs
    (written here from rsl_rl's documented interface): observations as a
    ``TensorDict`` group ``policy``, ``dones`` = terminated | truncated,
    ``extras['time_outs']`` = truncated (rsl_rl bootstraps on them), actions
    in [-1, 1] scaled to the env's bounds."""

    def __init__(self, env):
        from tensordict import TensorDict

        self._td = TensorDict
        self.env = env
        self.num_envs = env.num_envs
        self.num_actions = int(env.action_shape[0])
        self.max_episode_length = env.max_episode_steps
        self.device = str(env.device)
        self.cfg = {}
        self._obs = env.reset(seed=0)
        high = torch.as_tensor(env.single_action_space.high, dtype=torch.float32, device=env.device)
        self._scale = high

    @property
    def episode_length_buf(self) -> torch.Tensor:
        return self.env.elapsed_steps

    @episode_length_buf.setter
    def episode_length_buf(self, value: torch.Tensor) -> None:
        self.env.elapsed_steps = value.to(torch.int32)

    def get_observations(self):
        return self._td({"policy": self._obs}, batch_size=[self.num_envs])

    def step(self, actions: torch.Tensor):
        step = self.env.step(actions * self._scale)
        self._obs = step.obs
        dones = (step.terminated | step.truncated).float()
        return (self._td({"policy": step.obs}, batch_size=[self.num_envs]), step.reward, dones,
                {"time_outs": step.truncated.float()})


class RslRlArm(Arm):
    """rsl_rl's OnPolicyRunner with rsl_rl's PPO defaults and this task's sizes."""

    name = "rsl_rl"
    torch_compile_mode: Optional[str] = None

    def build(self, s: Shape):
        from rllib_fast.envs import registry
        from rsl_rl.runners import OnPolicyRunner

        torch.manual_seed(0)
        env = RslVecEnv(registry.make(self.task, num_envs=s.num_envs, seed=0))
        dist = {"class_name": "GaussianDistribution", "init_std": 1.0}
        net = {"class_name": "MLPModel", "hidden_dims": [64, 64], "activation": "elu", "obs_normalization": True}
        cfg = {
            "num_steps_per_env": s.steps, "save_interval": 10**9, "obs_groups": {"actor": ["policy"],
                                                                                 "critic": ["policy"]},
            "algorithm": {"class_name": "PPO", "num_learning_epochs": s.epochs, "num_mini_batches": s.minibatches,
                          "learning_rate": 1e-3, "schedule": "adaptive", "desired_kl": 0.01, "rnd_cfg": None},
            "actor": {**net, "distribution_cfg": dict(dist)}, "critic": dict(net),
            "torch_compile_mode": self.torch_compile_mode,
        }
        self.shape = s
        return OnPolicyRunner(env, cfg, log_dir=None, device=str(env.device))

    def iterate(self, runner) -> Tuple[int, int]:
        runner.learn(1)
        runner.current_learning_iteration += 1
        return self.shape.steps, self.shape.epochs * self.shape.minibatches

    def close(self, runner) -> None:
        pass

    def scale_epochs(self, s: Shape) -> Optional[Shape]:
        return Shape(s.num_envs, s.steps, s.epochs * 2, s.minibatches, s.compile, dict(s.extra))


class RslRlCompiledArm(RslRlArm):
    name = "rsl_rl_compiled"
    torch_compile_mode = "default"


ARMS: Dict[str, Callable[[], Arm]] = {a.name: a for a in (FastPPOArm, HTSPPOArm, PQLArm, FastDQNArm, RslRlArm,
                                                          RslRlCompiledArm)}


# ---------------------------------------------------------------------------------------------
# counting
# ---------------------------------------------------------------------------------------------
def count_iterations(arm: Arm, shape: Shape, warmup: int = 2, iters: int = 1, quiet: bool = True
                     ) -> Dict[str, Any]:
    """Counts over ``iters`` steady-state iterations (after ``warmup``, which
    also pays any compilation), per iteration, for one build of ``arm``."""
    with LaunchCounter() as lc:
        with _quiet(quiet):
            runner = arm.build(shape)
            try:
                for _ in range(warmup):
                    arm.iterate(runner)
                lc.reset()
                steps = updates = 0
                with lc.recording():
                    for _ in range(iters):
                        s, u = arm.iterate(runner)
                        steps += s
                        updates += u
            finally:
                arm.close(runner)
    out = lc.summary()
    out.update(kernels=out["kernels"] / iters, eager_kernels=out["eager_kernels"] / iters,
               generated_kernels=out["generated_kernels"] / iters, syncs=out["syncs"] / iters,
               steps=steps / iters, updates=updates / iters, epochs=shape.epochs, kernel_ops=lc.by_op("kernel"),
               generated_ops=lc.by_op("compiled"), sync_ops=lc.by_op("sync"))
    return out


def split_by_phase(counts: List[Dict[str, Any]], key: str) -> Dict[str, float]:
    """Solve ``key = fixed + per_step * steps + per_update * updates (+ per_epoch
    * epochs)`` from three counts (base, more steps, more updates) or four (more epochs)."""
    import numpy as np

    cols = ["steps", "updates"] + (["epochs"] if len(counts) > 3 else [])
    a = np.array([[1.0] + [float(c[k]) for k in cols] for c in counts])
    b = np.array([c[key] for c in counts], dtype=float)
    x = np.linalg.lstsq(a, b, rcond=None)[0]
    out = {"per_iteration": float(x[0]), "per_step": float(x[1]), "per_update": float(x[2])}
    if len(cols) > 2:
        out["per_epoch"] = float(x[3])
    return out


def phase_counts(arm: Arm, shape: Shape, warmup: int = 2, quiet: bool = True) -> Dict[str, Any]:
    """Counts of the arm at ``shape`` plus the per-step / per-update / fixed split."""
    base = count_iterations(arm, shape, warmup=warmup, quiet=quiet)
    more_steps = count_iterations(arm, arm.scale_steps(shape), warmup=warmup, quiet=quiet)
    more_updates = count_iterations(arm, arm.scale_updates(shape), warmup=warmup, quiet=quiet)
    runs = [base, more_steps, more_updates]
    epochs = arm.scale_epochs(shape)
    if epochs is not None:
        runs.append(count_iterations(arm, epochs, warmup=warmup, quiet=quiet))
    return {**base, "syncs_split": split_by_phase(runs, "syncs"), "kernels_split": split_by_phase(runs, "kernels"),
            "variants": [{k: r[k] for k in ("steps", "updates", "epochs", "kernels", "syncs", "sync_sites")}
                         for r in runs]}


class _quiet:
    """Silence the libraries' prints (rsl_rl prints its models and a table per iteration)."""

    def __init__(self, on: bool):
        self.on = on

    def __enter__(self):
        if self.on:
            self._null = open(os.devnull, "w")
            self._old = sys.stdout
            sys.stdout = self._null

    def __exit__(self, *exc):
        if self.on:
            sys.stdout = self._old
            self._null.close()


# ---------------------------------------------------------------------------------------------
# throughput (no counter; arms interleaved in one process)
# ---------------------------------------------------------------------------------------------
def throughput(arms: List[Tuple[str, Arm, Shape]], warmup: int, iters: int) -> Dict[str, Dict[str, float]]:
    runners = []
    with _quiet(True):
        for label, arm, shape in arms:
            r = arm.build(shape)
            for _ in range(warmup):
                arm.iterate(r)
            runners.append((label, arm, shape, r))
        spent = {label: 0.0 for label, *_ in runners}
        steps = {label: 0 for label, *_ in runners}
        cpu = {label: 0.0 for label, *_ in runners}
        for _ in range(iters):
            for label, arm, shape, r in runners:
                t0, c0 = time.perf_counter(), time.process_time()
                s, _u = arm.iterate(r)
                spent[label] += time.perf_counter() - t0
                cpu[label] += time.process_time() - c0
                steps[label] += s * shape.num_envs
        for label, arm, _shape, r in runners:
            arm.close(r)
    return {label: {"env_steps_per_s": steps[label] / spent[label], "env_steps_per_cpu_s": steps[label] / cpu[label]}
            for label in spent}


# ---------------------------------------------------------------------------------------------
# report
# ---------------------------------------------------------------------------------------------
def _fmt(x: Any, nd: int = 0) -> str:
    if x is None:
        return "-"
    if isinstance(x, float) and abs(x - round(x)) < 1e-6:
        x = int(round(x))
    return f"{x:,.{nd}f}" if isinstance(x, float) else f"{x:,}"


def report(rows: Dict[str, Dict[str, Any]], meta: Dict[str, Any]) -> str:
    from tables import markdown_table

    head = ["arm", "task", "eager kernels / it", "compiled kernels / it", "syncs / step", "syncs / update",
            "syncs / epoch", "syncs / it (fixed)", "syncs / it (total)", "updates / it", "env-steps/s eager", "env-steps/s compiled"]
    table = []
    for name, r in rows.items():
        e, c = r.get("eager") or {}, r.get("compiled") or {}
        split = e.get("syncs_split", {})
        table.append([name, r["task"], _fmt(e.get("kernels")), _fmt(c.get("kernels")),
                      _fmt(split.get("per_step"), 2), _fmt(split.get("per_update"), 2),
                      _fmt(split.get("per_epoch"), 2),
                      _fmt(split.get("per_iteration"), 1), _fmt(e.get("syncs")), _fmt(e.get("updates")),
                      _fmt(r.get("sps_eager")), _fmt(r.get("sps_compiled"))])
    lines = [markdown_table(head, table), ""]
    ratio = meta.get("ratio_compiled_fastppo_to_rsl_rl")
    if ratio is not None:
        lines.append(f"compiled FastPPO / rsl_rl kernels per iteration: **{ratio:.3f}** (goal <= 0.333)")
    return "\n".join(lines)


def _save(out: str, rows: Dict[str, Any], meta: Dict[str, Any]) -> None:
    os.makedirs(os.path.dirname(out), exist_ok=True)
    with open(out + ".json", "w") as f:
        json.dump({"meta": meta, "rows": rows}, f, indent=1, default=str)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--arms", default="fastppo,htsppo,pql,fastdqn,rsl_rl,rsl_rl_compiled")
    p.add_argument("--num-envs", type=int, default=4096)
    p.add_argument("--steps", type=int, default=24)
    p.add_argument("--no-compile", action="store_true", help="skip the compiled counts")
    p.add_argument("--no-split", action="store_true", help="count the base shape only (no per-phase fit)")
    p.add_argument("--tput-iters", type=int, default=5, help="interleaved timed iterations per arm (0: skip)")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--compiled-only", action="store_true", help="count only the compiled runs (with --merge)")
    p.add_argument("--merge", action="store_true", help="start from the rows of --out's JSON (an earlier run)")
    p.add_argument("--out", default=os.path.join(RESULTS, "gpu_proxy"))
    a = p.parse_args(argv)
    torch.set_num_threads(a.threads)
    names = [n for n in a.arms.split(",") if n]
    shape = Shape(num_envs=a.num_envs, steps=a.steps)
    rows: Dict[str, Dict[str, Any]] = {}
    if a.merge and os.path.exists(a.out + ".json"):   # keep rows counted by an earlier run
        with open(a.out + ".json") as f:
            rows = json.load(f)["rows"]
    for name in names:
        arm = ARMS[name]()
        row = rows.setdefault(name, {"task": arm.task})
        t0 = time.perf_counter()
        try:
            if name == "rsl_rl_compiled":
                if a.no_compile:
                    continue
                row["compiled"] = count_iterations(arm, shape)
                row["eager"] = None
            else:
                if not a.compiled_only:
                    row["eager"] = (count_iterations(arm, shape) if a.no_split else phase_counts(arm, shape))
                if not a.no_compile and name != "rsl_rl":
                    row["compiled"] = count_iterations(arm, Shape(a.num_envs, a.steps, compile=True))
        except Exception as err:  # noqa: BLE001 - one arm's failure is reported, the others still run
            row["error"] = repr(err)
            print(f"{name}: failed: {err!r}", flush=True)
        _save(a.out, rows, {})
        print(f"{name}: counted in {time.perf_counter() - t0:.0f} s: eager "
              f"{(row.get('eager') or {}).get('kernels')} kernels, {(row.get('eager') or {}).get('syncs')} syncs;"
              f" compiled {(row.get('compiled') or {}).get('kernels')}", flush=True)
    if "rsl_rl_compiled" in rows and "rsl_rl" in rows and rows["rsl_rl_compiled"].get("compiled"):
        rows["rsl_rl"]["compiled"] = rows.pop("rsl_rl_compiled")["compiled"]
    if a.tput_iters > 0:
        arms = []
        for name in rows:
            arms.append((f"{name}:eager", ARMS[name](), shape))
            if rows[name].get("compiled") is not None:
                cname = "rsl_rl_compiled" if name == "rsl_rl" else name
                cshape = shape if name == "rsl_rl" else Shape(a.num_envs, a.steps, compile=True)
                arms.append((f"{name}:compiled", ARMS[cname](), cshape))
        arms = [x for x in arms if not rows[x[0].split(":")[0]].get("error")]
        tp = throughput(arms, warmup=2, iters=a.tput_iters)
        for label, v in tp.items():
            name, kind = label.split(":")
            rows[name][f"sps_{kind}"] = v["env_steps_per_s"]
            rows[name][f"sps_{kind}_per_cpu_s"] = v["env_steps_per_cpu_s"]
    meta: Dict[str, Any] = {"num_envs": a.num_envs, "steps": a.steps, "epochs": 5, "minibatches": 4,
                            "hidden": [64, 64], "torch": torch.__version__, "threads": a.threads,
                            "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
                            "load_average": os.getloadavg()}
    try:
        meta["ratio_compiled_fastppo_to_rsl_rl"] = rows["fastppo"]["compiled"]["kernels"] / rows["rsl_rl"]["eager"]["kernels"]
    except (KeyError, TypeError, ZeroDivisionError):
        pass
    text = report(rows, meta)
    print(text)
    _save(a.out, rows, meta)
    with open(a.out + ".md", "w") as f:
        f.write(f"# GPU proxy: kernels and host syncs per iteration (`benchmarks/gpu_proxy.py`)\n\n"
                f"{meta['date']}, torch {meta['torch']}, {a.threads} torch thread(s), N={a.num_envs}, "
                f"T={a.steps}, 5 epochs x 4 minibatches, [64, 64]; load average at the end "
                f"{', '.join(f'{x:.1f}' for x in meta['load_average'])} (shared 2-core machine: throughput is "
                f"indicative; counts do not depend on the load, but HTSPPO's vary with its threads' timing)."
                f"\n\n{text}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
