"""A recurrent FastPPO policy (``rnn_type``) leaves as one ONNX / TorchScript file with its memory
state as explicit inputs and outputs, and acts exactly as ``get_module().forward_inference``
(with ``Columns.STATE_IN``/``STATE_OUT``) over whole episodes of velocity-masked Pendulum,
the memory zeroed at every episode end; ``rllib-fast evaluate`` runs the checkpoint."""
import numpy as np
import pytest
import torch
from ray.rllib.core.columns import Columns

from rllib_fast.algorithms.ppo import FastPPOConfig
from rllib_fast.envs import registry
from rllib_fast.export import export_checkpoint, export_policy

onnxruntime = pytest.importorskip("onnxruntime")


@pytest.fixture(scope="module")
def trained():
    """``trained(rnn_type)``: a recurrent FastPPO on velocity-masked Pendulum after one
    iteration, built once per module and type (exporting and evaluating leave it as it was)."""
    algos = {}

    def get(rnn_type):
        if rnn_type not in algos:
            algos[rnn_type] = _train(rnn_type)
        return algos[rnn_type]
    yield get
    for algo in algos.values():
        algo.stop()


def _train(rnn_type):
    algo = (FastPPOConfig().environment("Pendulum", num_envs=8, env_config={"mask_velocity": True})
            .training(rollout_length=16, rnn_type=rnn_type, rnn_hidden_size=16, rnn_num_layers=2,
                      hidden_sizes=[16], num_minibatches=2, num_epochs=2)
            .debugging(seed=0).build_algo())
    algo.train()
    return algo


@pytest.mark.parametrize("rnn_type", ["lstm", "gru"])
def test_exported_recurrent_policy_acts_as_forward_inference_over_episodes(rnn_type, tmp_path, trained):
    algo = trained(rnn_type)
    module = algo.get_module()
    onnx_path = export_policy(algo, tmp_path / "policy.onnx", "onnx")
    ts_path = export_policy(algo, tmp_path / "policy.pt", "torchscript")
    session = onnxruntime.InferenceSession(str(onnx_path), providers=["CPUExecutionProvider"])
    assert [i.name for i in session.get_inputs()] == ["obs", "h_in", "c_in"][:2 + (rnn_type == "lstm")]
    scripted = torch.jit.load(str(ts_path))

    n = 3   # a batch size the export never saw
    env = registry.make("Pendulum", num_envs=n, seed=3, max_episode_steps=30, mask_velocity=True)
    obs = env.reset(seed=3)
    state = {"actor": module.get_initial_state()["actor"].unsqueeze(0).repeat(n, 1, 1, 1)}
    parts = 2 if rnn_type == "lstm" else 1
    onnx_states = [np.zeros((2, n, 16), np.float32) for _ in range(parts)]
    ts_states = [torch.zeros(2, n, 16) for _ in range(parts)]
    episodes = 0
    for _ in range(70):   # two whole episodes per env, and the start of a third
        with torch.no_grad():
            out = module.forward_inference({Columns.OBS: obs, Columns.STATE_IN: state})
        expected = out[Columns.ACTIONS]
        got = session.run(None, {"obs": obs.numpy(), **dict(zip(["h_in", "c_in"], onnx_states))})
        torch.testing.assert_close(torch.as_tensor(got[0]), expected, atol=1e-5, rtol=0)
        onnx_states = got[1:]
        with torch.no_grad():
            ts_out = scripted(obs, *ts_states)
        torch.testing.assert_close(ts_out[0], expected, atol=1e-5, rtol=0)
        ts_states = list(ts_out[1:])
        # the same memory in both layouts: [B, K, L, H] (RLModule) and K x [L, B, H] (export)
        for k in range(parts):
            torch.testing.assert_close(torch.as_tensor(onnx_states[k]), out[Columns.STATE_OUT]["actor"][:, k]
                                       .permute(1, 0, 2), atol=1e-5, rtol=0)
        step = env.step(expected)
        ended = step.terminated | step.truncated
        episodes += int(ended.sum())
        keep = (~ended).float()
        state = {"actor": out[Columns.STATE_OUT]["actor"] * keep.view(n, 1, 1, 1)}
        onnx_states = [s * keep.numpy()[None, :, None] for s in onnx_states]
        ts_states = [s * keep.view(1, n, 1) for s in ts_states]
        obs = step.obs
    assert episodes == 2 * n


def test_recurrent_checkpoint_exports_and_evaluates(tmp_path, trained):
    from rllib_fast.tune.run import evaluate_checkpoint

    algo = trained("gru")
    ckpt = tmp_path / "ckpt"
    algo.save_to_path(str(ckpt))
    expected = algo.evaluate()["env_runners"]
    path = export_checkpoint(ckpt, "onnx")
    assert [i.name for i in onnxruntime.InferenceSession(path).get_inputs()] == ["obs", "h_in"]
    res = evaluate_checkpoint(str(ckpt), episodes=4)
    assert res["num_episodes"] == 4 and np.isfinite(res["episode_return_mean"])
    assert expected["num_episodes"] > 0
