"""Session-wide test settings.

Ray: see ``RAY_ADDRESS`` below.

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
