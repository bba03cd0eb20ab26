"""A console without noise: what building an algorithm, starting Ray and the demo print.

Issue 28: a plain script's ``build_algo()`` printed RLlib's "You are running FastPPO on
the new API stack!", Ray's RLModuleConfig deprecation notice and "Install gputil for GPU
system monitoring."; local Rays announced their token authentication in a 245-character
line; ``env_device='cuda'`` without CUDA failed deep in torch. Ray logs most of these once
per process (``log_once``), so the in-process tests reset that key first and listen on the
logger Ray writes to; the plain-script test runs in a fresh process.
"""
import logging
import os
import subprocess
import sys
import textwrap

import pytest
import torch
from ray.util.debug import reset_log_once

from rllib_fast.tune.plan import fast_algorithms

ALGORITHMS = sorted(fast_algorithms())
# (named without "cuda": benchmarks/gpu.py collects the tests whose skip mentions it as CUDA-only)
GPU_LESS = not torch.cuda.is_available()


class _Records(logging.Handler):
    def __init__(self):
        super().__init__(logging.DEBUG)
        self.messages = []

    def emit(self, record):
        self.messages.append(record.getMessage())


@pytest.fixture
def listen():
    """``listen(logger_name) -> list of its messages`` while the test runs."""
    attached = []

    def attach(name):
        handler, log = _Records(), logging.getLogger(name)
        log.addHandler(handler)
        attached.append((log, handler))
        return handler.messages

    yield attach
    for log, handler in attached:
        log.removeHandler(handler)


def _config(name, **env):
    cls = fast_algorithms()[name]
    kind = getattr(cls, "ACTION_SPACE", None)
    return cls.get_default_config().environment("CartPole" if kind == "discrete" else "Pendulum", **env)


# -- building from a plain script -----------------------------------------------------------------------
def test_plain_script_build_prints_nothing_of_rllibs(tmp_path):
    """The issue's script (FastPPO, then FastDQN and both get_module() kinds) in a fresh process:
    none of the three RLlib/Ray notices, no warning at all."""
    script = textwrap.dedent("""
        import rllib_fast
        from rllib_fast.algorithms.dqn import FastDQNConfig
        from rllib_fast.algorithms.ppo import FastPPOConfig
        for cfg in (FastPPOConfig().environment("CartPole", num_envs=16),
                    FastDQNConfig().environment("CartPole", num_envs=16)):
            algo = cfg.build_algo()
            algo.get_module()
            algo.stop()
        print("BUILT")
    """)
    env = {k: v for k, v in os.environ.items() if k != "RAY_AUTH_MODE"}
    proc = subprocess.run([sys.executable, "-c", script], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=600)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0 and "BUILT" in proc.stdout, out[-3000:]
    for noise in ("new API stack", "DeprecationWarning", "gputil", "WARNING"):
        assert noise not in out, out


@pytest.mark.parametrize("name", ALGORITHMS)
def test_validation_announces_no_api_stack(name, listen):
    """Every registered algorithm: RLlib's "You are running X on the new API stack!" is gone."""
    cfg = _config(name)
    reset_log_once(f"{cfg.algo_class.__name__}_on_new_api_stack")
    messages = listen("ray.rllib.algorithms.algorithm_config")
    cfg.validate()
    assert not [m for m in messages if "new API stack" in m], messages


def test_api_stack_switches_must_stay_on():
    from rllib_fast.algorithms.ppo import FastPPOConfig

    cfg = FastPPOConfig().environment("CartPole").api_stack(enable_rl_module_and_learner=False,
                                                             enable_env_runner_and_connector_v2=False)
    with pytest.raises(ValueError) as err:
        cfg.validate()
    line = str(err.value).splitlines()[0]   # (RLlib's own hint how to skip validation follows)
    assert "`api_stack`" in line and "allowed: both True" in line, line


@pytest.mark.parametrize("name", ALGORITHMS)
def test_system_monitor_off_by_default(name):
    """Tune's UtilMonitor warned "Install gputil ..." at every build; it is opt-in now."""
    assert _config(name).log_sys_usage is False
    assert _config(name).debugging(log_sys_usage=True).log_sys_usage is True


def test_build_starts_no_system_monitor(listen):
    from rllib_fast.algorithms.ppo import FastPPOConfig

    messages = listen("ray.tune.utils.util")
    algo = FastPPOConfig().environment("CartPole", num_envs=4).training(rollout_length=8).build_algo()
    try:
        assert not algo._monitor.is_alive()
        assert not [m for m in messages if "gputil" in m], messages
    finally:
        algo.stop()


