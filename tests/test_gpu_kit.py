"""The GPU kit: what a session with a lent CUDA machine runs (``benchmarks/gpu.py``,
``benchmarks/gpu_bundle.sh``) must work before it ever meets a GPU, because
device time is scarce and the machine has no package registry.

* importing rllib_fast and training FastPPO pulls in neither MLflow nor Optuna
  (the offline bundle carries only Ray, gymnasium and their dependencies);
* the bundle's packing into parts of at most PART_MIB and the reassembly on the
  other side give back every file bit for bit, and a missing part is named;
"""
import hashlib
import json
import os
import random
import shutil
import subprocess
import sys

import pytest

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


BUNDLE = os.path.join(REPO, "benchmarks", "gpu_bundle.sh")
needs_tools = pytest.mark.skipif(not all(shutil.which(t) for t in ("bash", "split", "sha256sum")),
                                 reason="needs bash, split and sha256sum")


def _stage(tmp_path, part_mib=1):
    src = tmp_path / "wheels"
    src.mkdir()
    rng = random.Random(0)
    sizes = {"big-1.0-py3-none-any.whl": 3 * 2**20 + 12345, "mid-1.0-py3-none-any.whl": 600_000,
             "exact-1.0-py3-none-any.whl": 768 * 1024, "a-1.0-py3-none-any.whl": 1000,
             "b-1.0-py3-none-any.whl": 300_000, "empty-1.0-py3-none-any.whl": 0}
    for name, n in sizes.items():
        (src / name).write_bytes(rng.randbytes(n))
    out = tmp_path / "bundle"
    r = subprocess.run(["bash", BUNDLE, "stage", str(src), str(out)], capture_output=True, text=True,
                       env={**os.environ, "PART_MIB": str(part_mib)}, timeout=120)
    assert r.returncode == 0, r.stderr
    return src, out


def _digests(folder):
    return {p: hashlib.sha256((folder / p).read_bytes()).hexdigest() for p in os.listdir(folder)
            if p.endswith(".whl")}


@needs_tools
def test_bundle_parts_stay_under_the_limit_and_reassemble_bit_exact(tmp_path):
    src, out = _stage(tmp_path, part_mib=1)
    parts = sorted(p for p in out.iterdir() if p.name.startswith("part-"))
    assert len(parts) >= 5                     # 4.6 MiB of files in parts of 1 MiB
    for part in parts:
        assert sum(f.stat().st_size for f in part.iterdir()) <= 2**20
        assert (part / "install.sh").exists() and (part / "SHA256SUMS").exists()
    assert any(".chunk-" in f.name for part in parts for f in part.iterdir())   # the big file was cut
    dest = tmp_path / "device"
    dest.mkdir()
    for part in parts:                         # what one device call per part does
        for f in part.iterdir():
            shutil.copy(f, dest / f.name)
    r = subprocess.run(["bash", str(dest / "install.sh"), "--reassemble-only"], capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    assert _digests(dest) == _digests(src)
    assert not [f for f in os.listdir(dest) if ".chunk-" in f]


@needs_tools
def test_bundle_reassembly_names_what_a_missing_part_held(tmp_path):
    src, out = _stage(tmp_path, part_mib=1)
    parts = sorted(p for p in out.iterdir() if p.name.startswith("part-"))
    dest = tmp_path / "device"
    dest.mkdir()
    lost = next(p for p in parts if any(f.name.startswith("big-") for f in p.iterdir()))
    for part in parts:
        if part == lost:                       # a part holding a piece of the big wheel never arrived
            continue
        for f in part.iterdir():
            shutil.copy(f, dest / f.name)
    r = subprocess.run(["bash", str(dest / "install.sh"), "--reassemble-only"], capture_output=True, text=True,
                       timeout=120)
    assert r.returncode != 0
    assert "big-1.0-py3-none-any.whl" in r.stdout + r.stderr
