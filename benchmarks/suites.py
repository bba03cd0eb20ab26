"""The benchmark suites as data: each a list of arms (library adapter, experiment file
or config, env, N, threads) judged under one target, budget and mode. The protocol
(docs/benchmarks.md) is applied by ``protocol.py``, never here.

``threads=None`` leaves the child's environment as a user's shell has it (no thread
variables): the shipped-recipe arms and their peers run that way, since the point is
what a user gets. ``threads=1`` pins torch/OMP to one thread (rate suites, fake arms).
"""
from __future__ import annotations

import math
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
    tuning: bool = False               # a recipe search on tuning seeds (< 100): never a published comparison
    # what a policy that learned nothing earns on each plotted reward term, and what that policy is: the
    # report and the plot set the terms' end-of-run values against it (benchmarks/action_baselines.py)
    term_baselines: Dict[str, float] = field(default_factory=dict)
    term_baselines_what: str = ""


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
    """The shipped recipe (it learns in the simulator's shadow) and its synchronous form, each
    in process and through ``rllib train file``, and rsl_rl's runner at three N."""
    path = f"tune_configs/mjlab-cartpole-{short}-fast.yaml"
    sync = {"learn_while_stepping": False}
    cli = f"`rllib train file {path}` as a user runs it (Tune, local Ray, MLflow; clock from process start)"
    return [
        Arm("recipe", "rllib_fast_file", dict(path=path), what=f"`{path}` as shipped (learns in the simulator's shadow)"),
        Arm("recipe-sync", "rllib_fast_file", dict(path=path, overrides=sync),
            what="the same recipe synchronous, one process"),
        Arm("recipe-cli", "rllib_cli", dict(path=path), what=cli),
        Arm("recipe-cli-sync", "rllib_cli", dict(path=path, overrides=sync),
            what="the same synchronous, through `rllib train file ... --config '{\"learn_while_stepping\": false}'`"),
        # the simulator's cost per step barely grows with N, so rsl_rl's best N may lie above 256
        rsl_mjlab(task, 128), rsl_mjlab(task, 256), rsl_mjlab(task, 512)]


def pql_arms(task: str) -> List[Arm]:
    path = "tune_configs/mjlab-cartpole-balance-pql.yaml"
    no_eval = {"evaluation_interval": None}
    return [
        Arm("pql", "rllib_fast_file", dict(path=path, overrides=no_eval), what=f"`{path}` (learner processes)"),
        Arm("pql-threads", "rllib_fast_file", dict(path=path, overrides=dict(no_eval, backend="thread")),
            what="the same file, learners as threads in one process"),
        Arm("pql-clocks", "rllib_fast_file", dict(path=path, overrides=dict(no_eval, randomize_episode_clocks=True)),
            what="the same file with the episode clocks spread at the start (`randomize_episode_clocks`)"),
        Arm("ddpgn", "rllib_fast_file", dict(path=path, run="DDPGN", drop=PQL_CONCURRENCY, overrides=no_eval),
            what="DDPG(n), sequential, PQL's file settings"),
        Arm("sacn", "rllib_fast_file", dict(path=path, run="SACN", drop=PQL_CONCURRENCY, overrides=no_eval),
            what="SAC(n), sequential, PQL's file settings"),
        Arm("td3-single-file", "single_file", dict(script="single_file_td3", env=f"mjlab:{task}", num_envs=256,
                                                   episode_length_s=MJLAB_EPISODE_S, **MJLAB_TD3),
            what="framework-free TD3 (benchmarks/single_file_td3.py), N=256"),
        # rsl_rl's best N on this task and target (the mjlab-balance suite measured 128, 256 and 512)
        rsl_mjlab(task, 256)]


#: PQL's exploration keys SAC(n) does not take (SAC explores by sampling its own policy)
PQL_EXPLORATION = ("noise_type", "noise_std_min", "noise_std_max")


