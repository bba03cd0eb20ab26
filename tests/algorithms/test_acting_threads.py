"""``acting_threads``: a rollout on a source that steps on its own worker threads
(envpool) acts with one torch thread, and the update gets torch's threads back."""
import pytest
import torch

from rllib_fast.algorithms.a2c import FastA2CConfig
from rllib_fast.algorithms.ppo import FastPPOConfig
from rllib_fast.core.threads import torch_threads


def threads_seen(algo):
    """torch's thread count at every env step of one iteration, and in the update."""
    seen = {"act": set(), "learn": set()}
    step = algo.env.step
    algo.env.step = lambda a: (seen["act"].add(torch.get_num_threads()), step(a))[1]
    learn = algo.update_rule.learn
    algo.update_rule.learn = lambda b: (seen["learn"].add(torch.get_num_threads()), learn(b))[1]
    algo.train()
    algo.stop()
    return seen


@pytest.fixture
def two_threads():
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    yield
    torch.set_num_threads(before)


def envpool_ppo(**kw):
    pytest.importorskip("envpool")
    return (FastPPOConfig().environment("envpool:Ant-v4", num_envs=4, env_config={"num_threads": 2})
            .training(rollout_length=4, num_minibatches=2, num_epochs=1, decorrelate_steps=0, **kw)
            .debugging(seed=0))


def test_auto_acts_with_one_thread_on_envpool_and_learns_with_all(two_threads):
    algo = envpool_ppo().build_algo()
    assert algo.acting_threads == 1
    assert threads_seen(algo) == {"act": {1}, "learn": {2}}
    assert torch.get_num_threads() == 2


def test_auto_leaves_a_torch_source_alone(two_threads):
    algo = FastA2CConfig().environment("Pendulum", num_envs=4).training(rollout_length=4).build_algo()
    assert algo.acting_threads is None
    assert threads_seen(algo) == {"act": {2}, "learn": {2}}


def test_explicit_counts_and_none(two_threads):
    algo = envpool_ppo(acting_threads=None).build_algo()
    assert algo.acting_threads is None
    algo.stop()
    algo = FastA2CConfig().environment("Pendulum", num_envs=4).training(rollout_length=4,
                                                                         acting_threads=1).build_algo()
    assert threads_seen(algo) == {"act": {1}, "learn": {2}}


def test_learning_while_stepping_keeps_the_threads(two_threads):
    """The overlapped update takes its minibatch steps inside the rollout."""
    algo = envpool_ppo(learn_while_stepping=True).build_algo()
    assert algo.acting_threads is None
    algo.stop()
    assert torch.get_num_threads() == 2   # the simulator process's core reservation released


@pytest.mark.parametrize("bad", [0, -1, "one", 1.5, True])
def test_bad_values_name_the_key_and_the_allowed_ones(bad):
    with pytest.raises(ValueError, match=r"acting_threads.*'auto', an int >= 1 or None"):
        FastPPOConfig().environment("Pendulum").training(acting_threads=bad).validate()


def test_torch_threads_restores_on_error(two_threads):
    with pytest.raises(RuntimeError):
        with torch_threads(1):
            assert torch.get_num_threads() == 1
            raise RuntimeError("boom")
    assert torch.get_num_threads() == 2
    with torch_threads(None):
        assert torch.get_num_threads() == 2


def test_hts_rejects_a_setting_it_would_not_apply():
    from rllib_fast.algorithms.hts import HTSPPOConfig
    with pytest.raises(ValueError, match=r"acting_threads.*not applied by HTS-RL.*allowed: 'auto'"):
        HTSPPOConfig().environment("Pendulum").training(acting_threads=1).validate()
    algo = HTSPPOConfig().environment("Pendulum", num_envs=4).build_algo()
    assert algo.acting_threads is None
    algo.stop()
