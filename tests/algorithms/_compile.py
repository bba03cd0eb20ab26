"""Helpers of the ``compile`` tests (``test_compile.py``, ``test_compile_pql.py``)."""
import torch


def params(module):
    """All parameters of ``module`` as one flat tensor."""
    return torch.cat([p.detach().flatten() for p in module.parameters()])


def losses(algo, iters, key):
    """The learner's ``key`` after each of ``iters`` training iterations."""
    return [algo.train()["learners"]["default_policy"][key] for _ in range(iters)]