def robot_arms(task: str) -> List[Arm]:
    """Our arms of an envpool robot suite from its shipped files: FastPPO (as shipped and learning in
    the simulator's shadow), PQL (processes and
    threads) and SAC(n) run sequentially on PQL's file (its networks, C51 critic, replay and
    update-to-data ratio; FastSAC's initial temperature 0.001)."""
    pql = f"tune_configs/envpool-{task}-pql.yaml"
    return [
        Arm("fastppo", "rllib_fast_file", dict(path=f"tune_configs/envpool-{task}-fastppo.yaml")),
        Arm("fastppo-settings-only", "rllib_fast_file", dict(path=f"tune_configs/envpool-{task}-fastppo.yaml",
                                                             overrides=SETTINGS_ONLY),
            what="the same file with FastPPO's own algorithmic defaults, rl_games' hyperparameters only "
                 "(the file's first form)"),
        Arm("fastppo-overlap", "rllib_fast_file", dict(path=f"tune_configs/envpool-{task}-fastppo.yaml",
                                                       overrides={"learn_while_stepping": True,
                                                                  "env_config": {"num_threads": 1}}),
            what="the same file, each update learned while the next rollout steps (the pool on 1 thread in a "
                 "simulator process)"),
        Arm("pql", "rllib_fast_file", dict(path=pql)),
        Arm("pql-threads", "rllib_fast_file", dict(path=pql, overrides={"backend": "thread"}),
            what="the same file, learners as threads in one process"),
        Arm("sacn", "rllib_fast_file", dict(path=pql, run="SACN", drop=PQL_CONCURRENCY + PQL_EXPLORATION,
                                            overrides={"sac_init_alpha": 0.001}),
            what=f"SAC(n), sequential, `{pql}`'s settings, initial temperature 0.001 (FastSAC)")]


def float32_arm(arm: Arm) -> Arm:
    """``arm`` with its updates in float32 (`update_dtype: float32`): a file's form before
    `update_dtype: auto`, and what `auto` resolves to on a CPU without native bfloat16; the
    runs of the files before 2026-11-30 are these arms'."""
    params = dict(arm.params, overrides=dict(arm.params.get("overrides") or {}, update_dtype="float32"))
    return Arm(f"{arm.name}-fp32", arm.adapter, params, arm.threads,
               what=f"`{arm.name}` with its updates in float32 (the file before update_dtype: auto; what `auto` "
                    "resolves to on a CPU without native bfloat16)")


def humanoid_arms() -> List[Arm]:
    """rl_games' PPO, our robot arms, and the float32 forms of the files that now take
    `update_dtype: auto`."""
    ours = robot_arms("humanoid")
    return [Arm("rl_games-ppo", "rl_games", dict(config="configs/mujoco/humanoid_envpool.yaml"),
                what="rl_games 1.6.5 PPO, its own humanoid_envpool.yaml"),
            *ours, *(float32_arm(a) for a in ours if a.name in ("fastppo", "pql", "sacn"))]


#: Go1's velocity-tracking terms (episode mean per step) of a robot that stands still: zero actions, the
#: default pose, 128 episodes (benchmarks/results/go1-baselines.md, `action_baselines.py`); its return is 17.77
GO1_STANDING = {"tracking_lin_vel": 0.249, "tracking_ang_vel": 0.254}
GO1_STANDING_WHAT = "standing still (zero actions; return 17.77; results/go1-baselines.md)"

#: mjlab's Go1 actor distribution with a smaller initial std (rsl_rl's GaussianDistribution keys)
GO1_STD = 0.3
#: rsl_rl runner overrides for it: the actor's distribution and no entropy bonus
GO1_RSL_STD = {"actor.distribution_cfg": {"class_name": "GaussianDistribution", "init_std": GO1_STD,
                                          "std_type": "scalar"},
               "algorithm.entropy_coef": 0.0}


