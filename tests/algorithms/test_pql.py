"""PQL (thread and Ray back-ends), DDPGN and SACN: learning Pendulum from a
fixed seed, checkpoint/restore of all three components (replay optional),
bit-exact resume of the sequential baselines, PBT actor reuse."""
import math

import pytest
import ray
import torch

from rllib_fast.algorithms import DDPGN, PQL, SACN
from rllib_fast.algorithms.pql import DDPGNConfig, PQLConfig, SACNConfig
from rllib_fast.presets import preset

THRESHOLD = -250.0
# small nets and 64 envs: the paper's defaults scaled down for a 2-core CPU
PENDULUM = preset("PQL", "Pendulum")
FAST = {k: v for k, v in PENDULUM.items() if k != "num_envs"}


def _config(cls, n=64, **kw):
    """PQL here runs its thread back-end unless a test says otherwise (the process back-end,
    the default on a CPU, has its own tests in test_pql_process.py)."""
    if cls is PQLConfig:
        kw = {"backend": "thread", **kw}
    return cls().environment("Pendulum", num_envs=n).training(**{**FAST, **kw}).debugging(seed=0) \
        .evaluation(evaluation_duration=10)


def _learn(algo, max_iters):
    best = -math.inf
    for _ in range(max_iters):
        algo.train()
        best = max(best, algo.evaluate()["env_runners"]["episode_return_mean"])
        if best >= THRESHOLD:
            break
    return best


def _flat(module):
    return torch.cat([t.detach().flatten().double() for t in module.state_dict().values()])


def test_pql_thread_backend_learns_pendulum():
    algo = _config(PQLConfig).build_algo()
    try:
        best = _learn(algo, 30)
        r = algo.train()["learners"]["default_policy"]
        assert best >= THRESHOLD
        assert r["beta_av_achieved"] == pytest.approx(8.0, rel=0.1)
        assert r["beta_pv_achieved"] == pytest.approx(2.0, rel=0.1)
    finally:
        algo.stop()


def test_pql_checkpoint_restores_all_three_components_and_replay(tmp_path):
    cfg = _config(PQLConfig, n=16, hidden_sizes=[32], batch_size=64, steps_per_iteration=20, checkpoint_replay=True)
    algo = cfg.build_algo()
    assert PQL.RESUME_EXACT is False and DDPGN.RESUME_EXACT and SACN.RESUME_EXACT
    try:
        for _ in range(2):
            algo.train()
        algo.save_to_path(str(tmp_path))
        saved = {"actor": _flat(algo.actor.policy), "rms": algo.actor.rms.mean.clone(),
                 "v": _flat(algo.v.critic), "v_target": _flat(algo.v.target), "v_pi": _flat(algo.v.policy),
                 "p": _flat(algo.p.policy), "p_q": _flat(algo.p.critic), "counts": dict(algo.controller.counts),
                 "v_replay": algo.v.replay.data["obs"][:len(algo.v.replay)].clone(), "p_len": len(algo.p.replay),
                 "v_updates": algo.v.updates}
        it = algo.training_iteration
    finally:
        algo.stop()
    fresh = cfg.build_algo()
    try:
        fresh.restore_from_path(str(tmp_path))
        assert torch.equal(_flat(fresh.actor.policy), saved["actor"])
        assert torch.equal(fresh.actor.rms.mean, saved["rms"])
        assert torch.equal(_flat(fresh.v.critic), saved["v"]) and torch.equal(_flat(fresh.v.target), saved["v_target"])
        assert torch.equal(_flat(fresh.v.policy), saved["v_pi"])
        assert torch.equal(_flat(fresh.p.policy), saved["p"]) and torch.equal(_flat(fresh.p.critic), saved["p_q"])
        assert fresh.controller.counts == saved["counts"] and fresh.v.updates == saved["v_updates"]
        assert torch.equal(fresh.v.replay.data["obs"][:len(fresh.v.replay)], saved["v_replay"])
        assert len(fresh.p.replay) == saved["p_len"]
        fresh.train()
        assert fresh.training_iteration == it + 1
        assert fresh.v.updates > saved["v_updates"] and fresh.controller.counts["actor"] > saved["counts"]["actor"]
    finally:
        fresh.stop()


@pytest.mark.parametrize("cfg_cls", [DDPGNConfig, SACNConfig])
def test_sequential_baselines_resume_bit_exactly(tmp_path, cfg_cls):
    cfg = _config(cfg_cls, n=8, hidden_sizes=[16], batch_size=32, steps_per_iteration=10, warmup_steps=2,
                  checkpoint_replay=True)
    algo = cfg.build_algo()
    try:
        algo.train()
        algo.train()
        algo.save_to_path(str(tmp_path))
        algo.train()
        expected = (_flat(algo.v.critic), _flat(algo.p.policy), algo.obs.clone())
    finally:
        algo.stop()
    fresh = cfg.build_algo()
    try:
        fresh.restore_from_path(str(tmp_path))
        fresh.train()
        got = (_flat(fresh.v.critic), _flat(fresh.p.policy), fresh.obs.clone())
        assert all(torch.equal(a, b) for a, b in zip(expected, got))
    finally:
        fresh.stop()


