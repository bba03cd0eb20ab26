"""``reset_config`` (Tune PBT with ``reuse_actors``) gives the same trial as a
fresh actor built from the new config."""
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
