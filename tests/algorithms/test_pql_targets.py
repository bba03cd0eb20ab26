"""PQL family, pure pieces: n-step aggregation (termination vs truncation,
late-reset invalid steps, one source of gamma), the clipped double-Q target,
target-policy smoothing bounds, the mixed-noise sigma table and schedules,
replay sizing and config validation."""
import pytest
import torch

from rllib_fast.algorithms.pql import DDPGNConfig, PQLConfig
from rllib_fast.algorithms.pql.targets import (clipped_double_q_target, decayed_sigma,
                                               distributional_double_q_target, mixed_sigma, smoothed_target_action)
from rllib_fast.algorithms.pql.nstep import NStepAggregator
from rllib_fast.algorithms.pql.transition_replay import TransitionReplay, replay_bytes


def _push_all(agg, rewards, term, trunc, valid=None):
    """Push T steps for N envs; obs of step t, env i is 10*t + i; final_obs is 100 + obs."""
    T, N = rewards.shape
    outs = []
    for t in range(T):
        obs = (10.0 * t + torch.arange(N, dtype=torch.float32)).unsqueeze(1)
        out = agg.push(obs, torch.zeros(N, 1), rewards[t], term[t], trunc[t], obs + 100.0,
                       None if valid is None else valid[t])
        outs.append(out)
    return outs


def test_nstep_cuts_at_termination_and_truncation_and_bootstraps_timeouts():
    g = 0.5
    agg = NStepAggregator(3, 3, g, (1,), (1,), torch.device("cpu"))
    rewards = torch.tensor([[1.0, 1.0, 1.0], [2.0, 2.0, 2.0], [3.0, 3.0, 3.0]])
    term = torch.tensor([[False, False, False], [False, True, False], [False, False, False]])
    trunc = torch.tensor([[False, False, False], [False, False, True], [False, False, False]])
    outs = _push_all(agg, rewards, term, trunc)
    assert outs[0] is None and outs[1] is None
    b = outs[2]   # the window starting at step 0
    assert torch.allclose(b["reward"], torch.tensor([1 + g * 2 + g * g * 3, 1 + g * 2, 1 + g * 2]))
    # no end: gamma^3; terminated after 2 steps: 0; truncated after 2 steps: gamma^2 (bootstrapped)
    assert torch.allclose(b["discount"], torch.tensor([g ** 3, 0.0, g ** 2]))
    # bootstrap obs: the final obs of the last included step (step 2 for env 0, step 1 = terminal obs otherwise)
    assert b["next_obs"].squeeze(1).tolist() == [100 + 20 + 0, 100 + 10 + 1, 100 + 10 + 2]
    assert b["obs"].squeeze(1).tolist() == [0.0, 1.0, 2.0] and b["valid"].all()


def test_nstep_never_includes_invalid_late_reset_steps():
    agg = NStepAggregator(2, 3, 0.9, (1,), (1,), torch.device("cpu"))
    rewards = torch.ones(4, 2)
    no = torch.zeros(4, 2, dtype=torch.bool)
    valid = torch.ones(4, 2, dtype=torch.bool)
    valid[1, 0] = False   # env 0: step 1 straddles a late reset -> window from step 0 stops before it
    valid[0, 1] = False   # env 1: the window's start itself is invalid -> emitted masked
    outs = _push_all(agg, rewards, no, no, valid)
    b = outs[2]
    assert b["valid"].tolist() == [True, False]
    assert b["reward"][0].item() == pytest.approx(1.0) and b["discount"][0].item() == pytest.approx(0.9)
    assert b["next_obs"][0].item() == 100.0
    # the window starting at step 1 for env 1 is fine and full length
    b = outs[3]
    assert b["valid"].tolist() == [False, True]
    assert b["reward"][1].item() == pytest.approx(1 + 0.9 + 0.81)


