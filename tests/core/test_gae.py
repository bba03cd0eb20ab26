"""GAE against a hand-computed example with a termination and a truncation."""
import torch

from rllib_fast.core.rollout import RolloutStorage, compute_gae


def test_gae_matches_hand_computation_with_termination_and_truncation():
    # One env, 4 steps. Step 1 terminates (no bootstrap), step 3 is truncated
    # (bootstrap from V(final_obs) = 10), step 0 and 2 continue.
    g, lam = 0.9, 0.5
    r = torch.tensor([[1.0], [2.0], [3.0], [4.0]])
    v = torch.tensor([[0.5], [1.5], [2.5], [3.5]])
    # next values: V(final_obs_t). For non-ended steps final_obs == obs_{t+1}.
    nv = torch.tensor([[1.5], [99.0], [3.5], [10.0]])  # 99 must be ignored (terminated)
    term = torch.tensor([[False], [True], [False], [False]])
    done = torch.tensor([[False], [True], [False], [True]])
    adv, ret = compute_gae(r, v, nv, term, done, g, lam)
    d3 = 4.0 + g * 10.0 - 3.5          # truncated: bootstrap, but cut the recursion
    d2 = 3.0 + g * 3.5 - 2.5
    d1 = 2.0 - 1.5                      # terminated: no bootstrap
    d0 = 1.0 + g * 1.5 - 0.5
    a3 = d3
    a2 = d2 + g * lam * a3
    a1 = d1                             # episode ended at 1: does not see step 2
    a0 = d0 + g * lam * a1
    expected = torch.tensor([[a0], [a1], [a2], [a3]])
    torch.testing.assert_close(adv, expected)
    torch.testing.assert_close(ret, expected + v)


def test_gae_invalid_transition_is_zero_and_does_not_leak():
    # NEXT_STEP-style source: step 1 ends an episode, step 2 straddles the reset (invalid).
    g, lam = 0.99, 0.95
    r = torch.tensor([[1.0], [1.0], [50.0], [1.0]])
    v = torch.zeros(4, 1)
    nv = torch.ones(4, 1)
    term = torch.tensor([[False], [True], [False], [False]])
    done = term.clone()
    valid = torch.tensor([[True], [True], [False], [True]])
    adv, _ = compute_gae(r, v, nv, term, done, g, lam, valid)
    assert adv[2, 0] == 0.0
    torch.testing.assert_close(adv[1, 0], torch.tensor(1.0))  # no bootstrap, no leak of the 50
    assert abs(float(adv[0, 0]) - (1.0 + g * 1.0 + g * lam * 1.0)) < 1e-5
    assert abs(float(adv[3, 0]) - (1.0 + g * 1.0)) < 1e-5


def test_gae_batched_envs_are_independent():
    torch.manual_seed(0)
    T, N = 6, 3
    r, v, nv = torch.randn(T, N), torch.randn(T, N), torch.randn(T, N)
    term = torch.rand(T, N) < 0.2
    done = term | (torch.rand(T, N) < 0.2)
    adv, _ = compute_gae(r, v, nv, term, done, 0.99, 0.9)
    for i in range(N):
        a_i, _ = compute_gae(r[:, i:i + 1], v[:, i:i + 1], nv[:, i:i + 1], term[:, i:i + 1],
                             done[:, i:i + 1], 0.99, 0.9)
        torch.testing.assert_close(adv[:, i:i + 1], a_i)


def test_rollout_storage_preallocated_and_flat_views():
    st = RolloutStorage(3, 2, {"obs": ((4,), torch.float32), "a": ((), torch.int64)}, torch.device("cpu"))
    ptr = st["obs"].data_ptr()
    for t in range(3):
        st.insert(t, obs=torch.full((2, 4), float(t)), a=torch.tensor([t, t]))
    assert st["obs"].data_ptr() == ptr  # written in place, never reallocated
    assert st.flat("obs").shape == (6, 4) and st.flat("a").tolist() == [0, 0, 1, 1, 2, 2]
