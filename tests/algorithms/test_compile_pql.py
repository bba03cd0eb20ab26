"""``compile`` in the PQL family (SACN, DDPGN, PQL): the actor's act step and the V-/P-learners'
losses under torch.compile with the ``aot_eager`` backend (why that backend: see
``test_compile.py``) -- no graph breaks, the eager numbers, checkpoints that move between
compiled and eager runs, and PQL's concurrent learner threads."""
import pytest
import torch

from rllib_fast.algorithms.pql import DDPGNConfig, PQLConfig, SACNConfig
from rllib_fast.core.compile import graph_breaks
from tests.algorithms._compile import losses, params


def pql(cls=SACNConfig, compile=False, **kw):
    base = dict(hidden_sizes=[16], batch_size=32, steps_per_iteration=10, warmup_steps=2, compile=compile)
    base.update(kw)
    return cls().environment("Pendulum", num_envs=8).training(**base).debugging(seed=0)


def pql_state(algo):
    return torch.cat([params(algo.v.critic), params(algo.p.policy)])


PQL_FAMILY = [(SACNConfig, {}), (DDPGNConfig, {}),
              (DDPGNConfig, dict(distributional=True, noise_type="fixed", noise_std=0.3, noise_decay="linear"))]


@pytest.mark.parametrize("cls,kw", PQL_FAMILY)
def test_pql_family_hot_path_has_no_graph_breaks(aot_eager, cls, kw):
    algo = pql(cls, compile=True, **kw).build_algo()
    algo.train()
    actor, v, p = algo.actor, algo.v, algo.p
    obs = algo.obs.reshape(algo.obs.shape[0], -1)
    sigma = None if getattr(actor.policy, "stochastic", False) else actor.sigma()
    assert graph_breaks(actor._policy_act, obs, actor.moments(), sigma, True) == 0
    assert graph_breaks(v.loss, v.replay.sample(v.batch_size), v.moments_fn()) == 0
    for q in p.critic.parameters():   # as PolicyLearner.update calls it: critic frozen
        q.requires_grad_(False)
    assert graph_breaks(p.loss, p.replay.sample(p.batch_size, keys=("obs", "valid")), p.moments_fn()) == 0
    algo.stop()


@pytest.mark.parametrize("cls,kw", PQL_FAMILY)
def test_pql_family_compiled_matches_eager(aot_eager, cls, kw):
    eager = pql(cls, **kw).build_algo()
    ref = losses(eager, 2, "critic_loss")
    comp = pql(cls, compile="max-autotune", **kw).build_algo()
    assert comp.v._loss_fn is not comp.v.loss and comp.actor._act_fn is not comp.actor._policy_act
    got = losses(comp, 2, "critic_loss")
    torch.testing.assert_close(torch.tensor(got), torch.tensor(ref), rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(pql_state(comp), pql_state(eager), rtol=1e-4, atol=1e-5)
    eager.stop(); comp.stop()


@pytest.mark.parametrize("first,second", [(True, False), (False, True)])
def test_sacn_checkpoints_move_between_compiled_and_eager(aot_eager, tmp_path, first, second):
    algo = pql(compile=first, checkpoint_replay=True).build_algo()
    algo.train(); algo.train()
    algo.save_to_path(str(tmp_path))
    algo.train()
    other = pql(compile=second, checkpoint_replay=True).build_algo()
    other.restore_from_path(str(tmp_path))
    other.train()
    torch.testing.assert_close(pql_state(other), pql_state(algo), rtol=1e-5, atol=1e-6)
    algo.stop(); other.stop()


def test_pql_thread_backend_runs_compiled(aot_eager):
    """Concurrent V-/P-learner threads each call their own compiled loss."""
    algo = pql(PQLConfig, compile=True, backend="thread").build_algo()
    for _ in range(2):
        r = algo.train()["learners"]["default_policy"]
    assert r["num_critic_updates"] > 0 and torch.isfinite(torch.tensor(r["critic_loss"]))
    algo.stop()
