"""TensorLink: point-to-point tensors over a private gloo group (the CPU
stand-in for NCCL), between threads of one process here: layouts round-trip
dtypes (bool included) and shapes, messages arrive in order, sends keep
their tensors alive, and a second group in the same process does not clash."""
import threading

import torch

from rllib_fast.core.distributed import free_port
from rllib_fast.algorithms.pql.tensor_link import TensorLink


def _pair(world=2):
    address = f"127.0.0.1:{free_port()}"
    links = [None] * world

    def make(rank):
        links[rank] = TensorLink(rank, world, address, torch.device("cpu"), timeout_s=30)

    threads = [threading.Thread(target=make, args=(r,)) for r in range(world)]
    [t.start() for t in threads]
    [t.join(30) for t in threads]
    assert all(link is not None for link in links)
    return links


def test_round_trip_keeps_shapes_dtypes_and_order():
    a, b = _pair()
    sent = [torch.randn(64, 3), torch.tensor([True, False, True]), torch.arange(5), torch.tensor(2.5)]
    layout = a.send(sent, dst=1)
    layout2 = a.send([torch.full((2, 2), 7.0)], dst=1)   # a second message queued behind the first
    got = b.recv(layout, src=0)
    got2 = b.recv(layout2, src=0)
    assert [g.dtype for g in got] == [torch.float32, torch.bool, torch.int64, torch.float32]
    for g, s in zip(got, sent):
        assert torch.equal(g, s)
    assert torch.equal(got2[0], torch.full((2, 2), 7.0))
    assert a.backend == "gloo" and a.bytes_sent == b.bytes_received > 0
    # and back the other way
    back = b.send([got[0] * 2], dst=0)
    assert torch.equal(a.recv(back, src=1)[0], sent[0] * 2)
    a.close(), b.close()


def test_sends_keep_their_tensors_alive_until_received():
    a, b = _pair()
    layout = a.send([torch.ones(1000) * 3], dst=1)   # the caller keeps no reference
    import gc

    gc.collect()
    assert a.in_flight == 1
    assert torch.equal(b.recv(layout, src=0)[0], torch.ones(1000) * 3)
    a.settle(dst=1)
    assert a.in_flight == 0


def test_two_groups_in_one_process_are_independent():
    a1, b1 = _pair()
    a2, b2 = _pair()
    l1, l2 = a1.send([torch.zeros(3)], 1), a2.send([torch.ones(3)], 1)
    assert torch.equal(b2.recv(l2, 0)[0], torch.ones(3))
    assert torch.equal(b1.recv(l1, 0)[0], torch.zeros(3))
