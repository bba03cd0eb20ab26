"""Distillation: teachers from rllib_fast and rsl_rl checkpoints label as the
original policies act, the behaviour-cloning update on hand-checked numbers,
validation, exact resume, export of the student, and a student distilled on a
partially observed CartPole reaching its trained teacher's return."""
import math
from pathlib import Path

import pytest
import tensordict
import torch
from gymnasium import spaces

from rllib_fast.algorithms.distillation import Distillation, DistillationConfig
from rllib_fast.algorithms.distillation.algorithm import DistillationBatch, DistillationSettings, DistillationUpdate
from rllib_fast.algorithms.distillation.teacher import load_teacher
from rllib_fast.algorithms.actor_critic import ActorCriticModule
from rllib_fast.algorithms.onpolicy.collectives import LearnerCollectives
from rllib_fast.algorithms.ppo import FastPPOConfig

#: the cart's velocity hidden from the student: [x, theta, theta_dot]; the teacher reads the full state
MASKED = {"observed_terms": [0, 2, 3]}
EXAMPLE = Path(__file__).resolve().parents[2] / "tune_configs" / "cartpole-distillation.yaml"
RECURRENT_EXAMPLE = Path(__file__).resolve().parents[2] / "tune_configs" / "masked-cartpole-distillation-lstm.yaml"


#: iterations the recurrent student gets to reach its teacher's return
STUDENT_ITERATIONS = 100


@pytest.fixture(scope="module")
def cartpole_teacher(tmp_path_factory):
    """A FastPPO CartPole policy trained on the full state to a mean return of 400,
    its checkpoint and its greedy evaluation return."""
    algo = FastPPOConfig().environment("CartPole").evaluation(evaluation_duration=20).debugging(seed=0).build_algo()
    for _ in range(60):
        r = algo.train()
        if r["env_runners"].get("episode_return_mean", 0.0) >= 400:
            break
    teacher_return = algo.evaluate()["env_runners"]["episode_return_mean"]
    path = algo.save_to_path(str(tmp_path_factory.mktemp("teacher") / "ckpt"))
    algo.stop()
    return path, teacher_return


def test_partially_observed_cartpole_exposes_the_full_state_as_privileged_states():
    from rllib_fast.envs.classic import CartPoleEnv

    env = CartPoleEnv(3, seed=0, observed_terms=[0, 2, 3], max_episode_steps=2)
    obs = env.reset()
    assert env.single_observation_space.shape == (3,) and env.single_state_space.shape == (4,)
    torch.testing.assert_close(obs, env.states[:, [0, 2, 3]])
    env.step(torch.tensor([0, 1, 0]))
    step = env.step(torch.tensor([1, 1, 0]))        # the time limit: every env resets
    assert bool(step.truncated.all())
    torch.testing.assert_close(step.obs, step.extras["states"][:, [0, 2, 3]])
    torch.testing.assert_close(step.final_obs, step.extras["final_states"][:, [0, 2, 3]])
    torch.testing.assert_close(step.extras["states"], env.states)
    assert not torch.equal(step.extras["states"], step.extras["final_states"])
    masked = CartPoleEnv(2, seed=0, mask_velocity=True)
    assert masked.reset().shape == (2, 2) and masked.observed_terms == (0, 2)
    assert CartPoleEnv(2).states is None and CartPoleEnv(2).single_state_space is None
    with pytest.raises(ValueError, match="observed_terms"):
        CartPoleEnv(2, observed_terms=[0, 4])


def test_missing_teacher_fails_at_build_in_one_line():
    with pytest.raises(ValueError, match="`teacher_checkpoint` = None"):
        DistillationConfig().environment("CartPole").build_algo()
    with pytest.raises(ValueError, match="teacher_checkpoint: /no/such/ckpt does not exist"):
        DistillationConfig().environment("CartPole").training(teacher_checkpoint="/no/such/ckpt").build_algo()


def test_rsl_rl_actor_checkpoint_labels_as_rsl_rl_acts(tmp_path):
    """An rsl_rl MLPModel actor (empirical observation normalisation on, 3 inputs,
    actions in [-2, 2]) saved as rsl_rl's runner saves it: the teacher's labels
    are the actor's deterministic actions in the student's [-1, 1] units."""
    from rsl_rl.models import MLPModel

    n = 16
    g = torch.Generator().manual_seed(0)
    obs = tensordict.TensorDict({"policy": torch.randn(n, 3, generator=g) * 3 + 1}, batch_size=[n])
    actor = MLPModel(obs, {"actor": ["policy"]}, "actor", 1, hidden_dims=(32, 16), activation="elu",
                     obs_normalization=True,
                     distribution_cfg={"class_name": "GaussianDistribution", "init_std": 1.0, "std_type": "scalar"})
    actor.update_normalization(obs)
    path = tmp_path / "model_100.pt"
    torch.save({"actor_state_dict": actor.state_dict(), "iter": 100}, path)
    teacher = load_teacher(path, "elu", 3, spaces.Box(-2.0, 2.0, (1,)), "cpu")
    actor.eval()
    with torch.no_grad():
        expected = actor(obs) / 2.0
    torch.testing.assert_close(teacher.labels(obs["policy"]), expected)


