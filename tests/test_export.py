"""Policy export: the ONNX and TorchScript files act exactly as
``get_module().forward_inference`` (greedy, observation normalisation and
action scaling included) with nothing of rllib_fast at run time, from the
algorithm and from its checkpoint; unusable checkpoints fail in one line."""
import json
import shutil

import numpy as np
import pytest
import torch
from ray.rllib.core.columns import Columns

from rllib_fast.export import MODULE_PATH, POLICY_INFO_FILE, ExportError, export_checkpoint, load_policy_module
from tests._resume_worker import tiny_config

onnxruntime = pytest.importorskip("onnxruntime")

CASES = {  # case -> (algorithm, env)
    "FastPPO-discrete": ("FastPPO", "CartPole"),
    "FastPPO-continuous": ("FastPPO", "Pendulum"),
    "FastDQN": ("FastDQN", "CartPole"),
    "PQL": ("PQL", "Pendulum"),
    "SACN": ("SACN", "Pendulum"),
    "PopTD3": ("PopTD3", "Pendulum"),
}


def _trained(name, env):
    algo = tiny_config(name, env).build_algo()
    algo.train()
    algo.train()
    return algo


def _observations(algo, n=64):
    g = torch.Generator().manual_seed(1)
    return torch.randn(n, *algo.env.obs_shape, generator=g) * 5  # beyond the normaliser's clip, too


def _run_onnx(path, obs):
    session = onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    return torch.as_tensor(session.run(None, {"obs": obs.numpy()})[0])


def _run_torchscript(path, obs):
    actions = torch.jit.load(str(path))(obs)
    assert not actions.requires_grad   # plain actions for inference: `.numpy()` works on them
    return actions


def _check(actual, expected, discrete):
    assert actual.shape == expected.shape
    if discrete:
        assert torch.equal(actual.long(), expected.long())
    else:
        torch.testing.assert_close(actual.float(), expected.float(), atol=1e-5, rtol=0)


@pytest.fixture(scope="module", params=list(CASES))
def trained(request, tmp_path_factory):
    name, env = CASES[request.param]
    algo = _trained(name, env)
    ckpt = algo.save_to_path(str(tmp_path_factory.mktemp("ckpt") / request.param))
    yield algo, ckpt
    algo.stop()


@pytest.mark.parametrize("fmt,run", [("onnx", _run_onnx), ("torchscript", _run_torchscript)])
def test_exported_policy_acts_as_forward_inference(trained, fmt, run, tmp_path):
    algo, ckpt = trained
    obs = _observations(algo)
    with torch.no_grad():
        expected = algo.get_module().forward_inference({Columns.OBS: obs.to(algo.device)})[Columns.ACTIONS].cpu()
    path = algo.export_policy(tmp_path / f"policy.{fmt}", format=fmt)
    _check(run(path, obs), expected, algo.env.is_discrete)
    # the same policy from the checkpoint alone (no algorithm built)
    path = export_checkpoint(ckpt, format=fmt, out=tmp_path / f"from_ckpt.{fmt}")
    _check(run(path, obs), expected, algo.env.is_discrete)



def test_the_algorithm_and_the_module_say_which_policy_a_file_holds(trained):
    """Export asks instead of knowing the classes: an algorithm of one policy
    answers with its module and refuses a member in one line; a population
    answers with one member's own module (its best), before and after a
    checkpoint."""
    algo, ckpt = trained
    if hasattr(algo, "best_member"):   # a population
        assert algo.policy_module().members == 1
        assert load_policy_module(ckpt).members == 1
        assert algo.policy_module(member=1).members == 1
        return
    assert algo.policy_module() is algo.get_module()
    loaded = load_policy_module(ckpt)
    assert loaded.select() is loaded
    with pytest.raises(ExportError, match="population algorithms only") as err:
        algo.export_policy("never-written.onnx", member=0)
    assert "\n" not in str(err.value)


def test_population_member_export(tmp_path):
    algo = _trained("PopTD3", "Pendulum")
    try:
        obs = _observations(algo)
        with torch.no_grad():
            every = algo.policy_actions(obs.unsqueeze(0).expand(algo.K, *obs.shape), False)
        best = algo.best_member()
        ckpt = algo.save_to_path(str(tmp_path / "ckpt"))
        for k in range(algo.K):
            _check(_run_onnx(algo.export_policy(tmp_path / f"m{k}.onnx", member=k), obs), every[k], False)
            _check(_run_onnx(export_checkpoint(ckpt, out=tmp_path / f"c{k}.onnx", member=k), obs), every[k], False)
        _check(_run_onnx(export_checkpoint(ckpt, out=tmp_path / "best.onnx"), obs), every[best], False)
        with pytest.raises(ExportError) as err:
            export_checkpoint(ckpt, member=algo.K)
        assert "\n" not in str(err.value) and "out of range" in str(err.value)
    finally:
        algo.stop()


