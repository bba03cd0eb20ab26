"""The GPU kit: what a session with a lent CUDA machine runs (``benchmarks/gpu.py``,
``benchmarks/gpu_bundle.sh``) must work before it ever meets a GPU, because
device time is scarce and the machine has no package registry.

* importing rllib_fast and training FastPPO pulls in neither MLflow nor Optuna
  (the offline bundle carries only Ray, gymnasium and their dependencies);
"""
import json
import os
import subprocess
import sys

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_import_and_one_fastppo_iteration_load_neither_mlflow_nor_optuna():
    code = (
        "import sys, rllib_fast\n"
        "import rllib_fast.cli, rllib_fast.tune.sweep, rllib_fast.tune.mlflow, rllib_fast.tune.pbt\n"
        "from rllib_fast.algorithms.ppo import FastPPOConfig\n"
        "algo = (FastPPOConfig().environment('CartPole', num_envs=8, env_device='cpu')\n"
        "        .training(rollout_length=4).debugging(seed=0).build_algo())\n"
        "r = algo.train()\n"
        "algo.stop()\n"
        "import json\n"
        "print(json.dumps({'steps': r['num_env_steps_sampled_lifetime'],\n"
        "    'loaded': sorted(m for m in sys.modules if m.split('.')[0] in ('mlflow', 'optuna'))}))\n"
    )
    env = {**os.environ, "RAY_ADDRESS": "local", "PYTHONPATH": REPO}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600, env=env,
                         cwd=REPO)
    assert out.returncode == 0, out.stderr[-3000:]
    res = json.loads(out.stdout.strip().splitlines()[-1])
    assert res["steps"] > 0
    assert res["loaded"] == []
