"""The learning tests' loop: train until a return threshold or an iteration cap."""
import numpy as np


def best_return(cfg, threshold: float, max_iters: int) -> float:
    """Build ``cfg``, train until its ``episode_return_mean`` reaches ``threshold``
    (or ``max_iters`` iterations), and return the best value seen (NaN = none yet)."""
    algo = cfg.build_algo()
    best = -np.inf
    for _ in range(max_iters):
        ret = algo.train()["env_runners"]["episode_return_mean"]
        best = max(best, ret if ret == ret else -np.inf)
        if best >= threshold:
            break
    algo.stop()
    return best