#: FastPPO's options that make it rsl_rl's PPO step for step (docs/sources.md "FastPPO vs rsl_rl"): the one
#: definition; tests/algorithms/test_ppo_rsl_equivalence.py loads it as its PARITY and checks it against rsl_rl. vf_loss_coeff 2.0:
#: FastPPO's value loss is half the squared error, rsl_rl's the whole one (its value_loss_coef 1.0).
RSL_RL_OPTIONS = dict(init="torch", std_param="scalar", clip_actions=False, adaptive_lr_every="minibatch",
                      kl_estimator="analytic", adaptive_lr_bounds=[1e-5, 1e-2], normalize_advantages_over="batch",
                      normalize_values=False, vf_loss_coeff=2.0, grad_clip_scope="per_network", adam_eps=1e-8,
                      shuffle="once")


def go1_arms() -> List[Arm]:
    """The Go1 joystick suite (issue 39): rsl_rl's runner with mjlab's Go1 PPO settings (which do not
    learn at 64 envs) and with the initial std 0.3 / no entropy bonus that makes it learn (the
    reference), FastPPO with the reference's settings and its fastest recipe, PQL's and SAC(n)'s
    recipes with candidate update-to-data ratios (docs/pql.md "Go1 on two cores"), PopPPO K=4 on
    one pool."""
    pql, sacn = "tune_configs/envpool-go1-joystick-pql.yaml", "tune_configs/envpool-go1-joystick-sacn.yaml"
    fast = "tune_configs/envpool-go1-joystick-fastppo-fast.yaml"
    small = dict(path="tune_configs/envpool-go1-joystick-fastppo.yaml", overrides={"hidden_sizes": [256, 128, 64]})
    pql_arm = Arm("pql", "rllib_fast_file", dict(path=pql),
                  what=f"`{pql}`: 1 critic update of batch 2048 per 2 vectorised steps (~16 samples per transition)")
    rsl = dict(task="envpool:Go1JoystickFlatTerrain-v1", num_envs=64, mjlab_task="Mjlab-Velocity-Flat-Unitree-Go1")
    return [
        Arm("rsl_rl-64", "rsl_rl_envpool", rsl,
            what="rsl_rl's runner, mjlab's Go1 PPO settings, N=64 as our arms (a Go1 pool holds ~40-90 MB per env), "
                 "through benchmarks/peers/envpool_rsl_rl.py"),
        Arm("rsl_rl-64-std0.3", "rsl_rl_envpool", dict(rsl, overrides=GO1_RSL_STD),
            what=f"the same runner and settings with initial std {GO1_STD} and no entropy bonus, the change that "
                 "makes PPO learn Go1 at 64 envs (`go1-ppo-tuning`): the reference"),
        Arm("fastppo", "rllib_fast_file", dict(path="tune_configs/envpool-go1-joystick-fastppo.yaml"),
            what="FastPPO with the reference's settings, `tune_configs/envpool-go1-joystick-fastppo.yaml`"),
        Arm("fastppo-rsl-options", "rllib_fast_file",
            dict(path="tune_configs/envpool-go1-joystick-fastppo.yaml", overrides=RSL_RL_OPTIONS),
            what="`fastppo` with rsl_rl's algorithmic options (`RSL_RL_OPTIONS`: torch init, scalar std, analytic KL "
                 "and the lr adapted per minibatch, batch-wide advantages, raw value targets, per-network grad "
                 "clip, Adam eps 1e-8, one shuffle): the reference's algorithm step for step, FastPPO's implementation"),
        Arm("fastppo-rsl-options-bf16", "rllib_fast_file",
            dict(path="tune_configs/envpool-go1-joystick-fastppo.yaml",
                 overrides=dict(RSL_RL_OPTIONS, update_dtype="bfloat16")),
            what="`fastppo-rsl-options` with the update's forward and backward in bfloat16 (`update_dtype`): the "
                 "update was half of each iteration, and this CPU multiplies bfloat16 natively (AVX512-BF16)"),
        Arm("fastppo-fast", "rllib_fast_file", dict(path=fast),
            what=f"FastPPO's fastest Go1 recipe, `{fast}`: `fastppo-rsl-options-bf16` with update_dtype 'auto' "
                 "(bfloat16 where the CPU has it natively, as here)"),
        Arm("fastppo-256", "rllib_fast_file", small,
            what="the reference's settings with [256, 128, 64] networks and FastPPO's own options (the "
                 "`fastppo-fast` file until 2026-11-30)"),
        Arm("fastppo-256-overlap", "rllib_fast_file",
            dict(small, overrides=dict(small["overrides"], learn_while_stepping=True, learn_steps_per_env_step=20,
                                       env_config={"num_threads": 1})),
            what="`fastppo-256`, each update learned while the next rollout steps (the pool on 1 thread in a "
                 "simulator process)"),
        Arm("fastppo-256-critic512", "rllib_fast_file",
            dict(small, overrides=dict(small["overrides"], critic_hidden_sizes=[512, 256, 128])),
            what="`fastppo-256`'s [256, 128, 64] actor with the reference's [512, 256, 128] critic: per env "
                 "step the reference's networks learned more, the small ones act and update faster"),
        Arm("fastppo-256-t8", "rllib_fast_file",
            dict(small, overrides=dict(small["overrides"], rollout_length=8, num_minibatches=2)),
            what="`fastppo-256` updating 3x as often per env step (8 steps x 64 envs, 2 minibatches of 256; "
                 "the same learner work per env step)"),
        pql_arm, float32_arm(pql_arm),
        Arm("pql-utd2", "rllib_fast_file", dict(path=pql, overrides={"beta_av": 2.0}),
            what="the file's first form, 2 critic updates per vectorised step (~64 samples per transition, "
                 "FastTD3's replay ratio)"),
        Arm("pql-small", "rllib_fast_file", dict(path=pql, overrides={"beta_av": 1.0, "batch_size": 1024,
                                                                     "critic_hidden_sizes": [256, 256]}),
            what="the same file, 1 critic update of batch 1024 per vectorised step, [256, 256] critics "
                 "(~16 samples per transition, about a quarter of the cost per update)"),
        Arm("pql-ls128k", "rllib_fast_file", dict(path=pql, overrides={"learning_starts": 131072}),
            what="the same file learning from the 131,072nd transition, as the SAC(n) file (docs/pql.md "
                 "\"Go1: when learning starts\")"),
        Arm("pql-threads", "rllib_fast_file", dict(path=pql, overrides={"backend": "thread"}),
            what="the same file, learners as threads in one process"),
        Arm("sacn", "rllib_fast_file", dict(path=sacn),
            what=f"`{sacn}`: sequential, 1 critic update of batch 2048 per vectorised step, learning from "
                 "the 131,072nd transition"),
        Arm("sacn-ls-auto", "rllib_fast_file", dict(path=sacn, overrides={"learning_starts": "auto"}),
            what="the same file learning from the first 2,048 transitions (one batch; the file until 2026-11-30)"),
        Arm("sacn-utd0.5", "rllib_fast_file", dict(path=sacn, overrides={"beta_av": 0.5}),
            what="the same file, 1 critic update per 2 vectorised steps"),
        Arm("pop_ppo-4", "rllib_fast_file", dict(path="tune_configs/envpool-go1-joystick-pop-ppo.yaml"),
            what="PopPPO, 4 members x 16 envs on one 64-env pool; best member's own last-100 window"),
        Arm("pop_ppo-2x32", "rllib_fast_file", dict(path="tune_configs/envpool-go1-joystick-pop-ppo.yaml",
                                                   overrides={"population_size": 2, "num_envs_per_member": 32}),
            what="PopPPO, 2 members x 32 envs on the same 64-env pool: each member gets half the env steps "
                 "instead of a quarter")]