def test_reused_actor_rebuilds_for_live_and_structural_changes():
    """Tune's reuse_actors: the actor starts the new trial as a fresh one (its
    old learner threads stopped), whether only live keys or the structure changed."""
    algo = _config(PQLConfig, n=8, hidden_sizes=[16], batch_size=32, steps_per_iteration=10).build_algo()
    try:
        algo.train()
        backend = algo.backend
        new = algo.config.to_dict()
        new.update(lr=3e-4, tau=0.01)
        assert algo.reset_config(new) is True
        assert algo.backend is not backend and not any(t.is_alive() for t in backend.threads)
        assert algo.live.lr == 3e-4 and algo.live.tau == 0.01 and algo.actor.emitted == 0
        algo.train()
        assert algo.v.optimizer.param_groups[0]["lr"] == 3e-4
        backend = algo.backend
        new.update(hidden_sizes=[24])
        assert algo.reset_config(new) is True
        assert algo.backend is not backend and not any(t.is_alive() for t in backend.threads)
        assert algo.v.critic.q1[0].out_features == 24
        algo.train()
    finally:
        algo.stop()


@pytest.fixture(scope="module")
def ray_session():
    started = not ray.is_initialized()
    if started:
        ray.init(num_cpus=4, include_dashboard=False, log_to_driver=False)
    yield
    if started:
        ray.shutdown()


@pytest.mark.parametrize("transport", ["object_store", "collective"])
def test_pql_ray_backend_learns_and_restores(ray_session, tmp_path, transport):
    cfg = _config(PQLConfig, backend="ray", ray_transport=transport)
    if transport == "collective":   # learners without GPUs are on CPU: keep the Actor there too (gloo)
        cfg = cfg.environment("Pendulum", num_envs=64, env_device="cpu")
    algo = cfg.build_algo()
    try:
        # learning through the collective transport (point to point); the object store carries the same
        # data, so a few iterations (trained critic, exact restore) show it works there
        if transport == "collective":
            assert _learn(algo, 30) >= THRESHOLD
        else:
            before = _flat(algo.actor.policy)
            for _ in range(3):
                algo.train()
            assert not torch.equal(_flat(algo.actor.policy), before)   # learner weights reached the Actor
        r = algo.train()["learners"]["default_policy"]
        assert r["beta_av_achieved"] == pytest.approx(8.0, rel=0.1)
        if transport == "collective":   # data and weights really went point to point (gloo here, NCCL on CUDA)
            link = algo.backend.link
            assert link.backend == "gloo" and link.bytes_sent > 0 and link.bytes_received > 0
            assert link.in_flight == 0   # every send was settled by the learner's reply
        else:
            assert algo.backend.link is None
        algo.save_to_path(str(tmp_path))
        saved_actor = _flat(algo.actor.policy)
        saved_v = algo.backend.get_state("critic", False)["critic"]
        it = algo.training_iteration
    finally:
        algo.stop()
    fresh = cfg.build_algo()
    try:
        fresh.restore_from_path(str(tmp_path))
        assert torch.equal(_flat(fresh.actor.policy), saved_actor)
        got_v = fresh.backend.get_state("critic", False)["critic"]
        assert all(torch.equal(got_v[k], saved_v[k]) for k in saved_v)
        fresh.train()
        assert fresh.training_iteration == it + 1
    finally:
        fresh.stop()


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_collective_transport_refuses_a_learner_on_the_actors_gpu(ray_session):
    # NCCL cannot connect two ranks on one GPU: the 1-GPU layout must say so, not hang or crash in NCCL
    cfg = _config(PQLConfig, n=8, backend="ray", ray_transport="collective", num_gpus_per_v_learner=0.25,
                  num_gpus_per_p_learner=0.25).environment("Pendulum", num_envs=8, env_device="cuda:0")
    with pytest.raises(ValueError, match="needs the learners on other GPUs than the Actor's"):
        cfg.build_algo()


