"""Processes an algorithm starts leave their cores out of the starter's torch threads."""
import torch

from rllib_fast.core.threads import reserve_cores, reserved_cores, usable_cores
from rllib_fast.envs.parallel import ParallelVecEnv


def test_reservations_shrink_and_restore_torch_threads():
    before = torch.get_num_threads()
    a = reserve_cores(1)
    try:
        assert torch.get_num_threads() == max(1, min(before, usable_cores() - 1))
        b = reserve_cores(usable_cores())          # more than the machine: one thread is left
        assert torch.get_num_threads() == 1 and reserved_cores() == 1 + usable_cores()
        b.release()
        b.release()                                  # idempotent
        assert torch.get_num_threads() == max(1, min(before, usable_cores() - 1))
    finally:
        a.release()
    assert torch.get_num_threads() == before and reserved_cores() == 0


def test_a_user_setting_below_the_budget_is_kept():
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        r = reserve_cores(0)
        assert torch.get_num_threads() == 1
        r.release()
        assert torch.get_num_threads() == 1
    finally:
        torch.set_num_threads(before)


def test_simulator_processes_hold_their_cores_until_closed():
    before = torch.get_num_threads()
    env = ParallelVecEnv.from_name("CartPole", 8, 1, context="fork", probe=False)
    try:
        assert reserved_cores() == 1
        assert torch.get_num_threads() == max(1, min(before, usable_cores() - 1))
        env.reset(seed=0)
        env.step(torch.zeros(8, dtype=torch.long))
    finally:
        env.close()
    assert reserved_cores() == 0 and torch.get_num_threads() == before
