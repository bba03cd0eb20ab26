"""Session-wide test settings.

Ray: see ``RAY_ADDRESS`` below; mjlab/Warp: see ``WARP_CACHE_PATH`` below.

One torch thread: the networks under test are small, and on a 2-core machine
torch's intra-op thread pool makes every small op wait on the other thread,
which slows learning tests down without changing what they check.
"""
import os

import pytest
import torch

torch.set_num_threads(1)

# Every plain ``ray.init()`` in a test starts its own local Ray. Without this,
# Ray joins the newest cluster on the machine, e.g. the 2-node test cluster
# another pytest-xdist worker has up, and then rejects ``num_cpus``. Tests that
# want a cluster pass its address explicitly.
os.environ.setdefault("RAY_ADDRESS", "local")

# Warp (mjlab's MuJoCo Warp) compiles its kernels on first use and caches them on disk.
# One cache for every test that builds an mjlab env, set before anything imports warp:
# the checkout's ignored build/ folder. A test file that built its first mjlab env
# with warp's default cache instead would compile the same kernels a second time.
os.environ.setdefault("WARP_CACHE_PATH", os.path.join(os.path.dirname(__file__), "..", "build", "warp-cache"))
os.environ.setdefault("MJLAB_WARP_QUIET", "1")


@pytest.fixture
def isolated_run(tmp_path, monkeypatch):
    """Run in a fresh directory with no MLflow URI from the environment, and
    leave no Ray session behind (CLI and MLflow tests start their own)."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    yield
    import ray

    if ray.is_initialized():
        ray.shutdown()


@pytest.fixture
def aot_eager(monkeypatch):
    """torch.compile with the ``aot_eager`` backend for the test: dynamo's capture and the
    AOTAutograd forward/backward split as inductor runs them, without inductor's code
    generation (what the compile tests check; see tests/algorithms/test_compile.py)."""
    from rllib_fast.core import compile as compile_mod

    monkeypatch.setattr(compile_mod, "BACKEND", "aot_eager")
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()