@pytest.mark.parametrize("cls,kw", [
    (PQLConfig, dict(policy_learner="sac")),
    (PQLConfig, dict(distributional=True, num_atoms=51, v_min=-100.0, v_max=0.0)),
    (DDPGNConfig, dict(distributional=True, noise_type="fixed", noise_std=0.3, noise_decay="linear")),
])
def test_variants_train(cls, kw):
    algo = _config(cls, n=8, hidden_sizes=[16], batch_size=32, steps_per_iteration=12, warmup_steps=2, **kw) \
        .build_algo()
    try:
        for _ in range(2):
            r = algo.train()["learners"]["default_policy"]
        assert r["num_critic_updates"] > 0 and math.isfinite(r["critic_loss"])
        if kw.get("distributional"):
            assert algo.v.critic.q1[-1].out_features == 51
        if kw.get("policy_learner") == "sac":
            assert math.isfinite(r["entropy"]) and algo.p.policy.log_alpha.item() != math.log(0.1)
    finally:
        algo.stop()


def test_pause_waits_for_a_learner_that_parked_late():
    """A learner that saw `running` unset just before resume() sets its parked flag
    after it; that stale flag must not let the next pause() return while the learner
    is inside update() (the driver then ingests into the replay and snapshots weights)."""
    import threading
    import time
    import types

    from rllib_fast.algorithms.pql.thread_backend import ThreadBackend
    from rllib_fast.algorithms.pql.ratio import RatioController

    active = {"n": 0}

    class Learner:
        device, updates = torch.device("cpu"), 0

        def ready(self):
            return True

        def add(self, batch):
            pass

        def set_moments(self, moments):
            pass

        def update(self):
            active["n"] += 1
            time.sleep(0.3)
            self.updates += 1
            active["n"] -= 1

    policy = torch.nn.Linear(1, 1)
    v, p = Learner(), Learner()
    p.policy = policy
    controller = RatioController(("actor", "critic", "policy"),
                                 [("actor", "critic", 1 / 8), ("policy", "critic", .5)])
    config, actor = types.SimpleNamespace(weight_sync_every=10 ** 9), types.SimpleNamespace(policy=policy)
    backend = ThreadBackend(config, None, actor, controller, None, num_envs=1, capacity=0,
                            device=torch.device("cpu"), learners=(v, p))
    try:
        time.sleep(0.3)                                   # both learners parked
        plain_set = threading.Event.set
        for e in backend.parked.values():                 # the park lands late: after resume()
            e.set = (lambda ev: (lambda: (time.sleep(0.15), plain_set(ev))))(e)
        time.sleep(0.12)
        backend.resume()
        for e in backend.parked.values():
            e.set = (lambda ev: (lambda: plain_set(ev)))(e)
        time.sleep(0.2)
        assert active["n"] > 0                            # the learners work ...
        backend.pause()
        assert active["n"] == 0                           # ... and pause() waited for them
    finally:
        backend.close()


def test_restore_without_replay_refills_before_the_ratios_bind():
    """A restore without the replays: the learners are not ready until the Actor
    refills learning_starts transitions, and an armed controller would hold the
    Actor at its gate for max_wait_s on almost every step meanwhile."""
    import tempfile

    cfg = _config(PQLConfig, n=8, hidden_sizes=[16], batch_size=32, steps_per_iteration=10)
    algo = cfg.build_algo()
    try:
        for _ in range(3):
            algo.train()
        assert algo.controller.armed
        path = algo.save_to_path(tempfile.mkdtemp())
    finally:
        algo.stop()
    fresh = cfg.build_algo()
    try:
        fresh.restore_from_path(path)
        assert not fresh.controller.armed and fresh.arm_at == fresh.actor.emitted + fresh.learning_starts
        r = fresh.train()["learners"]["default_policy"]
        assert r["wait_overrides"] == 0
        while not fresh.controller.armed:
            fresh.train()
    finally:
        fresh.stop()


@pytest.mark.parametrize("spread", [False, True])
def test_randomized_episode_clocks_end_episodes_on_different_steps(spread):
    """Pendulum has a 200-step time limit and no termination: started together, all N envs
    time out on step 200. With ``randomize_episode_clocks`` the first (shortened) episodes
    end on different steps and are not counted; the second ones are, spread out too."""
    algo = _config(DDPGNConfig, n=16, hidden_sizes=[16], batch_size=32, steps_per_iteration=50, warmup_steps=2,
                   beta_av=1.0, randomize_episode_clocks=spread).build_algo()
    try:
        clocks = algo.env.elapsed_steps
        assert (len(set(clocks.tolist())) > 1) == spread
        counted = []
        for _ in range(8):   # 400 vectorised steps: two time limits
            algo.train()
            counted.append(int(algo.tracker.filled))
        if spread:   # env i (clock c_i < 200) ends its second episode on step 400 - c_i: counted, spread out
            assert counted[:4] == [0, 0, 0, 0] and counted[-1] == 16 and any(0 < c < 16 for c in counted[4:7])
        else:        # every env times out on steps 200 and 400 exactly
            assert counted == [0, 0, 0, 16, 16, 16, 16, 32]
    finally:
        algo.stop()
