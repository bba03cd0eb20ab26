"""On-device episode tracker and running normaliser."""
import math

import torch

from rllib_fast.core.metrics import EpisodeTracker
from rllib_fast.core.normalize import RunningMeanStd


def test_tracker_batched_matches_step_by_step_and_reference():
    torch.manual_seed(0)
    T, N = 40, 5
    r = torch.rand(T, N)
    done = torch.rand(T, N) < 0.15
    a, b = EpisodeTracker(N, torch.device("cpu"), 1000), EpisodeTracker(N, torch.device("cpu"), 1000)
    a.update_batch(r[:20], done[:20]); a.update_batch(r[20:], done[20:])
    for t in range(T):
        b.update(r[t], done[t])
    # python reference
    episodes, acc = [], [0.0] * N
    for t in range(T):
        for i in range(N):
            acc[i] += float(r[t, i])
            if done[t, i]:
                episodes.append(acc[i]); acc[i] = 0.0
    ref = sum(episodes) / len(episodes)
    for tr in (a, b):
        s = tr.summary()
        assert int(tr.filled) == len(episodes)
        assert math.isclose(float(s["episode_return_mean"]), ref, rel_tol=1e-6)
        torch.testing.assert_close(tr.ret, torch.tensor(acc, dtype=torch.float64))


def test_tracker_ring_keeps_last_window_and_skips_invalid():
    tr = EpisodeTracker(2, torch.device("cpu"), window=3)
    for k in range(5):  # env 0 finishes an episode with return k+1 each step
        tr.update(torch.tensor([k + 1.0, 0.0]), torch.tensor([True, False]))
    assert sorted(tr.ring_ret[:3].tolist()) == [3.0, 4.0, 5.0]
    # invalid step adds neither reward nor an episode end
    tr.update(torch.tensor([100.0, 100.0]), torch.tensor([True, True]), valid=torch.tensor([False, False]))
    assert int(tr.filled) == 3 and float(tr.ret.sum()) == 0.0
    assert math.isnan(float(EpisodeTracker(1, torch.device("cpu")).summary()["episode_return_mean"]))


def test_running_mean_std_matches_numpy_and_masks():
    torch.manual_seed(0)
    rms = RunningMeanStd((3,))
    x1, x2 = torch.randn(100, 3) * 2 + 1, torch.randn(50, 3) - 3
    rms.update(x1); rms.update(x2)
    full = torch.cat([x1, x2]).double()
    torch.testing.assert_close(rms.mean, full.mean(0), atol=1e-3, rtol=1e-3)
    torch.testing.assert_close(rms.var, full.var(0, unbiased=False), atol=1e-3, rtol=1e-3)
    masked = RunningMeanStd((3,))
    masked.update(torch.cat([x1, torch.full((10, 3), 1e6)]), mask=torch.cat([torch.ones(100), torch.zeros(10)]).bool())
    torch.testing.assert_close(masked.mean, x1.double().mean(0), atol=1e-3, rtol=1e-3)
    assert "mean" in rms.state_dict() and "count" in rms.state_dict()


def test_tracker_skips_partial_first_episodes():
    tr = EpisodeTracker(2, torch.device("cpu"), window=10)
    tr.skip_current_episodes()
    r = torch.ones(4, 2)
    done = torch.tensor([[True, False], [False, False], [True, False], [False, True]])
    tr.update_batch(r, done)
    # env0: first end (partial) skipped, second (len 2) recorded; env1: first end skipped
    assert int(tr.filled) == 1 and float(tr.summary()["episode_return_mean"]) == 2.0
    tr.update(torch.ones(2), torch.tensor([False, True]))
    assert int(tr.filled) == 2  # env1's second episode (len 1) recorded


def test_pooled_statistics_equal_one_normaliser_that_saw_all_the_data():
    # two data-parallel learners' statistics, pooled by an all-reduce (a sum, here by hand)
    g = torch.Generator().manual_seed(0)
    x1, x2 = torch.randn(50, 3, generator=g) * 2 + 1, torch.randn(30, 3, generator=g) - 4
    a, b, ref = (RunningMeanStd((3,), epsilon=0.0) for _ in range(3))
    a.update(x1); b.update(x2); ref.update(torch.cat([x1, x2]))
    sent = {}
    b.pool(lambda t: sent.setdefault("b", t.clone()))   # a sum over b alone leaves b as it was
    a.pool(lambda t: t.add_(sent["b"]))                 # a's sums + b's
    torch.testing.assert_close(a.mean, ref.mean)
    torch.testing.assert_close(a.var, ref.var)
    assert float(a.count) == 80.0


def test_a_stacked_normaliser_is_k_plain_normalisers_bit_for_bit():
    """``members=K``: member k's statistics, normalisation and denormalisation are those
    of a plain normaliser fed member k's samples (masks included), to the last bit."""
    g = torch.Generator().manual_seed(1)
    K = 3
    stacked = RunningMeanStd((2,), members=K)
    plain = [RunningMeanStd((2,)) for _ in range(K)]
    for scale in (1.0, 5.0):
        x = torch.randn(K, 4, 6, 2, generator=g) * scale + torch.arange(K).view(K, 1, 1, 1)
        mask = torch.rand(K, 4, 6, generator=g) > 0.3
        stacked.update(x, mask=mask)
        for k in range(K):
            plain[k].update(x[k], mask=mask[k])
    for k in range(K):
        assert torch.equal(stacked.mean[k], plain[k].mean) and torch.equal(stacked.var[k], plain[k].var)
        assert torch.equal(stacked.count[k], plain[k].count)
    y = torch.randn(K, 7, 2, generator=g) * 20
    for k in range(K):
        assert torch.equal(stacked.normalize(y)[k], plain[k].normalize(y[k]))
        assert torch.equal(stacked.denormalize(y)[k], plain[k].denormalize(y[k]))
    # a scalar (value) normaliser per member: count [K], mean [K]
    values = RunningMeanStd((), members=K)
    values.update(torch.randn(K, 10, generator=g))
    assert values.mean.shape == (K,) and values.count.shape == (K,)
    assert torch.equal(values.count, torch.full((K,), 10 + 1e-4, dtype=torch.float64))
