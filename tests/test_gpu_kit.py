"""The GPU kit: what a session with a lent CUDA machine runs (``benchmarks/gpu.py``,
``benchmarks/gpu_bundle.sh``) must work before it ever meets a GPU, because
device time is scarce and the machine has no package registry.

* importing rllib_fast and training FastPPO pulls in neither MLflow nor Optuna
  (the offline bundle carries only Ray, gymnasium and their dependencies);
* the bundle's packing into parts of at most PART_MIB and the reassembly on the
  other side give back every file bit for bit, and a missing part is named;
* ``benchmarks/gpu.py --dry-run`` lists every part, the CUDA-only tests and
  every registered algorithm, and its report/merge code handles failed,
  skipped and partial parts (the full CPU walk-through, ``--device cpu --quick
  --tiny``, takes minutes and is run by hand).
"""
import hashlib
import importlib.util
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


def _install_requests(tmp_path, wheels):
    """Run a staged bundle's install.sh with a stand-in python that records
    every pip command line (nothing installs): the requirements it resolves."""
    src = tmp_path / "wheels"
    src.mkdir(parents=True)
    for name in wheels:
        (src / name).write_bytes(b"x")
    out = tmp_path / "bundle"
    r = subprocess.run(["bash", BUNDLE, "stage", str(src), str(out)], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    dest = tmp_path / "device"
    dest.mkdir()
    for part in out.iterdir():
        for f in part.iterdir():
            shutil.copy(f, dest / f.name)
    log, fake = tmp_path / "calls.txt", tmp_path / "python"
    fake.write_text(f'#!/usr/bin/env bash\necho "$@" >> {log}\n')
    fake.chmod(0o755)
    r = subprocess.run(["bash", str(dest / "install.sh")], capture_output=True, text=True, timeout=120,
                       env={**os.environ, "PYTHON": str(fake)})
    assert r.returncode == 0, r.stdout + r.stderr
    return log.read_text().splitlines()


@needs_tools
def test_bundle_install_resolves_mjlab_only_when_its_wheel_travelled(tmp_path):
    # with bash's nullglob on, a bare `ls mjlab-*.whl` lists the folder and succeeds: the
    # install then asked pip for mjlab, failed to resolve and fell back to --no-deps
    calls = _install_requests(tmp_path / "a", ["rllib_fast-0.1.0-py3-none-any.whl", "ray-2.60.0-cp312.whl"])
    resolve = next(c for c in calls if "--find-links" in c)
    assert "ray[rllib,tune]==2.60.*" in resolve and "gymnasium" in resolve and "mjlab" not in resolve
    assert not any("--no-deps" in c and "*.whl" in c for c in calls)
    calls = _install_requests(tmp_path / "b", ["rllib_fast-0.1.0-py3-none-any.whl", "mjlab-1.6.0-py3-none-any.whl"])
    assert "mjlab" in next(c for c in calls if "--find-links" in c).split()


GPU_PY = os.path.join(REPO, "benchmarks", "gpu.py")


def _gpu_module():
    spec = importlib.util.spec_from_file_location("gpu_kit_under_test", GPU_PY)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_cuda_only_tests_are_found_and_expand_to_six_items():
    kit = _gpu_module()
    ids = kit.cuda_test_ids()
    assert ids == ["tests/algorithms/test_pql.py::test_collective_transport_refuses_a_learner_on_the_actors_gpu",
                   "tests/envs/test_classic.py::test_cuda_step_is_sync_free",
                   "tests/envs/test_gymnasium_bridge.py::test_adapter_on_cuda_matches_cpu"]
    out = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", *ids],
                         capture_output=True, text=True, cwd=REPO, timeout=600)
    items = [ln for ln in out.stdout.splitlines() if "::" in ln]
    assert len(items) == 6, out.stdout[-2000:]