def go1_ppo_candidates() -> List[Arm]:
    """PPO on Go1 at the 64 envs this CPU affords did not learn in 20 minutes (rsl_rl's runner and
    FastPPO with mjlab's settings: last-100 return 0.00, falls within ~30 steps). Playground's Go1
    reward is clipped at 0 per step, so a robot that falls at once earns exactly 0 and PPO's
    advantages carry no signal, while mjlab's initial std 1.0 and entropy bonus keep it falling.
    The candidates start nearer the standing pose: initial std 0.3, no entropy bonus, for rsl_rl's
    runner (the peer with the same change), FastPPO with the same settings and its fast recipe;
    PQL's best Go1 arm runs beside them for its place on the same machine and seed."""
    fastppo = "tune_configs/envpool-go1-joystick-fastppo.yaml"
    pql = "tune_configs/envpool-go1-joystick-pql.yaml"
    std = dict(init_log_std=round(math.log(GO1_STD), 4), entropy_coeff=0.0)
    rsl = dict(task="envpool:Go1JoystickFlatTerrain-v1", num_envs=64, mjlab_task="Mjlab-Velocity-Flat-Unitree-Go1")
    return [
        Arm("rsl_rl-64", "rsl_rl_envpool", rsl, what="rsl_rl's runner, mjlab's Go1 PPO settings (the reference)"),
        Arm("rsl_rl-64-std0.3", "rsl_rl_envpool", dict(rsl, overrides=GO1_RSL_STD),
            what=f"the same, initial std {GO1_STD} and no entropy bonus"),
        Arm("fastppo-std0.3", "rllib_fast_file", dict(path=fastppo, overrides=std),
            what=f"`{fastppo}` (rsl_rl's settings), initial std {GO1_STD} and no entropy bonus"),
        Arm("fastppo-fast-std0.3", "rllib_fast_file",
            dict(path=fastppo, overrides=dict(std, learn_while_stepping=True, learn_steps_per_env_step=20,
                                              env_config={"num_threads": 1})),
            what=f"`{fastppo}`, initial std {GO1_STD} and no entropy bonus, each update learned while the next "
                 "rollout steps (the pool on 1 thread in a simulator process): the fast recipe's form when "
                 "this arm ran"),
        Arm("pql-utd0.5", "rllib_fast_file", dict(path=pql, overrides={"beta_av": 0.5}),
            what=f"`{pql}` with 1 critic update per 2 vectorised steps (the go1 suite's best PQL arm, now the file), "
                 "for PQL's place on the same machine and seed"),
        Arm("fastppo-std0.3-256", "rllib_fast_file",
            dict(path=fastppo, overrides=dict(std, hidden_sizes=[256, 128, 64])),
            what="fastppo-std0.3 with [256, 128, 64] networks: the update was 53% of its wall time"),
        Arm("fastppo-std0.3-e2", "rllib_fast_file",
            dict(path=fastppo, overrides=dict(std, num_epochs=2, num_minibatches=2)),
            what="fastppo-std0.3 with 2 epochs of 2 minibatches (4 Adam steps per rollout instead of 20)")]


