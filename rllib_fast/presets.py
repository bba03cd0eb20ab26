"""Settings that work well on particular tasks: the one home of presets.

Every algorithm's *default* config is meant to learn on the built-in tasks of
its kind (``docs/defaults.md``). A preset exists only
where a task needs something the defaults do not give, and says why. Tests,
benchmarks, the demo and the shipped experiment files (``tune_configs/``, a
test checks they agree) all read them from here::

    from rllib_fast.presets import preset
    config = RainbowConfig().environment("CartPole").training(**preset("Rainbow", "CartPole"))
"""
from __future__ import annotations

import copy
from typing import Any, Dict

# PQL's defaults are the paper's: 4,096 GPU envs and [512, 256, 128] networks.
# On a CPU the update cost dominates, so small tasks use 64 envs, [64, 64] ELU
# networks and lr 1e-3 (AdamW, both nets), everything else (beta_a:v = 1:8,
# beta_p:v = 1:2, n = 3, tau = 0.05, mixed noise in [0.05, 0.8]) unchanged.
_PQL_PENDULUM = dict(num_envs=64, hidden_sizes=[64, 64], lr=1e-3, steps_per_iteration=50)
# HalfCheetah-v5 (gymnasium bridge, CPU MuJoCo): the usual off-policy MuJoCo
# sizes instead of the paper's 4,096-env ones (far too slow per update on a small CPU);
# AdamW 5e-4, grad-norm 0.5, n = 3, tau = 0.05, the ratios and noise stay the paper's.
_PQL_HALFCHEETAH = dict(num_envs=16, hidden_sizes=[256, 256], batch_size=256, lr=5e-4, steps_per_iteration=50)

PRESETS: Dict[str, Dict[str, Dict[str, Any]]] = {
    # Rainbow on CartPole: a C51 support of [0, 100] (CartPole's discounted return is
    # at most 100) instead of the defaults' [-100, 100], which also covers negative
    # returns: twice the atom resolution where the returns are. FastDQN needs no
    # preset: its defaults learn CartPole and Acrobot.
    "Rainbow": {"CartPole": dict(v_min=0.0, v_max=100.0)},
    "PQL": {"Pendulum": _PQL_PENDULUM, "gym:HalfCheetah-v5": _PQL_HALFCHEETAH},
    "DDPGN": {"Pendulum": _PQL_PENDULUM, "gym:HalfCheetah-v5": _PQL_HALFCHEETAH},
    "SACN": {"Pendulum": _PQL_PENDULUM, "gym:HalfCheetah-v5": _PQL_HALFCHEETAH},
}


def preset(algo: str, env: str) -> Dict[str, Any]:
    """A copy of the preset settings for ``algo`` on ``env`` (training keys).

    Raises ``KeyError`` with one line naming the presets that exist; where
    there is none, the algorithm's defaults are the recommended settings.
    """
    try:
        return copy.deepcopy(PRESETS[algo][env])
    except KeyError:
        known = ", ".join(f"{a}/{e}" for a, envs in PRESETS.items() for e in envs)
        raise KeyError(f"no preset for {algo} on {env!r} (its defaults are the recommended settings); "
                       f"presets: {known}") from None