def test_gamma_comes_from_the_config_only():
    algo = DDPGNConfig().environment("Pendulum", num_envs=4).training(
        gamma=0.9, hidden_sizes=[8], buffer_size=400).debugging(seed=0).build_algo()
    try:
        assert algo.actor.aggregator.gamma == 0.9
        assert algo.actor.aggregator._powers[1].item() == pytest.approx(0.9)
    finally:
        algo.stop()


def test_clipped_double_q_target_and_smoothing_bounds():
    r = torch.tensor([1.0, 2.0, 0.5])
    d = torch.tensor([0.9 ** 3, 0.0, 0.81])
    q1, q2 = torch.tensor([10.0, 5.0, -1.0]), torch.tensor([8.0, 7.0, -3.0])
    y = clipped_double_q_target(r, d, q1, q2)
    assert torch.allclose(y, torch.tensor([1 + 0.729 * 8, 2.0, 0.5 + 0.81 * -3]))
    y_sac = clipped_double_q_target(r, d, q1, q2, entropy_bonus=torch.tensor([1.0, 1.0, 1.0]))
    assert torch.allclose(y_sac, y + d)
    g = torch.Generator().manual_seed(0)
    mu = torch.tensor([-0.95, 0.0, 0.95]).repeat(20000, 1)
    a = smoothed_target_action(mu, std=0.8, clip=0.2, generator=g)
    diff = a - mu
    assert a.min() >= -1.0 and a.max() <= 1.0
    assert diff[:, 1].abs().max() <= 0.2 + 1e-6 and diff[:, 1].abs().max() > 0.19   # clip reached (std >> clip)
    assert diff[:, 2].max() <= 0.05 + 1e-6 and diff[:, 0].min() >= -0.05 - 1e-6    # action bounds respected


def test_distributional_target_is_a_distribution_from_the_pessimistic_head():
    support = torch.linspace(-10, 10, 51)
    lo, hi = torch.zeros(2, 51), torch.zeros(2, 51)
    lo[:, 20], hi[:, 40] = 10.0, 10.0          # head 1 mass near -2, head 2 near +6
    t = distributional_double_q_target(torch.tensor([0.0, 1.0]), torch.tensor([1.0, 0.0]), lo, hi, support)
    assert torch.allclose(t.sum(-1), torch.ones(2), atol=1e-5)
    assert (t[0] * support).sum().item() == pytest.approx((torch.softmax(lo[0], -1) * support).sum().item(),
                                                          abs=1e-3)
    assert (t[1] * support).sum().item() == pytest.approx(1.0, abs=1e-4)   # terminal: all mass at r


def test_mixed_noise_sigma_table_and_schedules():
    table = mixed_sigma(5, 0.05, 0.8)
    assert torch.allclose(table, torch.tensor([0.05, 0.2375, 0.425, 0.6125, 0.8]))
    # global index: two halves of 8 envs span the range once together
    halves = torch.cat([mixed_sigma(4, 0.05, 0.8, 0, 8), mixed_sigma(4, 0.05, 0.8, 4, 8)])
    assert torch.allclose(halves, mixed_sigma(8, 0.05, 0.8))
    assert decayed_sigma(0.4, None, 500, 0.99, 100, 0.05) == 0.4
    assert decayed_sigma(0.4, "exp", 10, 0.9, 100, 0.05) == pytest.approx(0.4 * 0.9 ** 10)
    assert decayed_sigma(0.4, "exp", 10_000, 0.9, 100, 0.05) == 0.05
    assert decayed_sigma(0.4, "linear", 50, 0.99, 100, 0.05) == pytest.approx(0.225)
    algo = PQLConfig().environment("Pendulum", num_envs=5).training(
        hidden_sizes=[8], buffer_size=500).debugging(seed=0).build_algo()
    try:
        assert torch.allclose(algo.actor.sigma().squeeze(1), table)
    finally:
        algo.stop()


