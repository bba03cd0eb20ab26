"""Replay: n-step windows across terminations/truncations, per-env segments,
PER sampling frequencies and IS weights, sum-tree consistency."""
import pytest
import torch

from rllib_fast.core.replay import SegmentedReplay, SumTree


def _buf(n_envs=2, cap=20, prioritized=False):
    return SegmentedReplay(cap * n_envs, n_envs, (1,), torch.float32, (), torch.int64, torch.device("cpu"),
                           prioritized=prioritized)


def _fill(buf, rewards, terminated, truncated):
    """Env 0 follows the given script; env 1 gets reward 100 every step (must never leak into env 0)."""
    for t, (r, te, tr) in enumerate(zip(rewards, terminated, truncated)):
        obs = torch.tensor([[float(t)], [1000.0 + t]])
        nxt = torch.tensor([[float(t) + 0.5], [1000.5 + t]])  # +0.5 marks "final obs of step t"
        buf.add(obs, torch.tensor([t, t]), torch.tensor([r, 100.0]), torch.tensor([te, False]),
                torch.tensor([te or tr, False]), nxt)


def test_n_step_cuts_at_termination_and_bootstraps_truncation():
    g = 0.9
    buf = _buf()
    #        t:   0    1    2     3    4    5
    rewards = [1.0, 2.0, 3.0, 4.0, 5.0, 6.0]
    term = [False, True, False, False, False, False]
    trunc = [False, False, False, True, False, False]
    _fill(buf, rewards, term, trunc)
    flat = torch.tensor([0 * 2 + 0, 1 * 2 + 0, 2 * 2 + 0, 4 * 2 + 0, 5 * 2 + 0])  # env 0 at t = 0,1,2,4,5
    b = buf.gather(flat, 3, g)
    # t=0: r0 + g r1, ends at terminal t=1 -> no bootstrap
    assert b["return"][0].item() == pytest.approx(1 + g * 2)
    assert b["discount"][0].item() == 0.0 and b["steps"][0].item() == 2
    # t=1: terminal itself -> r1 only, no bootstrap
    assert b["return"][1].item() == pytest.approx(2.0) and b["discount"][1].item() == 0.0
    # t=2: r2 + g r3, truncated at t=3 -> bootstrap from final obs of step 3 with g^2
    assert b["return"][2].item() == pytest.approx(3 + g * 4)
    assert b["discount"][2].item() == pytest.approx(g ** 2) and b["next_obs"][2].item() == 3.5
    # t=4: window hits the newest stored step (5): 2 steps, bootstrap from next_obs of 5
    assert b["return"][3].item() == pytest.approx(5 + g * 6)
    assert b["discount"][3].item() == pytest.approx(g ** 2) and b["next_obs"][3].item() == 5.5
    # t=5: newest step, 1-step target
    assert b["steps"][4].item() == 1 and b["next_obs"][4].item() == 5.5
    # env 1's rewards (100) never appear in env 0's windows: per-env segments
    assert float(b["return"].max()) < 100


def test_n_step_one_equals_plain_transition_and_ring_wraps():
    buf = _buf(n_envs=1, cap=4)
    for t in range(10):
        buf.add(torch.tensor([[float(t)]]), torch.tensor([t]), torch.tensor([float(t)]),
                torch.tensor([False]), torch.tensor([False]), torch.tensor([[t + 1.0]]))
    assert len(buf) == 4
    flat, w = buf.sample_uniform(256)
    b = buf.gather(flat, 1, 0.99)
    assert set(b["obs"].flatten().tolist()) == {6.0, 7.0, 8.0, 9.0}
    torch.testing.assert_close(b["next_obs"], b["obs"] + 1)
    # 3-step windows starting at the oldest step do not run into overwritten data
    b3 = buf.gather(torch.tensor([(6 % 4)]), 3, 1.0)
    assert b3["return"].item() == 6 + 7 + 8


def test_invalid_transitions_get_zero_weight_and_zero_priority():
    buf = _buf(n_envs=2, cap=5, prioritized=True)
    for t in range(5):
        buf.add(torch.zeros(2, 1), torch.zeros(2, dtype=torch.long), torch.zeros(2), torch.zeros(2, dtype=torch.bool),
                torch.zeros(2, dtype=torch.bool), torch.zeros(2, 1), valid=torch.tensor([True, t != 2]))
    flat, _ = buf.sample_prioritized(2000, beta=0.4)
    assert not bool((flat == 2 * 2 + 1).any())  # slot 2, env 1 was invalid
    flat_u, w = buf.sample_uniform(2000)
    assert bool((w[flat_u == 5] == 0).all()) and bool((w[flat_u != 5] == 1).all())