def humanoid_ppo_candidates() -> List[Arm]:
    """On Humanoid a synchronous PPO iteration cannot beat the pool's time plus the update's
    (docs/benchmarks.md, `humanoid`): the pool steps at 1.89 cores, and rl_games' [512, 256, 128]
    update is 0.57 s per 8,192 env steps, ~40% of the floor. A smaller network is the candidate
    that cuts the update (and the acting forward) if its return per env step holds."""
    path = "tune_configs/envpool-humanoid-fastppo.yaml"
    return [
        Arm("fastppo", "rllib_fast_file", dict(path=path), what=f"`{path}` (rl_games' [512, 256, 128])"),
        Arm("fastppo-256-128-64", "rllib_fast_file", dict(path=path, overrides={"hidden_sizes": [256, 128, 64]}),
            what="the same file, a [256, 128, 64] trunk (~2.6x fewer multiply-adds per sample)")]


#: rl_games' adaptive lr (its 'legacy' schedule): every minibatch, from the analytic KL to the
#: Gaussians each sample had one epoch earlier
RLG_KL = dict(kl_estimator="analytic", kl_reference="previous_epoch", adaptive_lr_every="minibatch")
#: the envpool robot files' first mapping of rl_games: its hyperparameters with FastPPO's own algorithmic
#: defaults (separate networks, orthogonal init, per-minibatch advantages, the k3 KL per epoch, the hard clip).
#: Kept as an arm so the first results stay reproducible and the gap to rl_games' algorithm stays measured.
SETTINGS_ONLY = dict(init="orthogonal", normalize_advantages_over="minibatch", kl_estimator="k3",
                     kl_reference="auto", adaptive_lr_every="epoch", shared_trunk=False, surrogate_clip="hard")


