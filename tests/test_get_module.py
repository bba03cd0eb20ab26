"""``algo.get_module()`` of every registered algorithm is an RLlib RLModule whose
``forward_inference({"obs": ...})`` acts as the algorithm does greedily
(observation normalisation and action scaling included), and the module a
checkpoint holds at RLlib's conventional sub-path loads with
``RLModule.from_checkpoint`` and acts the same.

Tiny configs from the resume test's helper; algorithms whose components are Ray
actors share one small local Ray session.
"""
import pytest
import ray
import torch
from ray.rllib.core.columns import Columns
from ray.rllib.core.rl_module.rl_module import RLModule

from rllib_fast.algorithms import ALGORITHMS
from rllib_fast.export import MODULE_PATH
from tests._resume_worker import build_tiny


@pytest.fixture(scope="module")
def local_ray():
    started = not ray.is_initialized()
    if started:
        ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield
    if started:
        ray.shutdown()


def _observations(algo, n=64):
    # wide spread: exercises the normaliser's clip and the action clipping
    g = torch.Generator().manual_seed(0)
    return (torch.randn(n, *algo.env.obs_shape, generator=g) * 5).to(algo.device)


def _same_actions(actual, expected, discrete):
    assert actual.shape == expected.shape, (actual.shape, expected.shape)
    if discrete:
        assert torch.equal(actual.long(), expected.long())
    else:
        torch.testing.assert_close(actual.float(), expected.float(), atol=1e-5, rtol=0)


@pytest.mark.parametrize("name", list(ALGORITHMS))
def test_forward_inference_is_the_greedy_action(name, local_ray, tmp_path):
    algo, _ = build_tiny(name)
    try:
        algo.train()
        if hasattr(algo.config, "evaluation_epsilon"):
            assert algo.config.evaluation_epsilon == 0.0  # compute_actions(explore=False) is then greedy
        module = algo.get_module()
        assert isinstance(module, RLModule)
        obs = _observations(algo)
        with torch.no_grad():
            out = module.forward_inference({Columns.OBS: obs})
            expected = algo.compute_actions(obs, explore=False)
        _same_actions(out[Columns.ACTIONS], expected, algo.env.is_discrete)
        assert Columns.ACTION_DIST_INPUTS in out
        # the checkpoint's module, rebuilt by RLlib from RLlib's conventional sub-path
        path = algo.save_to_path(str(tmp_path / "ckpt"))
        restored = RLModule.from_checkpoint(f"{path}/{MODULE_PATH}")
        assert type(restored) is type(module)
        with torch.no_grad():
            again = restored.forward_inference({Columns.OBS: obs.cpu()})[Columns.ACTIONS]
        _same_actions(again, expected.cpu(), algo.env.is_discrete)
    finally:
        algo.stop()


@pytest.mark.parametrize("name", ["PopTD3", "PopSAC", "PopDQN", "CEMRL"])
def test_population_member_argument(name):
    algo, _ = build_tiny(name)
    try:
        algo.train()
        obs = _observations(algo)
        stacked = obs.unsqueeze(0).expand(algo.K, *obs.shape)
        with torch.no_grad():
            every = algo.policy_actions(stacked, False)
            for k in range(algo.K):
                module = algo.get_module(member=k)
                assert module.member == k
                _same_actions(module.forward_inference({Columns.OBS: obs})[Columns.ACTIONS], every[k],
                              algo.env.is_discrete)
                one = module.select()   # one-member copy: same actions, own weights
                assert one.members == 1
                _same_actions(one.forward_inference({Columns.OBS: obs})[Columns.ACTIONS], every[k],
                              algo.env.is_discrete)
        with pytest.raises(ValueError) as err:
            algo.get_module(member=algo.K)
        assert "\n" not in str(err.value) and f"0..{algo.K - 1}" in str(err.value)
    finally:
        algo.stop()


def test_module_follows_training():
    """The module shares the live networks: after more training it still acts as the algorithm."""
    algo, _ = build_tiny("FastDQN")
    try:
        module = algo.get_module()
        before = [p.detach().clone() for p in module.parameters()]
        algo.train()
        algo.train()
        assert algo.get_module() is module
        assert any(not torch.equal(a, p) for a, p in zip(before, module.parameters()))
        obs = _observations(algo)
        with torch.no_grad():
            _same_actions(module.forward_inference({Columns.OBS: obs})[Columns.ACTIONS],
                          algo.compute_actions(obs, explore=False), True)
    finally:
        algo.stop()
