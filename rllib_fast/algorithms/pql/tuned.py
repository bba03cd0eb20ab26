"""Settings for small built-in tasks on a 2-core CPU (used by tests and benchmarks).

The paper's defaults target 4096 GPU envs and [512, 256, 128] networks; on a
CPU the update cost dominates, so Pendulum uses 64 envs, [64, 64] ELU
networks, lr 1e-3 (AdamW, both nets) and the paper's ratios (β_a:v = 1:8,
β_p:v = 1:2), n = 3, τ = 0.05 and mixed noise in [0.05, 0.8] unchanged.
Seed 0 reaches a greedy evaluation return of -250 after ~25-35k env steps
(~4-5k critic updates) with PQL and DDPGN.

HalfCheetah-v5 (through the gymnasium bridge, CPU MuJoCo) uses 16 envs,
[256, 256] ELU networks and 256-transition batches: the paper's 4096-env
sizes would spend minutes per update on two cores, so the networks and batch
are the usual off-policy MuJoCo sizes. Everything else (AdamW 5e-4, grad-norm
0.5, n = 3, tau = 0.05, the ratios, mixed noise) stays the paper's.
"""
PENDULUM = dict(num_envs=64, hidden_sizes=[64, 64], lr=1e-3, steps_per_iteration=50)
HALFCHEETAH = dict(num_envs=16, hidden_sizes=[256, 256], batch_size=256, lr=5e-4, steps_per_iteration=50)