def ant_ppo_candidates() -> List[Arm]:
    """FastPPO on Ant with rl_games' ant_envpool.yaml hyperparameters only (``SETTINGS_ONLY``) learned
    about half as much per env step as rl_games itself (seed 100: 1,426 against 2,871 at 1.8M env
    steps). The candidates are the differences between the two PPOs that the shared hyperparameters
    leave open, each added to that first mapping, and all of them: what the shipped file now is
    (docs/sources.md, "FastPPO vs rl_games' PPO")."""
    path = "tune_configs/envpool-ant-fastppo.yaml"

    def one(**change):
        return dict(path=path, overrides=dict(SETTINGS_ONLY, **change))

    return [
        Arm("rl_games-ppo", "rl_games", dict(config="configs/mujoco/ant_envpool.yaml"),
            what="rl_games 1.6.5 PPO, its own ant_envpool.yaml (the reference)"),
        Arm("fastppo-settings-only", "rllib_fast_file", dict(path=path, overrides=SETTINGS_ONLY),
            what="rl_games' hyperparameters with FastPPO's own algorithmic defaults (the file's first form)"),
        Arm("fastppo-torch-init", "rllib_fast_file", one(init="torch"),
            what="+ PyTorch's default layer init (rl_games' `initializer: default`) instead of orthogonal"),
        Arm("fastppo-adv-batch", "rllib_fast_file", one(normalize_advantages_over="batch"),
            what="+ advantages standardised over the whole batch (rl_games) instead of per minibatch"),
        Arm("fastppo-kl-rlg", "rllib_fast_file", one(**RLG_KL),
            what="+ rl_games' adaptive lr: the analytic KL of one epoch's movement, adapted every minibatch"),
        Arm("fastppo-rlg", "rllib_fast_file", one(**RLG_KL, init="torch", normalize_advantages_over="batch"),
            what="+ all three"),
        Arm("fastppo-shared", "rllib_fast_file", one(shared_trunk=True),
            what="+ one trunk for policy and value, two linear heads (rl_games' `separate: False`)"),
        Arm("fastppo-smooth", "rllib_fast_file", one(surrogate_clip="smooth"),
            what="+ rl_games' smooth clamp of the ratio (`use_smooth_clamp: True`)"),
        Arm("fastppo-shared-smooth", "rllib_fast_file", one(shared_trunk=True, surrogate_clip="smooth"),
            what="+ both"),
        Arm("fastppo-rlg-all", "rllib_fast_file", dict(path=path),
            what="+ all five differences: rl_games' PPO in FastPPO's loop (the file as shipped now)")]


MASKED_TERMS = ["cart_vel", "pole_vel"]   # the velocity terms removed from mjlab's actor group
#: rsl_rl's RNNModel as rsl_rl's and mjlab's recurrent examples configure it: one LSTM layer of 256 units
RSL_LSTM = dict(rnn_type="lstm", rnn_hidden_dim=256, rnn_num_layers=1)


