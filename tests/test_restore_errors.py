"""Restoring a checkpoint that cannot be used fails with one line naming the
problem, not a pickle traceback or a tensor-size mismatch."""
import pytest

from rllib_fast.core.algorithm import CheckpointMismatchError, CheckpointReadError
from tests._resume_worker import tiny_config


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    """A FastPPO CartPole checkpoint with num_envs=8, hidden_sizes=[16]."""
    path = tmp_path_factory.mktemp("ckpt") / "ppo"
    algo = tiny_config("FastPPO", "CartPole").training(num_envs=8).build_algo()
    try:
        algo.train()
        algo.save_to_path(str(path))
    finally:
        algo.stop()
    return path


def _restore_into(cfg, path):
    algo = cfg.build_algo()
    try:
        algo.restore_from_path(str(path))
    finally:
        algo.stop()


def _one_line(err) -> str:
    text = str(err.value)
    assert "\n" not in text, text
    return text


def test_corrupted_checkpoint_names_the_checkpoint(checkpoint, tmp_path):
    import shutil

    broken = tmp_path / "broken"
    shutil.copytree(checkpoint, broken)
    state = broken / "algorithm_state.pkl"
    state.write_bytes(state.read_bytes()[:500])  # truncated write
    with pytest.raises(CheckpointReadError) as err:
        _restore_into(tiny_config("FastPPO", "CartPole").training(num_envs=8), broken)
    line = _one_line(err)
    assert str(broken) in line and "cannot be read" in line and "corrupted" in line


def test_other_num_envs_is_named(checkpoint):
    with pytest.raises(CheckpointMismatchError) as err:
        _restore_into(tiny_config("FastPPO", "CartPole"), checkpoint)  # num_envs 4
    assert _one_line(err) == (f"checkpoint {checkpoint} was written by FastPPO with num_envs=8; "
                              "this algorithm has num_envs=4")


def test_other_hidden_sizes_is_named(checkpoint):
    with pytest.raises(CheckpointMismatchError) as err:
        _restore_into(tiny_config("FastPPO", "CartPole").training(num_envs=8, hidden_sizes=[32]), checkpoint)
    assert _one_line(err) == (f"checkpoint {checkpoint} was written by FastPPO with hidden_sizes=[16]; "
                              "this algorithm has hidden_sizes=[32]")


def test_other_algorithm_is_named(checkpoint):
    with pytest.raises(CheckpointMismatchError) as err:
        _restore_into(tiny_config("FastA2C", "CartPole").training(num_envs=8), checkpoint)
    assert _one_line(err) == f"checkpoint {checkpoint} was written by FastPPO; this algorithm is FastA2C"


def test_string_lr_is_a_type_error_of_lr():
    """Not RLlib's message about malformed lr schedules."""
    from rllib_fast.algorithms import FastPPOConfig

    with pytest.raises(ValueError) as err:
        FastPPOConfig().environment("CartPole").update_from_dict({"lr": "0.001"}).validate()
    assert str(err.value).splitlines()[0] == ("FastPPOConfig: `lr` = '0.001' has type str; allowed: float in "
                                              "(0.0, inf)")
