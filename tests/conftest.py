"""Session-wide test settings.

One torch thread: the networks under test are small, and on a 2-core machine
torch's intra-op thread pool makes every small op wait on the other thread
(measured: several ms per op when the machine is busy), which made learning
tests 5-10x slower without changing what they check.
"""
import pytest
import torch

torch.set_num_threads(1)


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
