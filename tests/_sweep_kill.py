"""An RLlib callback that SIGKILLs the sweep's driver once, for the kill-and-resume test.

Why a module of its own: trial actors import it by name (the sweep file's
``callbacks:`` key). The driver's pid is read from ``$RLLIB_FAST_TEST_KILL_DIR/driver.pid``
(written by the test right after starting the driver); ``killed`` there marks
that it happened, so the resumed sweep trains on. Before killing, it waits
until Tune's experiment state in the sweep folder records this trial's
iteration ``KILL_AT - 1`` (Tune saves and copies it there in the background), so
the resume starts from a known point: a checkpoint at iteration 2, iteration 3
already recorded in MLflow and redone after the resume.
"""
import glob
import json
import os
import signal
import time

from ray.rllib.callbacks.callbacks import RLlibCallback

KILL_AT = 4  # training_iteration whose result the driver never sees


class KillDriverOnce(RLlibCallback):
    def on_train_result(self, *, algorithm=None, metrics_logger=None, result=None, **kwargs) -> None:
        folder = os.environ.get("RLLIB_FAST_TEST_KILL_DIR")
        # on_train_result of iteration k sees algorithm.iteration == k
        if not folder or algorithm is None or algorithm.iteration != KILL_AT:
            return
        marker = os.path.join(folder, "killed")
        try:
            fd = os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY)  # one trial kills, once
        except FileExistsError:
            return
        os.close(fd)
        # Trainable.trial_id is "default" inside RLlib's trial actors; the working dir is named after the trial
        trial = os.path.basename(os.path.normpath(algorithm.logdir))
        _wait_for_state(os.environ["RLLIB_FAST_TEST_SWEEP_DIR"], trial, KILL_AT - 1)
        with open(os.path.join(folder, "driver.pid")) as f:
            os.kill(int(f.read().strip()), signal.SIGKILL)


def _recorded_iteration(sweep_dir: str, trial: str) -> int:
    """The last iteration Tune's saved experiment state records for the trial
    whose working folder is named ``trial`` (``<trainable>_<trial_id>``)."""
    best = 0
    for path in glob.glob(os.path.join(sweep_dir, "experiment_state-*.json")):
        try:
            with open(path) as f:
                state = json.load(f)
        except (OSError, ValueError):
            continue  # being written
        for trial_json, meta_json in state.get("trial_data", []):
            if trial.endswith("_" + str(json.loads(trial_json).get("trial_id"))):
                last = json.loads(meta_json).get("last_result") or {}
                best = max(best, int(last.get("training_iteration") or 0))
    return best


def _wait_for_state(sweep_dir: str, trial: str, iteration: int, limit_s: float = 120.0) -> None:
    end = time.monotonic() + limit_s
    while _recorded_iteration(sweep_dir, trial) < iteration and time.monotonic() < end:
        time.sleep(0.25)