def _module_kinds():
    """One module of each base: the on-policy actor-critic and the greedy-policy wrapper."""
    import gymnasium as gym

    from rllib_fast.algorithms.actor_critic import ActorCriticModule
    from rllib_fast.algorithms.dqn import FastDQNConfig
    from rllib_fast.algorithms.dqn.module import QPolicyModule, q_model_config

    box = gym.spaces.Box(-1.0, 1.0, (3,))
    yield lambda: ActorCriticModule(observation_space=box, action_space=gym.spaces.Box(-1.0, 1.0, (1,)),
                                    model_config={"hidden_sizes": [8]})
    yield lambda: QPolicyModule(observation_space=box, action_space=gym.spaces.Discrete(2),
                                model_config=q_model_config(FastDQNConfig()))


def test_rl_modules_build_without_rays_deprecation_notice(listen):
    from ray.rllib.core.rl_module.torch.torch_rl_module import TorchRLModule

    from rllib_fast.core.rl_module_base import RLMODULE_CONFIG_MESSAGE

    messages = listen("ray._common.deprecation")

    class PlainModule(TorchRLModule):   # RLlib's base as is: the notice this test must be able to see
        pass

    reset_log_once(RLMODULE_CONFIG_MESSAGE)
    PlainModule(observation_space=None, action_space=None, model_config={})
    assert any(RLMODULE_CONFIG_MESSAGE in m for m in messages), messages
    for build in _module_kinds():
        messages.clear()
        reset_log_once(RLMODULE_CONFIG_MESSAGE)
        build()
        assert not [m for m in messages if RLMODULE_CONFIG_MESSAGE in m], messages
    # only while our modules are built: afterwards Ray's notice is back for everyone else
    reset_log_once(RLMODULE_CONFIG_MESSAGE)
    messages.clear()
    PlainModule(observation_space=None, action_space=None, model_config={})
    assert any(RLMODULE_CONFIG_MESSAGE in m for m in messages), messages


def test_ensure_ray_drops_only_the_token_enabled_notice(monkeypatch, listen):
    """The local Ray an algorithm starts for its actors (FastAPPO, PQL backend='ray',
    num_learners > 1) keeps Ray's token authentication; only Ray's 245-character notice
    that it is on is dropped, and only during that ray.init (the real start: PQL's test)."""
    import ray

    from rllib_fast.core import local_ray

    monkeypatch.delenv("RAY_AUTH_MODE", raising=False)
    seen = listen(local_ray.AUTH_LOGGER)
    log = logging.getLogger(local_ray.AUTH_LOGGER)
    calls = []

    def fake_init(**kwargs):   # what Ray 2.60's ray.init logs for a new local cluster
        calls.append(kwargs)
        log.warning(local_ray.AUTH_ENABLED_NOTICE + ". Set RAY_AUTH_MODE=disabled to opt out.")
        log.warning("Token authentication is disabled for this Ray cluster. Anyone with network access ...")

    monkeypatch.setattr(ray, "is_initialized", lambda: False)
    monkeypatch.setattr(ray, "init", fake_init)
    assert local_ray.ensure_ray(log_to_driver=False) is True
    assert calls == [{"include_dashboard": False, "log_to_driver": False}]
    assert seen == ["Token authentication is disabled for this Ray cluster. Anyone with network access ..."]
    log.warning(local_ray.AUTH_ENABLED_NOTICE + " (after)")   # outside ensure_ray: shown
    assert seen[-1].endswith("(after)")


# -- how console commands start Ray ---------------------------------------------------------------------
def test_console_commands_start_ray_with_explicit_auth_mode(monkeypatch):
    """RAY_AUTH_MODE=token (Ray's own default for a new local cluster, which it then announces
    in 245 characters) is set before ray is imported; a user's value wins; a cluster keeps its own."""
    from rllib_fast.tune import session

    monkeypatch.delenv("RAY_AUTH_MODE", raising=False)
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    monkeypatch.setenv(session.LOOPBACK_ENV, "0")
    assert session.start_env_missing() == {"RAY_AUTH_MODE": "token"}
    monkeypatch.setenv("RAY_AUTH_MODE", "disabled")
    assert session.start_env_missing() == {}
    execs = []
    monkeypatch.setattr(session.os, "execve", lambda exe, argv, env: execs.append(env))
    session.reexec_for_loopback("rllib_fast.demo", [])
    assert execs == []
    monkeypatch.delenv("RAY_AUTH_MODE")
    session.reexec_for_loopback("rllib_fast.cli", ["sweep", "f.yaml", "--address", "auto"])
    assert execs == []
    session.reexec_for_loopback("rllib_fast.demo", ["--tasks", "CartPole"])
    assert len(execs) == 1 and execs[0]["RAY_AUTH_MODE"] == "token" and execs[0][session.LOOPBACK_ENV] == "0"