def test_rllib_fast_checkpoint_teacher_labels_with_its_own_normaliser(tmp_path):
    algo = FastPPOConfig().environment("Pendulum", num_envs=4).training(rollout_length=8).debugging(seed=0).build_algo()
    algo.train()
    path = algo.save_to_path(str(tmp_path / "c"))
    teacher = load_teacher(path, "elu", 3, algo.env.single_action_space, "cpu")
    raw = torch.randn(5, 3)
    mean, _ = algo.module.dist_params(algo.module.policy_input(raw))
    torch.testing.assert_close(teacher.labels(raw), mean)
    with pytest.raises(ValueError, match="reads 3 inputs"):
        load_teacher(path, "elu", 4, algo.env.single_action_space, "cpu")
    algo.stop()


def test_update_sums_the_step_losses_of_each_gradient_window():
    """T = 5 steps, gradient_length 2: windows [0, 1], [2, 3], [4]; each window's
    loss is the sum of its steps' mean squared errors. With a linear student
    mean(o) = w o (w = 0 at the start, lr 0) the first reported loss is the
    mean over all steps of labels^2."""
    module = ActorCriticModule(observation_space=spaces.Box(-5, 5, (1,)), action_space=spaces.Box(-1, 1, (1,)),
                               inference_only=False, model_config={"hidden_sizes": []})
    with torch.no_grad():
        module.pi[0].weight.zero_()
        module.pi[0].bias.zero_()
    opt = torch.optim.SGD(module.parameters(), lr=0.0)
    rule = DistillationUpdate(module, opt, DistillationSettings(1, 2, "mse", None), LearnerCollectives())
    obs = torch.arange(10.0).view(5, 2, 1)
    labels = torch.arange(10.0).view(5, 2, 1) * 0.1
    batch = DistillationBatch(obs, labels, None)
    loss, stat = rule.loss(batch, torch.tensor([0, 1]), None)
    step_means = (labels ** 2).mean(dim=(1, 2))
    assert loss.item() == pytest.approx(float(step_means[:2].sum()))
    assert stat.item() == pytest.approx(float(step_means[:2].mean()))
    out = rule.learn(batch)
    windows = [step_means[:2].mean(), step_means[2:4].mean(), step_means[4:].mean()]
    assert float(out["behavior_loss"]) == pytest.approx(float(sum(windows) / 3))
    huber = DistillationUpdate(module, opt, DistillationSettings(1, 2, "huber", None), LearnerCollectives())
    big = DistillationBatch(obs, labels * 100, None)
    h, _ = huber.loss(big, torch.tensor([4]), None)
    assert h.item() == pytest.approx(float((torch.abs(labels[4] * 100) - 0.5).mean()))


@pytest.mark.parametrize("bad, match", [
    ({"teacher_checkpoint": "/", "loss_type": "l1"}, "`loss_type`"),
    ({"teacher_checkpoint": "/", "gradient_length": 0}, "`gradient_length`"),
    ({"teacher_checkpoint": "/", "teacher_obs": "critic"}, "`teacher_obs`"),
    ({"teacher_checkpoint": "/", "rnn_type": "rnn"}, "`rnn_type`"),
    ({"teacher_checkpoint": "/", "rnn_type": "lstm", "compile": True}, "`compile` = True does not combine"),
])
def test_bad_distillation_config_fails_at_validate(bad, match):
    with pytest.raises(ValueError, match=match):
        DistillationConfig().environment("CartPole").training(**bad).validate()