def test_sum_tree_totals_and_sampling_frequencies_follow_priorities():
    torch.manual_seed(0)
    tree = SumTree(5, torch.device("cpu"))
    prios = torch.tensor([1.0, 2.0, 0.0, 3.0, 4.0])
    tree.update(torch.arange(5), prios)
    assert tree.total.item() == pytest.approx(10.0)
    counts = torch.zeros(5)
    for _ in range(50):
        idx, p = tree.sample(400)
        counts += torch.bincount(idx, minlength=5)
        torch.testing.assert_close(p, prios[idx].double())
    freq = counts / counts.sum()
    torch.testing.assert_close(freq, prios / prios.sum(), atol=0.01, rtol=0)
    assert counts[2] == 0


def test_per_is_weights_and_priority_updates():
    buf = _buf(n_envs=1, cap=4, prioritized=True)
    buf.alpha = 1.0
    for t in range(4):
        buf.add(torch.zeros(1, 1), torch.zeros(1, dtype=torch.long), torch.zeros(1), torch.zeros(1, dtype=torch.bool),
                torch.zeros(1, dtype=torch.bool), torch.zeros(1, 1))
    buf.update_priorities(torch.arange(4), torch.tensor([1.0, 1.0, 1.0, 5.0]), eps=0.0)
    assert buf.max_priority.item() == 5.0
    flat, w = buf.sample_prioritized(8, beta=1.0)
    # P = [1,1,1,5]/8 ; w ∝ (N P)^-1 ; normalised by the batch max (a priority-1 item)
    expected = torch.where(flat == 3, torch.tensor(1 / 5), torch.tensor(1.0))
    torch.testing.assert_close(w, expected.float())


def test_state_dict_round_trip():
    buf = _buf(prioritized=True)
    _fill(buf, [1.0, 2.0, 3.0], [False] * 3, [False] * 3)
    other = _buf(prioritized=True)
    other.load_state_dict(buf.state_dict())
    assert other.t == 3 and torch.equal(other.data["reward"], buf.data["reward"])
    assert torch.equal(other.tree.tree, buf.tree.tree)


def test_cut_episodes_ends_windows_at_the_last_stored_step_as_a_truncation():
    """A restore whose source kept its own episodes: the next stored step starts
    from an unrelated observation, so no n-step window may reach across."""
    g = 0.9
    buf = _buf()
    _fill(buf, [1.0, 2.0, 3.0], [False] * 3, [False] * 3)
    buf.cut_episodes()
    _fill(buf, [50.0, 60.0], [False] * 2, [False] * 2)   # "after the restore"
    b = buf.gather(torch.tensor([1 * 2 + 0, 1 * 2 + 1]), 3, g)  # t=1, env 0 and env 1
    for i in range(2):
        assert b["steps"][i].item() == 2                   # t=1, 2; never t=3
        assert b["discount"][i].item() == pytest.approx(g ** 2)  # bootstrapped (truncation)
    assert b["return"][0].item() == pytest.approx(2 + g * 3)
    assert b["next_obs"][0].item() == 2.5                  # the stored next obs of the cut step


def test_nstep_aggregator_cut_episodes():
    from rllib_fast.algorithms.pql.nstep import NStepAggregator

    g, agg = 0.5, NStepAggregator(1, 3, 0.5, (1,), (1,), torch.device("cpu"))
    f = torch.zeros(1, dtype=torch.bool)
    for t in range(2):
        agg.push(torch.tensor([[float(t)]]), torch.zeros(1, 1), torch.tensor([1.0 + t]), f, f,
                 torch.tensor([[t + 0.5]]))
    agg.cut_episodes()
    out = agg.push(torch.tensor([[9.0]]), torch.zeros(1, 1), torch.tensor([100.0]), f, f, torch.tensor([[9.5]]))
    # the window starting at t=0 stops at the cut step t=1 and bootstraps from its next obs
    assert out["reward"].item() == pytest.approx(1 + g * 2)
    assert out["discount"].item() == pytest.approx(g ** 2) and out["next_obs"].item() == 1.5
