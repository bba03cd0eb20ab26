"""``reset_config`` (Tune PBT with ``reuse_actors``) gives the same trial as a
fresh actor built from the new config."""
import torch

from tests._resume_worker import tiny_config


def _sampled(result):
    return result["num_env_steps_sampled_lifetime"]


def test_rebuild_counts_decorrelation_steps_like_a_fresh_trial():
    """Start-up decorrelation steps are env steps taken by the trial: a rebuilt
    actor counts them exactly as a fresh one does."""
    new = tiny_config("FastPPO", "CartPole").training(decorrelate_steps=5, num_envs=8)
    fresh = new.build_algo()
    try:
        want = _sampled(fresh.train())
    finally:
        fresh.stop()
    assert want == 5 * 8 + 32  # decorrelation + one rollout (tiny total_batch_size 32)
    reused = tiny_config("FastPPO", "CartPole").training(decorrelate_steps=5).build_algo()
    try:
        reused.train()
        assert reused.reset_config(new.to_dict())  # num_envs 4 -> 8: structural, rebuilds
        assert _sampled(reused.train()) == want
    finally:
        reused.stop()


def test_a_reused_actor_starts_a_new_trial_fresh_when_only_live_keys_differ():
    """Tune hands a cached actor to a new trial (no checkpoint, no restore): it
    must not continue the previous trial's weights, replay or counters."""
    new = tiny_config("FastDQN", "CartPole").training(lr=3e-3)
    fresh = new.build_algo()
    try:
        want_params = [p.detach().clone() for p in fresh.module.parameters()]
        want = fresh.train()
    finally:
        fresh.stop()
    reused = tiny_config("FastDQN", "CartPole").build_algo()
    try:
        for _ in range(3):
            reused.train()
        assert reused.reset_config(new.to_dict())      # only lr differs: a live key
        assert reused.num_updates == 0 and reused.replay.t == 0 and reused.env_steps == 0
        for a, b in zip(reused.module.parameters(), want_params):
            assert torch.equal(a, b)
        got = reused.train()
        assert _sampled(got) == _sampled(want)
        assert got["learners"]["default_policy"].get("td_loss") == want["learners"]["default_policy"].get("td_loss")
    finally:
        reused.stop()