def test_student_distilled_on_masked_cartpole_reaches_the_teachers_return(cartpole_teacher, tmp_path):
    """The shipped example (tune_configs/cartpole-distillation.yaml) with the
    fixture's teacher: the student, which does not see the cart's velocity,
    learns from its own rollouts labelled by the full-state teacher until its
    greedy return is the teacher's; then it resumes exactly from a checkpoint
    and exports like any policy."""
    from ray.rllib.algorithms.algorithm import Algorithm

    from rllib_fast.cli import build_parser, plan_from_file
    from rllib_fast.export import export_checkpoint

    path, teacher_return = cartpole_teacher
    assert teacher_return >= 400, teacher_return
    plan = plan_from_file(str(EXAMPLE), build_parser().parse_args(["train", "file", str(EXAMPLE)]))
    (spec,) = plan.experiments.values()
    assert spec["run"] == "Distillation" and spec["config"]["env_config"] == MASKED
    cfg = (DistillationConfig().update_from_dict({**spec["config"], "teacher_checkpoint": path})
           .evaluation(evaluation_duration=20))
    algo = cfg.build_algo()
    assert isinstance(algo, Distillation) and algo.teacher_key == "states"
    student_return = -math.inf
    for i in range(80):
        algo.train()
        if i % 5 == 4:
            student_return = algo.evaluate()["env_runners"]["episode_return_mean"]
            if student_return >= 0.95 * teacher_return:
                break
    assert student_return >= 0.95 * teacher_return, (student_return, teacher_return)

    ckpt = algo.save_to_path(str(tmp_path / "student"))
    r1 = algo.train()
    restored = Algorithm.from_checkpoint(ckpt)
    r2 = restored.train()
    for a, b in zip(algo.module.parameters(), restored.module.parameters()):
        assert torch.equal(a, b)
    assert r1["learners"]["default_policy"]["behavior_loss"] == r2["learners"]["default_policy"]["behavior_loss"]
    restored.stop()
    algo.stop()
    onnx = export_checkpoint(ckpt, format="torchscript")
    policy = torch.jit.load(onnx)
    assert policy(torch.zeros(2, 3)).shape == (2,)


# -- a recurrent student (rnn_type) ----------------------------------------------------------------
def test_recurrent_update_carries_the_memory_across_gradient_windows():
    """With lr 0 the reported loss is the mean of the windows' per-step mean losses,
    and each window reads the memory carried from the one before: equal to one
    unroll of the whole rollout from the rollout's start state, episode starts
    zeroing the memory (T = 5, windows [0, 1], [2, 3], [4])."""
    from rllib_fast.algorithms.distillation.algorithm import RecurrentDistillationUpdate
    from rllib_fast.algorithms.recurrent_module import Memories, RecurrentActorCriticModule, Sequences

    torch.manual_seed(0)
    module = RecurrentActorCriticModule(observation_space=spaces.Box(-5, 5, (2,)), action_space=spaces.Box(-1, 1, (1,)),
                                        inference_only=False, model_config={"hidden_sizes": [8], "rnn_type": "gru",
                                                                            "rnn_hidden_size": 4, "rnn_on": "actor"})
    opt = torch.optim.SGD(module.parameters(), lr=0.0)
    rule = RecurrentDistillationUpdate(module, opt, DistillationSettings(2, 2, "mse", None), LearnerCollectives())
    g = torch.Generator().manual_seed(1)
    T, N = 5, 3
    obs, labels = torch.randn(T, N, 2, generator=g), torch.randn(T, N, 1, generator=g)
    starts = torch.zeros(T, N, dtype=torch.bool)
    starts[3, 1] = True                                  # env 1's episode ended at t = 2
    start_state = torch.randn(1, 1, N, 4, generator=g)
    batch = DistillationBatch(obs, labels, None, Sequences(starts.reshape(-1), Memories(start_state, None), T))
    out = rule.learn(batch)
    with torch.no_grad():
        latent, _ = module.pi_memory.unroll(obs, start_state, starts)
        mean, _ = module.dist_params(latent.reshape(T * N, -1))
        step_means = ((mean.view(T, N, 1) - labels) ** 2).mean(dim=(1, 2))
    windows = [step_means[:2].mean(), step_means[2:4].mean(), step_means[4:].mean()]
    assert float(out["behavior_loss"]) == pytest.approx(float(sum(windows) / 3), rel=1e-5)


def test_recurrent_teacher_is_refused_in_one_line(tmp_path):
    algo = (FastPPOConfig().environment("CartPole", num_envs=4, env_config={"mask_velocity": True})
            .training(rollout_length=8, rnn_type="gru", rnn_hidden_size=8).debugging(seed=0).build_algo())
    path = algo.save_to_path(str(tmp_path / "c"))
    algo.stop()
    with pytest.raises(ValueError, match="holds a recurrent policy"):
        load_teacher(path, "elu", 2, algo.env.single_action_space, "cpu")