def test_dry_run_lists_every_part_test_and_algorithm():
    from rllib_fast.algorithms import ALGORITHMS

    out = subprocess.run([sys.executable, GPU_PY, "--dry-run", "--quick"], capture_output=True, text=True,
                         cwd=REPO, timeout=600, env={**os.environ, "PYTHONPATH": REPO})
    assert out.returncode == 0, out.stderr[-2000:]
    text = out.stdout
    for part in ("cuda_tests", "smoke", "throughput", "learn", "pql", "population", "hts", "mjlab"):
        assert f"[{part}]" in text
    for name in ALGORITHMS:
        assert f"  {name}: " in text
    assert "test_cuda_step_is_sync_free" in text
    assert "FastPPO CartPole N=262144" in text and "single-file PPO CartPole N=4096" in text
    assert "PopTD3 K=64" in text and "PQL Pendulum N=4096" in text
    bad = subprocess.run([sys.executable, GPU_PY, "--dry-run", "--parts", "smoke,gpu"], capture_output=True,
                         text=True, cwd=REPO, timeout=600)
    assert bad.returncode == 2 and "unknown gpu; allowed: cuda_tests, smoke" in bad.stderr


def test_report_and_merge_keep_failures_and_order(tmp_path):
    kit = _gpu_module()
    meta = dict(date="d", python="3.12", cpu_count=16, device="cuda", device_name="NVIDIA H100", torch="2.11",
                cuda="13.0", ray="2.60.0", gymnasium="1.2.2", git_commit="abc")
    smoke_rows = [dict(algorithm="FastPPO", env="CartPole", device="cuda:0", status="ok", seconds=3.0),
                  dict(algorithm="PQL", status="error", error="RuntimeError: boom", seconds=1.0)]
    first = dict(mode="quick", meta=meta, wall_s=60.0, parts={
        "smoke": dict(status="failed", error=kit.problems("smoke", {"rows": smoke_rows}), seconds=4.0,
                      data={"rows": smoke_rows}),
        "hts": dict(status="error", error="TimeoutError: hts: time cap 30s reached", seconds=30.0)})
    second = dict(mode="full", meta=meta, wall_s=120.0, parts={
        "cuda_tests": dict(status="ok", seconds=9.0, data={"cases": [
            dict(test="tests.envs.test_classic::test_cuda_step_is_sync_free[CartPole]", outcome="passed",
                 message="", seconds=1.0)]}),
        "mjlab": dict(status="skipped", error="mjlab is not installed", seconds=0.0,
                      data={"skipped": "mjlab is not installed"})})
    assert kit.problems("smoke", {"rows": smoke_rows}) == "not ok: PQL"
    assert kit.problems("cuda_tests", {"cases": [], "returncode": 4}) == "no test ran (pytest exit 4)"
    assert kit.problems("mjlab", {"Go1 rsl_rl": {"env_steps_per_s": 1e5, "status": "ok"},
                                  "Go1 FastPPO": {"env_steps_per_s": None, "status": "killed"}}) == "not ok: Go1 FastPPO"
    merged = kit.merge_payloads([first, second])
    assert list(merged["parts"]) == ["cuda_tests", "smoke", "hts", "mjlab"]
    assert merged["wall_s"] == 180.0
    md = kit.build_report(merged)
    assert "| smoke | failed: not ok: PQL |" in md
    assert "RuntimeError: boom" in md and "TimeoutError: hts: time cap 30s reached" in md
    assert "skipped: mjlab is not installed" in md and "NVIDIA H100" in md
    assert "Not a GPU run" not in md
    files = []
    for i, pl in enumerate((first, second)):
        files.append(tmp_path / f"{i}.json")
        files[-1].write_text(json.dumps(pl))
    r = subprocess.run([sys.executable, GPU_PY, "--merge", *map(str, files), "--out", str(tmp_path / "out")],
                       capture_output=True, text=True, cwd=REPO, timeout=600)
    assert r.returncode == 0, r.stderr[-2000:]
    assert json.loads((tmp_path / "out" / "gpu.json").read_text())["parts"].keys() == merged["parts"].keys()
    assert (tmp_path / "out" / "gpu.md").read_text() == md
