"""``update_dtype='bfloat16'``: FastPPO's training forward and backward under
torch.autocast, everything else float32. What it must keep: float32
parameters, optimizer state and acting; the update it takes close to the
float32 one; learning."""
import pytest
import torch

from rllib_fast.algorithms.pop_ppo import PopPPOConfig
from rllib_fast.algorithms.ppo import FastPPOConfig
from rllib_fast.core.precision import NATIVE_BF16_CPU_FLAGS, cpu_flags, native_bfloat16
from tests.algorithms._learning import best_return


def small(**kw):
    kw.setdefault("rollout_length", 16)
    return FastPPOConfig().environment("Pendulum", num_envs=32).training(**kw).debugging(seed=5)


def test_one_update_stays_close_to_the_float32_update():
    """Same seed, same rollout, one update each: the parameters differ by
    bfloat16's rounding of the forward, far less than the update moved them."""
    before = small().build_algo()
    start = {k: v.clone() for k, v in before.module.state_dict().items()}
    before.stop()
    runs = {}
    for dtype in ("float32", "bfloat16"):
        algo = small(update_dtype=dtype, adaptive_lr_kl_target=None).build_algo()
        r = algo.train()["learners"]["default_policy"]
        runs[dtype] = ({k: v.clone() for k, v in algo.module.state_dict().items()}, r)
        assert all(v.dtype == start[k].dtype for k, v in algo.module.state_dict().items())   # float32 kept
        assert all(s["exp_avg"].dtype == torch.float32 for s in algo.optimizer.state.values())
        algo.stop()
    f32, b16 = runs["float32"][0], runs["bfloat16"][0]
    moved = sum(float((f32[k] - start[k]).norm()) for k in start if k.startswith(("pi.", "vf.")))
    apart = sum(float((f32[k] - b16[k]).norm()) for k in start if k.startswith(("pi.", "vf.")))
    assert moved > 0 and apart < 0.1 * moved
    # the ratio starts at 1 up to bfloat16's rounding: almost nothing clipped
    assert float(runs["bfloat16"][1]["clip_fraction"]) < float(runs["float32"][1]["clip_fraction"]) + 0.05


def test_the_training_forward_runs_in_bfloat16():
    algo = small(update_dtype="bfloat16").build_algo()
    seen = []
    hook = algo.module.pi[0].register_forward_hook(lambda m, i, o: seen.append(o.dtype))
    algo.train()
    hook.remove()
    # acting forwards in float32, the update's training forwards in bfloat16
    assert torch.float32 in seen and torch.bfloat16 in seen
    algo.stop()


def test_auto_is_bfloat16_exactly_where_the_cpu_has_it_and_the_networks_allow_it():
    native = any(f in cpu_flags() for f in NATIVE_BF16_CPU_FLAGS)
    assert native_bfloat16("cpu") == native
    algo = small(update_dtype="auto").build_algo()
    assert algo.update_rule.autocast_dtype == (torch.bfloat16 if native else None)
    algo.train()
    algo.stop()
    # where the key does not reach (a recurrent module), 'auto' is float32, not an error
    algo = small(update_dtype="auto", rnn_type="gru", rnn_hidden_size=8).build_algo()
    assert algo.update_rule.autocast_dtype is None
    algo.stop()
    algo = small(update_dtype="float32").build_algo()
    assert algo.update_rule.autocast_dtype is None
    algo.stop()


@pytest.mark.parametrize("kw,match", [
    (dict(update_dtype="float16"), r"update_dtype"),
    (dict(update_dtype="bfloat16", rnn_type="gru"), r"`rnn_type` = 'gru'; allowed with bfloat16: rnn_type = None"),
    (dict(update_dtype="bfloat16", compile=True), r"`compile` = True; allowed with bfloat16: compile = False"),
    (dict(update_dtype="bfloat16", symmetry={"mirror_fn": "rllib_fast.algorithms.extensions:pendulum_mirror",
                                             "use_data_augmentation": True}),
     r"`symmetry` = .*allowed with bfloat16: symmetry = None"),
])
def test_bad_settings_are_named_at_validation(kw, match):
    with pytest.raises(ValueError, match=match):
        small(**kw).validate()


def test_pop_ppo_refuses_it():
    with pytest.raises(ValueError, match=r"`update_dtype` = 'bfloat16' is not implemented by PopPPO"):
        PopPPOConfig().environment("Pendulum").training(update_dtype="bfloat16").validate()


@pytest.mark.slow
def test_bfloat16_update_learns_pendulum():
    """The threshold of test_ppo.py's defaults run, with the update in bfloat16."""
    cfg = FastPPOConfig().environment("Pendulum").training(update_dtype="bfloat16").debugging(seed=0)
    assert best_return(cfg, -250, 300) >= -250