def test_console_entry_sets_the_switches_before_ray_is_imported(monkeypatch, tmp_path):
    """The console scripts start in ``rllib_fast_boot``: the switches go into the environment
    before the package imports ray, so ``cli.main`` finds nothing missing and runs in place
    (no second interpreter start); commands that start no Ray, or join a cluster, are left alone."""
    import rllib_fast_boot as boot

    for key in ("RAY_AUTH_MODE", "RAY_ADDRESS", boot.LOOPBACK_ENV):
        monkeypatch.delenv(key, raising=False)
    assert boot.set_start_env(["list"]) == {}
    assert boot.set_start_env(["sweep", "f.yaml", "--address", "auto"]) == {}
    script = textwrap.dedent("""
        import os, sys
        import rllib_fast_boot as boot
        print("SET", sorted(boot.set_start_env(["train", "file", "x.yaml"])))
        import rllib_fast.cli
        from rllib_fast.tune import session
        print("MISSING", session.start_env_missing(), session.loopback_effective())
    """)
    env = {k: v for k, v in os.environ.items() if k not in ("RAY_AUTH_MODE", "RAY_ADDRESS", boot.LOOPBACK_ENV)}
    proc = subprocess.run([sys.executable, "-c", script], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert f"SET ['RAY_AUTH_MODE', '{boot.LOOPBACK_ENV}']" in proc.stdout
    assert "MISSING {} True" in proc.stdout
    import tomllib

    with open(os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "pyproject.toml"), "rb") as f:
        scripts = tomllib.load(f)["project"]["scripts"]
    assert scripts == {"rllib": "rllib_fast_boot:main", "rllib-fast": "rllib_fast_boot:main"}


