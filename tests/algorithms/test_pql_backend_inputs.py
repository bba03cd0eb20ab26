"""PQL's back-ends are built from explicit parts (config, dims, Actor role,
ratio controller, live hyperparameters, sizes, device) and hold no reference
to the algorithm object."""
from __future__ import annotations

import ast
import pathlib
import time

import numpy as np
import torch

from rllib_fast.algorithms.pql import PQLConfig
from rllib_fast.algorithms.pql.components import ActorRole, Dims, LiveParams
from rllib_fast.algorithms.pql.ratio import RatioController
from rllib_fast.algorithms.pql.thread_backend import ThreadBackend

PQL_DIR = pathlib.Path(__file__).resolve().parents[2] / "rllib_fast" / "algorithms" / "pql"
BACKEND_MODULES = ("backend.py", "thread_backend.py", "process_backend.py", "ray_backend.py", "components.py")


def test_backend_modules_read_no_algorithm_attribute():
    """No ``algo``/``algorithm`` name, parameter or attribute in the back-end modules."""
    for name in BACKEND_MODULES:
        tree = ast.parse((PQL_DIR / name).read_text())
        found = [(node.lineno, ast.unparse(node)) for node in ast.walk(tree)
                 if (isinstance(node, ast.Name) and node.id in ("algo", "algorithm"))
                 or (isinstance(node, ast.arg) and node.arg in ("algo", "algorithm"))
                 or (isinstance(node, ast.Attribute) and node.attr in ("algo", "algorithm"))]
        assert not found, f"{name} reaches the algorithm object: {found}"


def test_thread_backend_builds_and_trains_without_an_algorithm():
    """The thread back-end, built from its parts alone, runs both learners on pushed
    transitions and brings the P-learner's policy back into the Actor."""
    N = 4
    cfg = (PQLConfig().environment("Pendulum", num_envs=N)
           .training(backend="thread", hidden_sizes=[16], critic_hidden_sizes=[16], batch_size=8,
                     learning_starts=8, weight_sync_every=1).debugging(seed=0))
    dims = Dims(obs_dim=3, act_dim=1)
    device = torch.device("cpu")
    actor = ActorRole(cfg, dims, N, device, np.array([-2.0]), np.array([2.0]), seed=0)
    live = LiveParams.from_config(cfg)
    controller = RatioController(("actor", "critic", "policy"), [("actor", "critic", 1.0 / cfg.beta_av),
                                                                 ("policy", "critic", 1.0 / cfg.beta_pv)])
    before = [t.clone() for t in actor.policy.state_dict().values()]
    backend = ThreadBackend(cfg, dims, actor, controller, live, num_envs=N, capacity=64, device=device)
    try:
        assert backend.replay_bytes > 0
        g = torch.Generator().manual_seed(0)
        batch = {"obs": torch.randn(N, 3, generator=g), "action": torch.rand(N, 1, generator=g) * 2 - 1,
                 "reward": torch.randn(N, generator=g), "next_obs": torch.randn(N, 3, generator=g),
                 "discount": torch.full((N,), 0.9), "valid": torch.ones(N, dtype=torch.bool)}
        backend.resume()
        for _ in range(4):
            backend.push(batch, None)
        for _ in range(500):   # the Actor's ticks let the learners run under the speed ratios
            if backend.v.updates and backend.p.updates:
                break
            controller.tick("actor")
            time.sleep(0.01)
        backend.pause()
        assert backend.v.updates > 0 and backend.p.updates > 0
        after = list(actor.policy.state_dict().values())
        assert any(not torch.equal(a, b) for a, b in zip(before, after))   # the Actor adopted P's policy
    finally:
        backend.close()