def test_replay_allocates_once_reports_bytes_and_rejects_oversized():
    fields = {"obs": ((3,), torch.float32), "valid": ((), torch.bool)}
    rb = TransitionReplay(10, 4, fields, torch.device("cpu"))
    assert rb.capacity == 8 and rb.nbytes == replay_bytes(8, fields) == 8 * (12 + 1)
    ptrs = [t.data_ptr() for t in rb.data.values()]
    for i in range(5):
        rb.add({"obs": torch.full((4, 3), float(i)), "valid": torch.ones(4, dtype=torch.bool)})
    assert [t.data_ptr() for t in rb.data.values()] == ptrs and len(rb) == 8
    assert set(rb.data["obs"][:, 0].tolist()) == {3.0, 4.0}
    cfg = DDPGNConfig().environment("Pendulum").training(buffer_size=10 ** 9, max_replay_bytes=10 ** 6)
    with pytest.raises(ValueError, match=r"buffer_size.*needs \d+ bytes"):
        cfg.validate()
    algo = DDPGNConfig().environment("Pendulum", num_envs=4).training(hidden_sizes=[8], buffer_size=400) \
        .debugging(seed=0).build_algo()
    try:
        assert algo.replay_bytes == 400 * (3 + 1 + 1 + 3 + 1 + 1) * 4 - 400 * 3   # float fields + 1-byte valid
    finally:
        algo.stop()


@pytest.mark.parametrize("key,value,allowed", [
    ("noise_type", "gauss", "'mixed', 'mixed_random', 'fixed'"),
    ("backend", "mpi", "'auto', 'thread', 'process', 'ray'"),
    ("policy_learner", "td3", "'ddpg', 'sac'"),
    ("batch_size", 0, "'auto' or a positive int"),
    ("ray_transport", "nccl", "'object_store', 'collective'"),
])
def test_bad_config_values_name_key_and_allowed(key, value, allowed):
    with pytest.raises(ValueError, match=f"`{key}`.*allowed: (one of )?{allowed}"):
        PQLConfig().environment("Pendulum").training(**{key: value}).validate()


def test_ray_transport_needs_the_ray_backend():
    with pytest.raises(ValueError, match="`ray_transport` = 'collective' applies only to backend='ray'"):
        PQLConfig().environment("Pendulum").training(ray_transport="collective").validate()


def test_noise_decay_needs_fixed_noise():
    with pytest.raises(ValueError, match="noise_decay"):
        PQLConfig().environment("Pendulum").training(noise_decay="exp").validate()


def test_discrete_env_is_rejected():
    with pytest.raises(ValueError, match="continuous"):   # CartPole is probed at validation
        DDPGNConfig().environment("CartPole", num_envs=2).training(buffer_size=1000).build_algo()


def test_replay_size_check_counts_states_and_skips_an_absent_gpu():
    """The replay check counts the asymmetric critic's states (and not when
    ``asymmetric_critic=False``); a simulator source is not started for a config
    check, so it happens at build there. A CUDA placement validated on a machine
    without CUDA (a GPU experiment file checked on a laptop) is not an error: the
    GPU's free memory is read where the run happens."""
    env = ("isaacgym:PointReach", {"task_class": "rllib_fast.envs.standins.vectask:PointReachTask",
                                   "cfg": {"env": {"episodeLength": 16}}})
    # obs 6, action 2, states 8: 90 bytes per transition without states, 186 with
    cap = 1000 * 100
    cfg = PQLConfig().environment(env[0], env_config=env[1], num_envs=4).training(
        buffer_size=1000, max_replay_bytes=cap)
    cfg.validate()    # the Isaac Gym source is not built to know its spaces
    with pytest.raises(ValueError, match=r"buffer_size.*needs 186000 bytes.*allowed: buffer_size <= 537"):
        cfg.build_algo()
    cfg.training(asymmetric_critic=False).build_algo().stop()  # 90 kB fits
    if not torch.cuda.is_available():
        PQLConfig().environment("Pendulum", env_device="cuda").training(buffer_size=10 ** 6).validate()
        assert PQLConfig().environment("Pendulum", env_device="cuda").resolved_max_replay_bytes() is None
