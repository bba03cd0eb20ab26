"""RLlib's own result checker accepts one ``train()`` result of every
registered algorithm (``ray.rllib.utils.test_utils.check_train_results_new_api_stack``:
env_runners, fault_tolerance, learners, timers, training_iteration, config).

Tiny configs from the resume test's helper; algorithms whose components are Ray
actors share one small local Ray session.
"""
import pytest
import ray
from ray.rllib.utils.test_utils import check_train_results_new_api_stack

from rllib_fast.algorithms import ALGORITHMS
from tests._resume_worker import build_tiny


@pytest.fixture(scope="module")
def local_ray():
    started = not ray.is_initialized()
    if started:
        ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield
    if started:
        ray.shutdown()


@pytest.mark.parametrize("name", list(ALGORITHMS))
def test_train_result_passes_rllibs_checker(name, local_ray):
    algo, _ = build_tiny(name)
    try:
        result = algo.train()
    finally:
        algo.stop()
    check_train_results_new_api_stack(result)
    assert result["fault_tolerance"]["num_remote_worker_restarts"] == 0


def test_every_registered_class_is_importable_from_the_algorithms_package():
    """``from rllib_fast.algorithms import <Name>`` works for every algorithm and
    config a family registers (the package re-exports them explicitly)."""
    import rllib_fast.algorithms as package
    from rllib_fast.algorithms import CONFIGS

    for cls in (*ALGORITHMS.values(), *CONFIGS.values()):
        assert getattr(package, cls.__name__) is cls
        assert cls.__name__ in package.__all__
