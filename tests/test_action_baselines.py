"""benchmarks/action_baselines.py: the return of the action-space midpoint plus noise,
on the training episodes' accounting."""
import torch

from rllib_fast.envs import registry

from tests._benchmarks import load_benchmark

_ab = load_benchmark("action_baselines.py", "_action_baselines")
main, markdown, noise_policy_returns = _ab.main, _ab.markdown, _ab.noise_policy_returns


def test_counts_whole_episodes_and_noise_changes_the_return():
    env = registry.make("Pendulum", num_envs=8, seed=0)
    gen = torch.Generator().manual_seed(0)
    still = noise_policy_returns(env, 0.0, 8, gen)
    noisy = noise_policy_returns(env, 1.0, 8, gen)
    assert still["episodes"] == 8 and still["length"] == env.max_episode_steps   # time-outs: whole episodes
    assert still["return"] < 0 and noisy["return"] != still["return"]
    table = markdown("Pendulum", 8, [still, noisy], [], "note")
    assert "| 0 |" in table and "| 1 |" in table


def test_cli_writes_the_table(tmp_path):
    out = tmp_path / "b.md"
    assert main(["Pendulum", "--num-envs", "4", "--stds", "0,0.5", "--episodes", "4", "--out", str(out)]) == 0
    assert out.read_text().count("\n| ") == 3   # header + two rows
