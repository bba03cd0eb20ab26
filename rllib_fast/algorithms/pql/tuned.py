"""Settings for small built-in tasks on a 2-core CPU (used by tests and benchmarks).

The paper's defaults target 4096 GPU envs and [512, 256, 128] networks; on a
CPU the update cost dominates, so Pendulum uses 64 envs, [64, 64] ELU
networks, lr 1e-3 (AdamW, both nets) and the paper's ratios (β_a:v = 1:8,
β_p:v = 1:2), n = 3, τ = 0.05 and mixed noise in [0.05, 0.8] unchanged.
Seed 0 reaches a greedy evaluation return of -250 after ~25-35k env steps
(~4-5k critic updates) with PQL and DDPGN.
"""
PENDULUM = dict(num_envs=64, hidden_sizes=[64, 64], lr=1e-3, steps_per_iteration=50)