@pytest.fixture(scope="module")
def ppo_checkpoint(tmp_path_factory):
    algo = _trained("FastPPO", "CartPole")
    try:
        return algo.save_to_path(str(tmp_path_factory.mktemp("ppo") / "ckpt"))
    finally:
        algo.stop()


def _one_line_error(*args, **kwargs) -> str:
    with pytest.raises(ExportError) as err:
        export_checkpoint(*args, **kwargs)
    text = str(err.value)
    assert "\n" not in text, text
    return text


def test_checkpoint_of_another_version_fails_in_one_line(ppo_checkpoint, tmp_path):
    other = tmp_path / "other"
    shutil.copytree(ppo_checkpoint, other)
    info = other / MODULE_PATH / POLICY_INFO_FILE
    info.write_text(json.dumps({"format": 99, "algorithm": "FastPPO", "rllib_fast": "9.0.0"}))
    assert "another rllib_fast version" in _one_line_error(other)
    shutil.rmtree(other / "learner_group")  # a checkpoint written before policies were stored
    text = _one_line_error(other)
    assert str(other) in text and MODULE_PATH in text


def test_corrupted_checkpoint_fails_in_one_line(ppo_checkpoint, tmp_path):
    broken = tmp_path / "broken"
    shutil.copytree(ppo_checkpoint, broken)
    state = broken / MODULE_PATH / "module_state.pkl"
    state.write_bytes(state.read_bytes()[:200])  # truncated write
    text = _one_line_error(broken)
    assert str(broken) in text and "corrupted" in text
    assert "does not exist" in _one_line_error(tmp_path / "missing")


def test_bad_format_and_member_fail_in_one_line(ppo_checkpoint):
    assert "allowed: onnx, torchscript" in _one_line_error(ppo_checkpoint, format="tflite")
    assert "population" in _one_line_error(ppo_checkpoint, member=1)


def test_onnx_file_needs_only_onnxruntime(ppo_checkpoint, tmp_path):
    """The docs/deploy.md recipe: onnxruntime and numpy, nothing else."""
    path = export_checkpoint(ppo_checkpoint, out=tmp_path / "policy.onnx")
    session = onnxruntime.InferenceSession(path, providers=["CPUExecutionProvider"])
    obs = np.zeros((3, 4), dtype=np.float32)
    (actions,) = session.run(["actions"], {"obs": obs})
    assert actions.shape == (3,) and actions.dtype == np.int64


def test_cli_export(ppo_checkpoint, tmp_path, capsys):
    from rllib_fast.cli import main

    for fmt, run in (("onnx", _run_onnx), ("torchscript", _run_torchscript)):
        out = tmp_path / f"cli.{fmt}"
        assert main(["export", ppo_checkpoint, "--format", fmt, "--out", str(out)]) == 0
        assert str(out) in capsys.readouterr().out
        reference = export_checkpoint(ppo_checkpoint, format=fmt, out=tmp_path / f"api.{fmt}")
        obs = torch.randn(16, 4) * 3
        _check(run(out, obs), run(reference, obs), True)
    assert main(["export", ppo_checkpoint, "--member", "1"]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "population" in err


def test_cemrl_checkpoint_holds_the_mean_policy(tmp_path):
    """CEM-RL's checkpoint policy is the CEM mean (what it evaluates); a member
    is exported from the algorithm, and asking the checkpoint for one is refused."""
    algo = tiny_config("CEMRL", "Pendulum").build_algo()
    try:
        algo.train()
        obs = _observations(algo)
        with torch.no_grad():
            mean_actions = algo.compute_actions(obs, explore=False)
            member1 = algo.policy_actions(obs.unsqueeze(0).expand(algo.K, *obs.shape), False)[1]
        ckpt = algo.save_to_path(str(tmp_path / "ckpt"))
        _check(_run_onnx(export_checkpoint(ckpt, out=tmp_path / "mean.onnx"), obs), mean_actions, False)
        _check(_run_onnx(algo.export_policy(tmp_path / "m1.onnx", member=1), obs), member1, False)
        text = _one_line_error(ckpt, member=0)
        assert "mean policy" in text
    finally:
        algo.stop()
