"""The benchmark suites as data: each a list of arms (library adapter, experiment file
or config, env, N, threads) judged under one target, budget and mode. The protocol
(docs/benchmarks.md) is applied by ``protocol.py``, never here.

``threads=None`` leaves the child's environment as a user's shell has it (no thread
variables): the shipped-recipe arms and their peers run that way, since the point is
what a user gets. ``threads=1`` pins torch/OMP to one thread (rate suites, fake arms).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Tuple

REPORT_SEEDS = tuple(range(100, 105))   # seeds >= 100: never used for tuning


@dataclass
class Arm:
    name: str
    adapter: str                       # a function of adapters.py, or "module:function"
    params: Dict[str, Any] = field(default_factory=dict)
    threads: Optional[int] = None
    what: str = ""                     # one line for the table's legend

    def __post_init__(self):
        if not self.what:   # say what it runs: the file, or the algorithm and its env
            p = self.params
            self.what = (f"`{p['path']}`" if "path" in p else
                         f"{p.get('algo', self.adapter)} on {p.get('env', p.get('task', '?'))}, N={p.get('num_envs')}"
                         + (f", {', '.join(f'{k}={v}' for k, v in p.items() if k not in ('algo', 'env', 'num_envs', 'env_config'))}"
                            if len(p) > 3 else ""))


@dataclass
class Suite:
    name: str
    title: str
    arms: List[Arm]
    target: Optional[float] = None
    budget_s: float = 300.0
    mode: str = "target"               # "target": stop at the target; "fixed": the whole budget
    seeds: Tuple[int, ...] = REPORT_SEEDS
    eval_every_s: Optional[float] = None
    probe: Dict[str, Any] = field(default_factory=dict)   # the machine line's simulator probe
    reference: Optional[str] = None    # fixed mode: the arm whose final return sets the bar
    window_s: Optional[float] = None   # rate suites: stop this long after the first (warm-up) report
    peer: Optional[str] = None         # arms named with this prefix: the peer; its best median is the ratio's base


MJLAB_EPISODE_S = 10.0
MJ_PROBE = dict(kind="mjlab", task="Mjlab-Cartpole-Balance", num_envs=256)
PQL_CONCURRENCY = ("policy_learner", "backend", "v_learner_device", "p_learner_device", "ratio_slack", "ratio_depth",
                   "max_wait_s", "weight_sync_every", "ray_transport", "ratio_window_s", "process_start_method",
                   "learner_nice")
# the single-file TD3's settings on mjlab Cartpole (those its mjlab arm was compared with)
MJLAB_TD3 = dict(hidden=128, updates_per_step=4, tau=0.02, learning_starts=2000, batch_size=512)


def rsl_mjlab(task: str, n: int) -> Arm:
    return Arm(f"rsl_rl-{n}", "rsl_rl_mjlab", dict(task=task, num_envs=n, episode_length_s=MJLAB_EPISODE_S),
               what=f"rsl_rl's own mjlab runner, mjlab's registered settings, N={n}")


def recipe_arms(short: str, task: str) -> List[Arm]:
    path = f"tune_configs/mjlab-cartpole-{short}-fast.yaml"
    return [
        Arm("recipe", "rllib_fast_file", dict(path=path), what=f"`{path}` as shipped (learns in the simulator's shadow)"),
        Arm("recipe-sync", "rllib_fast_file", dict(path=path, overrides={"learn_while_stepping": False}),
            what="the same recipe synchronous, one process"),
        rsl_mjlab(task, 128), rsl_mjlab(task, 256)]


def pql_arms(task: str) -> List[Arm]:
    path = "tune_configs/mjlab-cartpole-balance-pql.yaml"
    no_eval = {"evaluation_interval": None}
    return [
        Arm("pql", "rllib_fast_file", dict(path=path, overrides=no_eval), what=f"`{path}` (learner processes)"),
        Arm("pql-threads", "rllib_fast_file", dict(path=path, overrides=dict(no_eval, backend="thread")),
            what="the same file, learners as threads in one process"),
        Arm("ddpgn", "rllib_fast_file", dict(path=path, run="DDPGN", drop=PQL_CONCURRENCY, overrides=no_eval),
            what="DDPG(n), sequential, PQL's file settings"),
        Arm("sacn", "rllib_fast_file", dict(path=path, run="SACN", drop=PQL_CONCURRENCY, overrides=no_eval),
            what="SAC(n), sequential, PQL's file settings"),
        Arm("td3-single-file", "single_file", dict(script="single_file_td3", env=f"mjlab:{task}", num_envs=256,
                                                   episode_length_s=MJLAB_EPISODE_S, **MJLAB_TD3),
            what="framework-free TD3 (benchmarks/single_file_td3.py), N=256"),
        rsl_mjlab(task, 128), rsl_mjlab(task, 256)]


SUITES: Dict[str, Suite] = {s.name: s for s in [
    Suite("mjlab-balance", "mjlab Cartpole Balance (10 s episodes): shipped recipe vs rsl_rl",
          recipe_arms("balance", "Mjlab-Cartpole-Balance"), target=9.0, budget_s=300, probe=MJ_PROBE, peer="rsl_rl"),
    Suite("mjlab-swingup", "mjlab Cartpole Swing-up (10 s episodes): shipped recipe vs rsl_rl",
          recipe_arms("swingup", "Mjlab-Cartpole-Swingup"), target=8.0, budget_s=400,
          probe=dict(MJ_PROBE, task="Mjlab-Cartpole-Swingup"), peer="rsl_rl"),
    Suite("pql-balance", "mjlab Cartpole Balance: PQL, DDPG(n), SAC(n), single-file TD3 vs rsl_rl",
          pql_arms("Mjlab-Cartpole-Balance"), target=9.0, budget_s=400, probe=MJ_PROBE, peer="rsl_rl"),
    Suite("pop-balance", "mjlab Cartpole Balance: PopPPO K=4 and Tune PBT over 4 FastPPO trials vs one rsl_rl run", [
        Arm("pop_ppo-4", "rllib_fast_file", dict(path="tune_configs/pop-ppo-mjlab-cartpole-balance.yaml"),
            what="PopPPO, 4 members x 64 envs on one simulator; best member's own last-100 window"),
        Arm("tune-pbt-4", "tune_pbt", dict(path="tune_configs/mjlab-cartpole-balance-fastppo.yaml"),
            what="Tune PBT over 4 FastPPO trials (paper_pbt, every 8 iterations), 2 Ray CPUs"),
        rsl_mjlab("Mjlab-Cartpole-Balance", 256)], target=9.0, budget_s=600, probe=MJ_PROBE, peer="rsl_rl"),
    Suite("cartpole-ppo", "Built-in CartPole: FastPPO vs RLlib PPO vs the single-file PPO", [
        Arm("fastppo-64", "rllib_fast_config", dict(algo="FastPPO", env="CartPole", num_envs=64),
            what="FastPPO's defaults, our batched torch CartPole, N=64"),
        Arm("rllib-ppo-64", "rllib_ppo", dict(
            env="CartPole-v1", num_envs=64,
            training=dict(lr=1e-3, num_epochs=8, vf_loss_coeff=0.5, train_batch_size_per_learner=4096,
                          minibatch_size=1024),
            model=dict(fcnet_hiddens=[64, 64], fcnet_activation="tanh", vf_share_layers=False)),
            what="RLlib PPO (new API stack, local EnvRunner), gymnasium CartPole-v1, N=64, its best of a sweep"),
        Arm("single-file-ppo-64", "single_file", dict(script="single_file_ppo", env="CartPole", num_envs=64,
                                                      num_steps=64, epochs=5, minibatches=4, lr=1e-3,
                                                      kl_target=0.01),
            what="framework-free PPO (benchmarks/single_file_ppo.py), FastPPO's schedule, N=64")],
          target=475.0, budget_s=180, probe=dict(kind="builtin", env="CartPole", num_envs=64), peer="rllib-ppo"),
    Suite("go1", "envpool Go1 joystick (flat): return reached in 20 minutes, then time to it", [
        Arm("rsl_rl-64", "rsl_rl_envpool", dict(task="envpool:Go1JoystickFlatTerrain-v1", num_envs=64,
                                                 mjlab_task="Mjlab-Velocity-Flat-Unitree-Go1"),
            what="rsl_rl's runner, mjlab's Go1 PPO settings, N=64 as our arms (a Go1 pool holds ~40-90 MB per env), "
                 "through benchmarks/peers/envpool_rsl_rl.py"),
        Arm("fastppo", "rllib_fast_file", dict(path="tune_configs/envpool-go1-joystick-fastppo.yaml")),
        Arm("pql", "rllib_fast_file", dict(path="tune_configs/envpool-go1-joystick-pql.yaml")),
        Arm("pql-threads", "rllib_fast_file", dict(path="tune_configs/envpool-go1-joystick-pql.yaml",
                                                   overrides={"backend": "thread"}),
            what="the same file, learners as threads in one process"),
        Arm("pop_ppo-4", "rllib_fast_file", dict(path="tune_configs/envpool-go1-joystick-pop-ppo.yaml"))],
          mode="fixed", budget_s=1200, reference="rsl_rl-64", peer="rsl_rl",
          probe=dict(kind="envpool", task="Go1JoystickFlatTerrain-v1", num_envs=64)),
    Suite("ant", "envpool Ant-v4: return reached in 20 minutes, then time to it", [
        Arm("rl_games-ppo", "rl_games", dict(config="configs/mujoco/ant_envpool.yaml"),
            what="rl_games 1.6.5 PPO, its own ant_envpool.yaml"),
        Arm("rl_games-sac", "rl_games", dict(config="configs/mujoco/sac_ant_envpool.yaml"),
            what="rl_games 1.6.5 SAC, its own sac_ant_envpool.yaml"),
        Arm("fastppo", "rllib_fast_file", dict(path="tune_configs/envpool-ant-fastppo.yaml")),
        Arm("pql", "rllib_fast_file", dict(path="tune_configs/envpool-ant-pql.yaml")),
        Arm("pql-threads", "rllib_fast_file", dict(path="tune_configs/envpool-ant-pql.yaml",
                                                   overrides={"backend": "thread"}),
            what="the same file, learners as threads in one process")],
          mode="fixed", budget_s=1200, reference="rl_games-ppo", peer="rl_games",
          probe=dict(kind="envpool", task="Ant-v4", num_envs=64)),
    Suite("humanoid", "envpool Humanoid-v4: return reached in 20 minutes, then time to it", [
        Arm("rl_games-ppo", "rl_games", dict(config="configs/mujoco/humanoid_envpool.yaml"),
            what="rl_games 1.6.5 PPO, its own humanoid_envpool.yaml"),
        Arm("fastppo", "rllib_fast_file", dict(path="tune_configs/envpool-humanoid-fastppo.yaml")),
        Arm("pql", "rllib_fast_file", dict(path="tune_configs/envpool-humanoid-pql.yaml")),
        Arm("pql-threads", "rllib_fast_file", dict(path="tune_configs/envpool-humanoid-pql.yaml",
                                                   overrides={"backend": "thread"}),
            what="the same file, learners as threads in one process")],
          mode="fixed", budget_s=1200, reference="rl_games-ppo", peer="rl_games",
          probe=dict(kind="envpool", task="Humanoid-v4", num_envs=64)),
    Suite("rates", "Whole-loop env-steps/s over a fixed window (samplers, learners, sources)", [
        Arm("fastppo-cartpole-4096", "rllib_fast_config",
            dict(algo="FastPPO", env="CartPole", num_envs=4096, rollout_length=8), threads=1),
        Arm("fastppo-mjlab-256", "rllib_fast_config",
            dict(algo="FastPPO", env="mjlab:Mjlab-Cartpole-Balance", num_envs=256, rollout_length=32,
                 env_config={"cfg": {"episode_length_s": MJLAB_EPISODE_S}}), threads=1),
        Arm("fastppo-cartpole-4096-2learners", "rllib_fast_config",
            dict(algo="FastPPO", env="CartPole", num_envs=4096, rollout_length=8, num_learners=2), threads=1,
            what="the same over 2 data-parallel learners (one process each)"),
        Arm("fastdqn-cartpole-64", "rllib_fast_config", dict(algo="FastDQN", env="CartPole", num_envs=64),
            threads=1),
        Arm("fasta2c-minatar-breakout-64", "rllib_fast_config",
            dict(algo="FastA2C", env="minatar:breakout", num_envs=64), threads=1),
        rsl_mjlab("Mjlab-Cartpole-Balance", 256)],
          mode="fixed", budget_s=300, window_s=30, seeds=(100,), probe=MJ_PROBE),
    # the harness's own checks (tests/test_bench_harness.py): a known curve
    Suite("fake", "Fake arms with a known curve (the harness's tests)", [
        Arm("fake", "fake", dict(ramp_s=1.0, top=10.0)),
        Arm("fake-2proc", "fake", dict(ramp_s=100.0, burn=True, helper_processes=1, step_s=0.1)),
        Arm("fake-slow", "fake", dict(ramp_s=100.0, top=10.0))],
          target=5.0, budget_s=4.0, seeds=(100,)),
]}