def test_explicit_auth_mode_keeps_ray_quiet(tmp_path):
    """What the re-exec relies on: with RAY_AUTH_MODE=token in the environment at import, a
    new local Ray starts with token authentication and prints no notice about it."""
    script = textwrap.dedent("""
        import ray
        from ray._raylet import AuthenticationMode, get_authentication_mode
        ray.init(address="local", num_cpus=1, include_dashboard=False)
        print("MODE", get_authentication_mode() == AuthenticationMode.TOKEN)
        ray.shutdown()
    """)
    env = dict(os.environ, RAY_AUTH_MODE="token")
    proc = subprocess.run([sys.executable, "-c", script], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "MODE True" in proc.stdout
    assert "Token authentication" not in proc.stdout + proc.stderr


# -- the demo's progress lines -------------------------------------------------------------------------
class _Trial:
    def __init__(self, trial_id, lr):
        self.trial_id, self.config, self.last_result = trial_id, {"lr": lr, "clip_param": 0.2}, {}


def test_milestone_progress_is_bounded_by_events_not_time():
    from rllib_fast.core.metrics import STEP_KEY
    from rllib_fast.tune.progress import MilestoneProgress

    lines = []
    progress = MilestoneProgress("[CartPole]", 1000, keys=["lr", "clip_param"], printer=lines.append)
    trials = [_Trial("abcde_00000", 1e-3), _Trial("abcde_00001", 3e-4)]
    for step in range(10, 1001, 10):   # 100 results per trial
        for t in trials:
            if step == 500 and t is trials[1]:   # PBT exploits trial 1 halfway
                t.config = {"lr": 6.3e-4, "clip_param": 0.1}
            t.last_result = {STEP_KEY: step, "env_runners": {"episode_return_mean": step / 10}}
            progress.on_trial_result(0, trials, t, t.last_result)
    for t in trials:
        progress.on_trial_complete(0, trials, t)
    assert len(lines) == 2 * 3 + 1 + 2, lines   # 25/50/75 % each, one exploit, two ends
    assert all(len(ln) < 120 for ln in lines), lines
    assert "[CartPole] trial abcde_00000: 250 env steps (25%), return 25.0, lr=0.001 clip_param=0.2" in lines
    assert any("abcde_00001: PBT exploit" in ln and "lr=0.00063 clip_param=0.1" in ln for ln in lines), lines
    assert lines[-1] == "[CartPole] trial abcde_00001: finished, return 100.0 after 1,000 env steps"
# -- a device the machine lacks ------------------------------------------------------------------------
def _one_line(excinfo):
    text = str(excinfo.value)
    assert "\n" not in text, text
    return text


@pytest.mark.skipif(not GPU_LESS, reason="checks a machine without a GPU")
@pytest.mark.parametrize("name", ALGORITHMS)
def test_env_device_cuda_validates_then_fails_at_build_in_one_line(name):
    from rllib_fast.core.devices import DeviceUnavailableError

    cfg = _config(name, env_device="cuda")
    cfg.validate()   # the config may be meant for a GPU worker
    with pytest.raises(DeviceUnavailableError) as err:
        cfg.build_algo()
    line = _one_line(err)
    assert "`env_device` = 'cuda'" in line and "available here: 'auto', 'cpu'" in line, line


@pytest.mark.skipif(not GPU_LESS, reason="checks a machine without a GPU")
@pytest.mark.parametrize("key", ["v_learner_device", "p_learner_device"])
def test_pql_thread_learner_device_fails_at_build_in_one_line(key):
    from rllib_fast.algorithms.pql import PQLConfig
    from rllib_fast.core.devices import DeviceUnavailableError

    cfg = PQLConfig().environment("Pendulum", num_envs=8, env_device="cpu").training(**{key: "cuda:1"})
    cfg.validate()
    with pytest.raises(DeviceUnavailableError) as err:
        cfg.build_algo()
    line = _one_line(err)
    assert f"`{key}` = 'cuda:1'" in line and "available here" in line, line


@pytest.mark.skipif(not GPU_LESS, reason="checks a machine without a GPU")
def test_pql_ray_learner_device_is_checked_in_its_actor(listen):
    """The Ray back-end's learner checks its device where Ray placed it; the driver raises
    that one line (not Ray's many-line ActorDiedError). The local Ray PQL starts for its
    actors does not announce its token authentication."""
    import ray

    from rllib_fast.algorithms.pql import PQLConfig
    from rllib_fast.core.devices import DeviceUnavailableError
    from rllib_fast.core.local_ray import AUTH_ENABLED_NOTICE, AUTH_LOGGER

    ours = not ray.is_initialized()   # (another test's Ray may be up: then PQL uses it)
    auth = listen(AUTH_LOGGER)
    cfg = PQLConfig().environment("Pendulum", num_envs=8, env_device="cpu").training(
        backend="ray", p_learner_device="cuda", num_cpus_per_pql_learner=0.25)
    try:
        with pytest.raises(DeviceUnavailableError) as err:
            cfg.build_algo()
        line = _one_line(err)
        assert "`p_learner_device` = 'cuda'" in line and "available here" in line, line
        assert not [m for m in auth if AUTH_ENABLED_NOTICE in m], auth
    finally:
        if ours:
            ray.shutdown()


def test_remote_device_error_is_reraised_as_its_line():
    from rllib_fast.core.devices import DeviceUnavailableError, raise_remote_device_error

    wrapped = RuntimeError("The actor died because of an error raised in its creation task, ray::X.__init__()\n"
                           "  File ...\nrllib_fast.core.devices.DeviceUnavailableError: PQLConfig: `v_learner_device`"
                           " = 'cuda' but no; available here: 'auto', 'cpu'\n")
    with pytest.raises(DeviceUnavailableError) as err:
        raise_remote_device_error(wrapped)
    assert str(err.value) == "PQLConfig: `v_learner_device` = 'cuda' but no; available here: 'auto', 'cpu'"
    raise_remote_device_error(RuntimeError("something else"))   # returns: the caller re-raises


@pytest.mark.skipif(not GPU_LESS, reason="checks a machine without a GPU")
def test_cli_device_check_gives_the_build_reason():
    from rllib_fast.core.devices import unavailable_reason
    from rllib_fast.tune.session import device_error

    reason = unavailable_reason("cuda")
    assert device_error({"env_device": "cuda"}) == f"env_device='cuda' but {reason} (Tune would wait forever for a GPU)"
    assert device_error({"v_learner_device": "cuda:1"}).startswith(f"v_learner_device='cuda:1' but {reason}")
    assert device_error({"num_gpus_per_v_learner": 1}).startswith("num_gpus_per_v_learner=1 but ")
    assert device_error({"env_device": "cpu", "v_learner_device": "auto"}) is None