def test_recurrent_student_distilled_on_velocity_masked_cartpole_reaches_the_teachers_return(cartpole_teacher,
                                                                                             tmp_path):
    """The shipped example (tune_configs/masked-cartpole-distillation-lstm.yaml): an LSTM
    student that sees only [x, theta] reaches its full-state teacher's greedy return
    (the feed-forward student stays near 42 on this task, docs/rsl_rl-features.md);
    it resumes exactly, memory included, and exports with its memory as explicit
    inputs and outputs."""
    from ray.rllib.algorithms.algorithm import Algorithm

    from rllib_fast.cli import build_parser, plan_from_file
    from rllib_fast.export import export_checkpoint

    path, teacher_return = cartpole_teacher
    plan = plan_from_file(str(RECURRENT_EXAMPLE), build_parser().parse_args(["train", "file", str(RECURRENT_EXAMPLE)]))
    (spec,) = plan.experiments.values()
    cfg = (DistillationConfig().update_from_dict({**spec["config"], "teacher_checkpoint": path})
           .evaluation(evaluation_duration=20))
    algo = cfg.build_algo()
    assert algo.recurrent and algo.module.pi_memory is not None and algo.module.vf_memory is None
    student_return = -math.inf
    for i in range(STUDENT_ITERATIONS):
        algo.train()
        if i % 5 == 4:
            student_return = algo.evaluate()["env_runners"]["episode_return_mean"]
            if student_return >= 0.95 * teacher_return:
                break
    assert student_return >= 0.95 * teacher_return, (student_return, teacher_return)

    ckpt = algo.save_to_path(str(tmp_path / "student"))
    r1 = algo.train()
    restored = Algorithm.from_checkpoint(ckpt)
    r2 = restored.train()
    assert torch.equal(algo.memories.actor, restored.memories.actor)
    for a, b in zip(algo.module.parameters(), restored.module.parameters()):
        assert torch.equal(a, b)
    assert r1["learners"]["default_policy"]["behavior_loss"] == r2["learners"]["default_policy"]["behavior_loss"]
    restored.stop()
    algo.stop()
    policy = torch.jit.load(export_checkpoint(ckpt, format="torchscript"))
    h = torch.zeros(1, 2, 32)
    actions, h_out, c_out = policy(torch.zeros(2, 2), h, h)
    assert actions.shape == (2,) and h_out.shape == c_out.shape == (1, 2, 32)


GO1 = "envpool:Go1JoystickFlatTerrain-v1"


def test_distillation_on_go1_privileged_teacher_and_recurrent_student(tmp_path):
    """Shape wiring on an asymmetric real task (envpool's MuJoCo Playground Go1: the
    actor group `state` 48, the privileged `privileged_state` 123): an rsl_rl runner
    checkpoint whose actor reads the 123 privileged values labels a recurrent
    student's rollouts on the 48 actor values; and a FastPPO teacher trained for one
    iteration on the actor values (teacher_obs 'obs') distils into an MLP student."""
    pytest.importorskip("envpool")
    from rsl_rl.models import MLPModel

    env_config = {"num_threads": 1}
    small = dict(num_envs=2, rollout_length=8, decorrelate_steps=0, gradient_length=4, hidden_sizes=[16])
    obs = tensordict.TensorDict({"privileged": torch.zeros(2, 123)}, batch_size=[2])
    actor = MLPModel(obs, {"actor": ["privileged"]}, "actor", 12, hidden_dims=(16,), activation="elu",
                     obs_normalization=True,
                     distribution_cfg={"class_name": "GaussianDistribution", "init_std": 1.0, "std_type": "scalar"})
    rsl_path = tmp_path / "model_1.pt"
    torch.save({"actor_state_dict": actor.state_dict(), "iter": 1}, rsl_path)
    algo = (DistillationConfig().environment(GO1, env_config=env_config)
            .training(teacher_checkpoint=str(rsl_path), teacher_obs="states", rnn_type="lstm", rnn_hidden_size=8,
                      **small).debugging(seed=0).build_algo())
    try:
        assert algo.teacher_key == "states" and algo.state_dim == 123 and algo.teacher.in_dim == 123
        for _ in range(2):
            r = algo.train()
        assert math.isfinite(r["learners"]["default_policy"]["behavior_loss"])
        assert algo.memories.actor.shape == (2, 1, 2, 8)
    finally:
        algo.stop()

    teacher = (FastPPOConfig().environment(GO1, env_config=env_config)
               .training(num_envs=2, rollout_length=8, decorrelate_steps=0, hidden_sizes=[16], num_minibatches=2)
               .debugging(seed=0).build_algo())
    teacher.train()
    ppo_path = teacher.save_to_path(str(tmp_path / "ppo"))
    teacher.stop()
    algo = (DistillationConfig().environment(GO1, env_config=env_config)
            .training(teacher_checkpoint=ppo_path, teacher_obs="obs", **small).debugging(seed=0).build_algo())
    try:
        assert algo.teacher_key in ("obs", "raw_obs") and algo.teacher.in_dim == 48
        r = algo.train()
        assert math.isfinite(r["learners"]["default_policy"]["behavior_loss"])
    finally:
        algo.stop()
