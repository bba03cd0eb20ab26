"""Multi-step Adam (Stooke & Abbeel App. A) and the chunk-locked store."""
import threading

import torch

from rllib_fast.algorithms.appo.async_adam import ChunkedParameterStore, MultiStepAdam


def test_one_learner_multistep_adam_equals_serial_adam():
    torch.manual_seed(0)
    p0 = torch.randn(37, dtype=torch.float64)
    grads = [torch.randn(37, dtype=torch.float64) for _ in range(12)]
    # reference: torch's Adam, serial
    ref = p0.clone().requires_grad_(True)
    opt = torch.optim.Adam([ref], lr=1e-2, betas=(0.9, 0.999), eps=1e-8)
    for g in grads:
        ref.grad = g.clone()
        opt.step()
    store = ChunkedParameterStore([p0], num_chunks=3, dtype=torch.float64)
    learner = MultiStepAdam(store, lr=1e-2)
    for i, g in enumerate(grads):
        learner.local_step(g)
        if i % 4 == 3:  # n = 4 local steps between syncs
            learner.sync()
    state = opt.state[ref]
    torch.testing.assert_close(store.theta, ref.detach(), rtol=0, atol=1e-12)
    torch.testing.assert_close(store.m, state["exp_avg"], rtol=0, atol=1e-12)
    torch.testing.assert_close(store.v, state["exp_avg_sq"], rtol=0, atol=1e-12)
    assert store.step == 12


def test_chunked_store_loses_no_update_under_concurrent_writers():
    store = ChunkedParameterStore([torch.zeros(1000)], num_chunks=4)
    writers, per_writer = 4, 200

    def work(k):
        delta = torch.full((1000,), float(k + 1))

        def add(lo, hi):  # read-modify-write under the chunk lock
            store.theta[lo:hi] = store.theta[lo:hi] + delta[lo:hi]

        for _ in range(per_writer):
            store.apply(add)

    threads = [threading.Thread(target=work, args=(k,)) for k in range(writers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    expected = per_writer * sum(range(1, writers + 1))
    assert bool((store.theta == expected).all())


def test_two_learners_write_back_without_clobbering_each_other():
    store = ChunkedParameterStore([torch.zeros(10, dtype=torch.float64)], num_chunks=2, dtype=torch.float64)
    a, b = MultiStepAdam(store, lr=0.1), MultiStepAdam(store, lr=0.1)
    a.local_step(torch.ones(10, dtype=torch.float64))
    b.local_step(-torch.ones(10, dtype=torch.float64))
    a.sync(); b.sync()
    # both learners' steps are in the central parameters (overwrite of theta~ - acc_s, not a stale copy)
    torch.testing.assert_close(store.theta, torch.zeros(10, dtype=torch.float64), rtol=0, atol=1e-12)
    assert store.step == 2