def masked_arms(task: str) -> List[Arm]:
    """The velocity-masked task: recurrent FastPPO (the shipped recipe), the same with a
    feed-forward policy (it should not reach the bar: the task needs memory), and
    rsl_rl's runner with its recurrent actor on the same observations (the terms
    removed from mjlab's actor group on the env cfg; the critic keeps them in both)."""
    path = "tune_configs/mjlab-cartpole-balance-masked-fastppo-lstm.yaml"
    return [
        Arm("fastppo-lstm", "rllib_fast_file", dict(path=path), what=f"`{path}` as shipped (LSTM 64 on the actor)"),
        Arm("fastppo-mlp", "rllib_fast_file", dict(path=path, overrides={"rnn_type": None}),
            what="the same recipe with a feed-forward policy (rnn_type None)"),
        *[Arm(f"rsl_rl-lstm-{n}", "rsl_rl_mjlab",
              dict(task=task, num_envs=n, episode_length_s=MJLAB_EPISODE_S, drop_actor_terms=MASKED_TERMS,
                   rnn=RSL_LSTM, rnn_on="actor"),
              what=f"rsl_rl's own mjlab runner, mjlab's registered settings, RNNModel actor (LSTM 256, 1 layer), "
                   f"velocities dropped from mjlab's actor group, N={n}")
          for n in (128, 256)]]


def balance_candidates() -> List[Arm]:
    """Changes to the Balance recipe tried on tuning seeds: mjlab's own auto-reset (time-outs
    bootstrapped from V(s_t), as rsl_rl does), a larger N at the same samples per update (the
    simulator's cost per step barely grows with N), more epochs per rollout (learner time is
    cheap next to the simulator's)."""
    path = "tune_configs/mjlab-cartpole-balance-fast.yaml"
    auto = {"env_config": {"cfg": {"episode_length_s": MJLAB_EPISODE_S}, "exact_final_obs": False}}
    sync = {"learn_while_stepping": False}
    return [Arm("sync", "rllib_fast_file", dict(path=path, overrides=sync), what="the recipe synchronous"),
            Arm("sync-auto", "rllib_fast_file", dict(path=path, overrides=dict(sync, **auto)),
                what="synchronous, exact_final_obs false"),
            Arm("sync-auto-512x2", "rllib_fast_file", dict(path=path, overrides=dict(
                sync, **auto, num_envs=512, rollout_length=2)), what="synchronous, exact_final_obs false, N=512 x 2"),
            Arm("sync-auto-10ep", "rllib_fast_file", dict(path=path, overrides=dict(sync, **auto, num_epochs=10)),
                what="synchronous, exact_final_obs false, 10 epochs"),
            Arm("overlap-auto", "rllib_fast_file", dict(path=path, overrides=auto),
                what="in the simulator's shadow, exact_final_obs false")]


