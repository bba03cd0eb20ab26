"""StateAdapter: the one checkpoint-state wrapper for loose tensors, numpy generators and getter/setter pairs."""
import numpy as np
import torch

from rllib_fast.core.state import StateAdapter


def test_tensor_state_is_restored_in_place():
    t = torch.arange(4.0)
    box = StateAdapter.tensor(t)
    saved = box.state_dict()
    t.mul_(10)
    assert torch.equal(saved["t"], torch.arange(4.0))          # saving copied, not aliased
    box.load_state_dict(saved)
    assert torch.equal(t, torch.arange(4.0))                   # the same tensor object holds the values again


def test_numpy_generator_state_replays_the_same_draws():
    g = np.random.default_rng(7)
    box = StateAdapter.numpy_generator(g)
    saved = box.state_dict()
    first = g.random(3)
    box.load_state_dict(saved)
    assert np.array_equal(g.random(3), first)


def test_getter_setter_pair():
    store = {"x": 1}
    box = StateAdapter(lambda: dict(store), store.update)
    saved = box.state_dict()
    store["x"] = 2
    box.load_state_dict(saved)
    assert store == {"x": 1}
