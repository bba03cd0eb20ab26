"""Settings measured to solve the built-in CartPole on a 2-core CPU (seed 0).

FastDQN reached a 100-episode mean of 475 in ~40 s / 290k env steps; Rainbow
(C51 support [0, 100]: CartPole's discounted return is at most 100) reached
433 in 60 s / 200k env steps. Used by the tests and benchmarks.
"""
CARTPOLE_DQN = dict(num_envs=16, batch_size=128, training_intensity=4.0, lr=1e-3, target_update_period=200,
                    hidden_sizes=[128, 128], epsilon_timesteps=10_000, n_step=3)

CARTPOLE_RAINBOW = dict(num_envs=16, batch_size=128, training_intensity=4.0, lr=5e-4, tau=0.01,
                        hidden_sizes=[128, 128], n_step=3, v_min=0.0, v_max=100.0, per_beta_anneal_steps=50_000)