SUITES: Dict[str, Suite] = {s.name: s for s in [
    Suite("mjlab-balance", "mjlab Cartpole Balance (10 s episodes): shipped recipe vs rsl_rl",
          recipe_arms("balance", "Mjlab-Cartpole-Balance"), target=9.0, budget_s=300, probe=MJ_PROBE, peer="rsl_rl"),
    Suite("mjlab-swingup", "mjlab Cartpole Swing-up (10 s episodes): shipped recipe vs rsl_rl",
          recipe_arms("swingup", "Mjlab-Cartpole-Swingup"), target=8.0, budget_s=400,
          probe=dict(MJ_PROBE, task="Mjlab-Cartpole-Swingup"), peer="rsl_rl"),
    Suite("mjlab-masked", "mjlab Cartpole Balance, velocities hidden from the actor (10 s episodes): recurrent "
                          "FastPPO vs rsl_rl's recurrent runner, and a feed-forward policy",
          masked_arms("Mjlab-Cartpole-Balance"), target=9.0, budget_s=300, probe=MJ_PROBE, peer="rsl_rl"),
    # recipe candidates, judged on tuning seeds (< 100) only; the reported suites use 100-104
    Suite("mjlab-balance-tuning", "mjlab Cartpole Balance: candidate recipe changes on tuning seeds",
          balance_candidates(), target=9.0, budget_s=300, seeds=(1, 2, 3), probe=MJ_PROBE, tuning=True),
    Suite("pql-balance", "mjlab Cartpole Balance: PQL, DDPG(n), SAC(n), single-file TD3 vs rsl_rl",
          pql_arms("Mjlab-Cartpole-Balance"), target=9.0, budget_s=400, probe=MJ_PROBE, peer="rsl_rl"),
    Suite("pop-balance", "mjlab Cartpole Balance: PopPPO K=4 and Tune PBT over 4 FastPPO trials vs one rsl_rl run", [
        Arm("pop_ppo-4", "rllib_fast_file", dict(path="tune_configs/pop-ppo-mjlab-cartpole-balance.yaml"),
            what="PopPPO, 4 members x 64 envs on one simulator; best member's own last-100 window"),
        # the FastPPO file runs mjlab's own 50 s episodes: the suite's 10 s episodes are set on it
        Arm("tune-pbt-4", "tune_pbt", dict(path="tune_configs/mjlab-cartpole-balance-fastppo.yaml", overrides={
            "env_config": {"cfg": {"episode_length_s": MJLAB_EPISODE_S}}}),
            what="Tune PBT over 4 FastPPO trials (`mjlab-cartpole-balance-fastppo.yaml` with 10 s episodes; "
                 "paper_pbt, every 8 iterations), 2 Ray CPUs"),
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
    Suite("go1", "envpool Go1 joystick (flat): return reached in 20 minutes, then time to it", go1_arms(),
          mode="fixed", budget_s=1200, reference="rsl_rl-64-std0.3", peer="rsl_rl",
          probe=dict(kind="envpool", task="Go1JoystickFlatTerrain-v1", num_envs=64),
          term_baselines=GO1_STANDING, term_baselines_what=GO1_STANDING_WHAT),
    Suite("go1-ppo-tuning", "envpool Go1 joystick (flat): PPO candidates that learn at 64 envs, on tuning seeds",
          go1_ppo_candidates(), mode="fixed", budget_s=300, seeds=(1, 2, 3), reference="rsl_rl-64",
          probe=dict(kind="envpool", task="Go1JoystickFlatTerrain-v1", num_envs=64), tuning=True),
    Suite("humanoid-ppo-tuning", "envpool Humanoid-v4: FastPPO candidates on tuning seeds",
          humanoid_ppo_candidates(), mode="fixed", budget_s=600, seeds=(1, 2, 3), reference="fastppo",
          probe=dict(kind="envpool", task="Humanoid-v4", num_envs=64), tuning=True),
    Suite("ant-ppo-tuning", "envpool Ant-v4: FastPPO candidates against rl_games' PPO on tuning seeds",
          ant_ppo_candidates(), mode="fixed", budget_s=240, seeds=(1, 2, 3), reference="rl_games-ppo",
          probe=dict(kind="envpool", task="Ant-v4", num_envs=64), tuning=True),
    Suite("ant", "envpool Ant-v4: return reached in 20 minutes, then time to it", [
        Arm("rl_games-ppo", "rl_games", dict(config="configs/mujoco/ant_envpool.yaml"),
            what="rl_games 1.6.5 PPO, its own ant_envpool.yaml"),
        Arm("rl_games-sac", "rl_games", dict(config="configs/mujoco/sac_ant_envpool.yaml"),
            what="rl_games 1.6.5 SAC, its own sac_ant_envpool.yaml"),
        *robot_arms("ant")],
          mode="fixed", budget_s=1200, reference="rl_games-ppo", peer="rl_games",
          probe=dict(kind="envpool", task="Ant-v4", num_envs=64)),
    # rl_games 1.6.5 ships no SAC envpool config for Humanoid (configs/mujoco: sac_ant_envpool and
    # sac_halfcheetah_envpool only), so its PPO is the peer here
    Suite("humanoid", "envpool Humanoid-v4: return reached in 20 minutes, then time to it", humanoid_arms(),
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
