"""A slim, driver-side MLflow logger for Tune: :class:`MLflowRecorder`.

Compared with ``ray.air.integrations.mlflow.MLflowLoggerCallback`` (which logs
the ~300 keys of a flattened AlgorithmConfig, one request per key, and uses
``training_iteration`` as the step), this records

* **params**: only the algorithm's own hyperparameters, in one ``log_batch``
  request (for rllib_fast algorithms ``FastConfig.hyperparameters()``; for RLlib
  built-ins the keys whose value differs from ``AlgorithmConfig()`` defaults,
  plus ``lr``, ``gamma`` and ``env``);
* **metrics**: a curated set of numeric result keys (flattened with ``/`` and
  sanitized into valid MLflow names), with ``step`` = lifetime env steps
  (``num_env_steps_sampled_lifetime``; falls back to ``training_iteration``),
  one batched request per result;
* **artifacts** at trial end: the trial's latest checkpoint directory
  (``checkpoint/``) and a learning-curve PNG (``plots/learning_curve.png``);
* the run **status**: FINISHED, or FAILED when the trial errored;
* with ``parent_run_name`` (what ``rllib-fast sweep`` passes: the sweep's
  name) every trial run is **nested** under one parent run per sweep
  (``mlflow.parentRunId``), so the UI groups a sweep's trials.

A resumed sweep (``Tuner.restore``, or a trial restarted after a failure)
continues the same runs: they are found again by their ``trial_id`` tag, and
the sweep's parent run is found again and closed at the end. A resumed trial
redoes the iterations after its last checkpoint; their results are not logged
a second time (MLflow cannot delete a metric point, so the first values stay
and a metric's history has one point per step, as in an uninterrupted run):
results up to the last ``training_iteration`` already recorded for the run
are skipped until the trial passes it.

Tracking URI: the ``tracking_uri`` argument, else ``MLFLOW_TRACKING_URI``, else
``sqlite:///<abs dir>/mlflow.db`` (MLflow 3 refuses the file store by default).
For sqlite stores the artifacts go to ``<db dir>/mlartifacts`` unless
``artifact_location`` says otherwise.

Usage::

    tune.Tuner("FastPPO", param_space=cfg,
               run_config=tune.RunConfig(callbacks=[MLflowRecorder(experiment_name="cartpole")])).fit()
    tune.run("FastPPO", config=cfg, callbacks=[MLflowRecorder()])
"""
from __future__ import annotations

import logging
import math
import numbers
import os
import re
import tempfile
import threading
import time
from typing import Any, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple

from ray.tune.logger import LoggerCallback
from ray.tune.utils import flatten_dict

from .plots import RETURN_KEY, curve_point, env_step, plot_curves

logger = logging.getLogger(__name__)

#: Top-level result keys always recorded (when numeric).
DEFAULT_KEYS = ("training_iteration", "time_total_s", "time_this_iter_s",
                "num_env_steps_sampled_lifetime", "num_env_steps_trained_lifetime",
                "num_episodes_lifetime")
#: Flattened-key prefixes recorded (when numeric). ``population/``: the populations' per-member
#: returns and hyperparameters (``population/member_<i>/...``, PopTD3 ... PopPPO)
DEFAULT_PREFIXES = ("env_runners/", "evaluation/", "learners/", "timers/", "perf/", "population/")
#: Substrings of flattened keys never recorded (per-agent/-module duplicates, config echo).
DEFAULT_EXCLUDE = ("config/", "/agent_episode_return", "/module_episode_return",
                   "/num_agent_steps", "/num_module_steps", "/weights_seq_no", "_throughput/throughput_since_last_restore")

_MAX_PARAM_VALUE = 6000  # mlflow.utils.validation.MAX_PARAM_VAL_LENGTH
_MAX_KEY = 250           # MAX_ENTITY_KEY_LENGTH
_PARAMS_PER_BATCH = 100  # MAX_PARAMS_TAGS_PER_BATCH
_METRICS_PER_BATCH = 1000
_BAD_CHARS = re.compile(r"[^A-Za-z0-9_.\- /]")


def sanitize_key(key: str) -> str:
    """A valid MLflow metric/param name for ``key``.

    MLflow allows alphanumerics, ``_ - . /``, space (and ``:`` off Windows) and
    rejects names that change under path normalisation (``a//b``, ``./a``,
    ``../a``, trailing ``/``). Other characters become ``_``.
    """
    key = _BAD_CHARS.sub("_", str(key))[:_MAX_KEY]   # cut first: a cut can leave a trailing '/' or '.'
    parts = [p if p not in (".", "..") else p.replace(".", "_") for p in key.split("/") if p]
    return "/".join(parts) or "_"


def default_tracking_uri(directory: Optional[str] = None) -> str:
    """``MLFLOW_TRACKING_URI`` if set, else ``sqlite:///<abs directory>/mlflow.db``
    (directory defaults to the current working directory)."""
    env = os.environ.get("MLFLOW_TRACKING_URI")
    if env:
        return env
    path = os.path.abspath(os.path.join(directory or os.getcwd(), "mlflow.db"))
    return "sqlite:///" + path


def _sqlite_dir(uri: str) -> Optional[str]:
    """Directory of the database file of a ``sqlite:///`` URI (None otherwise)."""
    if not uri.startswith("sqlite:///"):
        return None
    path = uri[len("sqlite:///"):]
    if not path or path.startswith(":memory:"):
        return None
    return os.path.dirname(os.path.abspath(path))


def ui_command(tracking_uri: str) -> str:
    """The shell command that opens the MLflow UI on ``tracking_uri``."""
    if tracking_uri.startswith(("http://", "https://", "databricks")):
        return f"open {tracking_uri}"
    return f"mlflow ui --backend-store-uri {tracking_uri}"


# -- params -------------------------------------------------------------------
def _param_value(value: Any) -> str:
    if isinstance(value, type) or callable(value) and not isinstance(value, (list, dict, tuple)):
        value = getattr(value, "__qualname__", None) or getattr(value, "__name__", None) or repr(value)
    text = str(value)
    return text if len(text) <= _MAX_PARAM_VALUE else text[:_MAX_PARAM_VALUE - 3] + "..."


def _same(a: Any, b: Any) -> bool:
    try:
        return bool(a == b)
    except Exception:  # arrays, exotic objects
        return repr(a) == repr(b)


def _public_flat(cfg: Any) -> Dict[str, Any]:
    """``cfg.to_dict()`` with nested dicts flattened ('/'), private keys renamed
    to their public property (``_train_batch_size_per_learner``) or dropped, and
    deprecated placeholders (``DEPRECATED_VALUE``) dropped."""
    try:
        from ray._common.deprecation import DEPRECATED_VALUE
    except ImportError:  # pragma: no cover - older Ray
        DEPRECATED_VALUE = -1

    out: Dict[str, Any] = {}
    for key, value in cfg.to_dict().items():
        if key.startswith("_"):
            if not isinstance(getattr(type(cfg), key[1:], None), property):
                continue
            key = key[1:]
        if isinstance(value, bool) is False and isinstance(value, int) and value == DEPRECATED_VALUE:
            continue
        if isinstance(value, Mapping) and value:
            for sub, v in flatten_dict(dict(value), delimiter="/").items():
                out[f"{key}/{sub}"] = v
        else:
            out[key] = value
    return out


def algorithm_hyperparameters(trainable_cls: Any, config: Mapping[str, Any]) -> Dict[str, Any]:
    """The hyperparameters worth recording for a trial of ``trainable_cls``.

    * rllib_fast algorithms (``FastAlgorithm`` subclasses):
      ``cls.get_default_config().update_from_dict(config).hyperparameters()``;
    * other RLlib ``Algorithm``s: keys of the algorithm's full config that differ
      from ``AlgorithmConfig()`` defaults, plus ``lr``, ``gamma``, ``env``;
    * anything else: the flattened scalar entries of ``config``.
    """
    config = {k: v for k, v in dict(config or {}).items() if k != "__trial_info__"}
    try:
        from ray.rllib.algorithms.algorithm import Algorithm
        from ray.rllib.algorithms.algorithm_config import AlgorithmConfig

        from ..core.algorithm import FastAlgorithm
    except ImportError:  # pragma: no cover
        Algorithm = FastAlgorithm = AlgorithmConfig = None  # type: ignore
    if isinstance(trainable_cls, type) and FastAlgorithm and issubclass(trainable_cls, FastAlgorithm):
        cfg = trainable_cls.get_default_config().update_from_dict(config)
        return dict(cfg.hyperparameters())
    if isinstance(trainable_cls, type) and Algorithm and issubclass(trainable_cls, Algorithm):
        cfg = trainable_cls.get_default_config().update_from_dict(config)
        full = _public_flat(cfg)
        base = _public_flat(AlgorithmConfig())
        out = {k: v for k, v in full.items() if k not in base or not _same(v, base[k])}
        for k in ("lr", "gamma", "env"):
            if k in full:
                out[k] = full[k]
        return out
    flat = flatten_dict(config, delimiter="/")
    return {k: v for k, v in flat.items() if isinstance(v, (str, numbers.Number, bool, type(None)))}


# -- metrics --------------------------------------------------------------------
def select_metrics(result: Mapping[str, Any], keys: Sequence[str] = DEFAULT_KEYS,
                   prefixes: Sequence[str] = DEFAULT_PREFIXES,
                   exclude: Sequence[str] = DEFAULT_EXCLUDE) -> Dict[str, float]:
    """Curated finite numeric metrics of a result, flattened with '/' and sanitized."""
    flat = flatten_dict({k: v for k, v in result.items() if k != "config"}, delimiter="/")
    out: Dict[str, float] = {}
    for key, value in flat.items():
        if not (key in keys or key.startswith(tuple(prefixes))):
            continue
        if any(x in key for x in exclude):
            continue
        if isinstance(value, bool) or not isinstance(value, numbers.Number):
            try:  # numpy / torch scalars
                import numpy as np

                if isinstance(value, np.generic) and np.issubdtype(value.dtype, np.number):
                    value = value.item()
                else:
                    continue
            except Exception:
                continue
        value = float(value)
        if math.isfinite(value):
            out[sanitize_key(key)] = value
    return out


def _chunks(items: List[Any], n: int) -> Iterable[List[Any]]:
    for i in range(0, len(items), n):
        yield items[i:i + n]


class MLflowRecorder(LoggerCallback):
    """Driver-side Tune logger: one MLflow run per trial (see module docstring).

    Args:
        tracking_uri: MLflow tracking URI; default ``MLFLOW_TRACKING_URI`` or
            ``sqlite:///<abs directory>/mlflow.db``.
        experiment_name: MLflow experiment (created if missing); default: each
            trial goes to the experiment named after its Tune experiment.
        directory: where the default sqlite store lives (default: cwd).
        artifact_location: artifact root for a newly created experiment
            (default for sqlite stores: ``<db dir>/mlartifacts``).
        tags: extra tags for every run.
        parent_run_name: nest trial runs under one parent run of this name
            (created once per MLflow experiment; reused when a sweep resumes).
        save_checkpoint: log the trial's latest checkpoint dir at trial end.
        save_plot: log a learning-curve PNG at trial end.
        metric_keys / metric_prefixes / exclude: the curated metric set.
    """

    def __init__(self, tracking_uri: Optional[str] = None, experiment_name: Optional[str] = None, *,
                 directory: Optional[str] = None, artifact_location: Optional[str] = None,
                 tags: Optional[Mapping[str, str]] = None, save_checkpoint: bool = True,
                 save_plot: bool = True, metric_keys: Sequence[str] = DEFAULT_KEYS,
                 metric_prefixes: Sequence[str] = DEFAULT_PREFIXES,
                 exclude: Sequence[str] = DEFAULT_EXCLUDE, parent_run_name: Optional[str] = None):
        self.parent_run_name = parent_run_name
        self.parent_run_ids: Dict[str, str] = {}     # MLflow experiment id -> parent run id
        self.tracking_uri = tracking_uri or default_tracking_uri(directory)
        self.experiment_name = experiment_name
        self.artifact_location = artifact_location
        self.tags = dict(tags or {})
        self.save_checkpoint = save_checkpoint
        self.save_plot = save_plot
        self.metric_keys = tuple(metric_keys)
        self.metric_prefixes = tuple(metric_prefixes)
        self.exclude = tuple(exclude)
        self.experiment_ids: Dict[str, str] = {}     # MLflow experiment name -> id
        self.run_ids: Dict[str, str] = {}            # trial_id -> run_id
        self.curves: Dict[str, List[Tuple[int, float]]] = {}
        self._checkpoints: Dict[str, str] = {}
        self._last_iter: Dict[str, float] = {}     # trial_id -> last training_iteration logged
        self._skip_until: Dict[str, float] = {}    # trial_id -> redone iterations <= this are not logged
        self._client = None
        self._opening: Optional[threading.Thread] = None
        self._open_error: Optional[BaseException] = None

    # -- plumbing -------------------------------------------------------------
    @property
    def client(self):
        if self._opening is not None:  # the store opened by setup() in the background
            self._opening.join()
            self._opening = None
            if self._open_error is not None:
                err, self._open_error = self._open_error, None
                raise err
        if self._client is None:
            self._client = self._open()
        return self._client

    def _open(self):
        """A client on the store, opened (a new sqlite store creates its tables here)."""
        from mlflow.tracking import MlflowClient

        client = MlflowClient(tracking_uri=self.tracking_uri)
        client.search_experiments(max_results=1)
        return client

    def _open_in_background(self) -> None:
        def run():
            try:
                self._client = self._open()
            except BaseException as err:  # noqa: BLE001 - raised on the first use, in the driver
                self._open_error = err

        self._open_error = None
        self._opening = threading.Thread(target=run, name="mlflow-open", daemon=True)
        self._opening.start()

    def _ensure_experiment(self, default_name: Optional[str] = None) -> str:
        """Id of the MLflow experiment (``experiment_name``, else
        ``default_name`` -- the trial's Tune experiment -- else "rllib_fast"),
        created on first use."""
        name = self.experiment_name or default_name or "rllib_fast"
        if name in self.experiment_ids:
            return self.experiment_ids[name]
        exp = self.client.get_experiment_by_name(name)
        if exp is not None:
            exp_id = exp.experiment_id
        else:
            location = self.artifact_location
            db_dir = _sqlite_dir(self.tracking_uri)
            if location is None and db_dir is not None:
                location = "file://" + os.path.join(db_dir, "mlartifacts")
            try:
                exp_id = self.client.create_experiment(name, artifact_location=location)
            except Exception:  # created concurrently by someone else
                exp = self.client.get_experiment_by_name(name)
                if exp is None:
                    raise
                exp_id = exp.experiment_id
        self.experiment_ids[name] = exp_id
        return exp_id

    @property
    def experiment_id(self) -> Optional[str]:
        """The (first) MLflow experiment id used so far."""
        return next(iter(self.experiment_ids.values()), None)

    def find_experiments(self, names: Iterable[str]) -> Dict[str, str]:
        """Record the ids of the existing MLflow experiments among ``names`` (for a
        summary printed by a driver whose recorder did not run: Tune's
        ``Tuner.restore`` uses the recorder pickled with the original Tuner)."""
        for name in names:
            if name not in self.experiment_ids:
                exp = self.client.get_experiment_by_name(name)
                if exp is not None:
                    self.experiment_ids[name] = exp.experiment_id
        return dict(self.experiment_ids)

    def setup(self, *args, **info):
        # Open the store while Ray starts the trials: a new sqlite store creates its tables
        # first (seconds), which would otherwise delay every trial's start. A bad tracking
        # URI still fails the run in the driver, at the first trial's start (the first use
        # of ``client`` raises the error the opening met), before any result is logged.
        if self._client is None and self._opening is None:
            self._open_in_background()

    # -- Tune hooks -------------------------------------------------------------
    def log_trial_start(self, trial) -> None:
        if trial.trial_id in self.run_ids:  # restarted/resumed trial: keep its run
            return
        # default MLflow experiment: the Tune experiment's name
        exp_id = self._ensure_experiment(self._tune_experiment(trial))
        existing = self._find_run(exp_id, f"tags.trial_id = '{trial.trial_id}'")
        if existing is not None:  # a resumed sweep (new driver): continue the trial's run
            self.run_ids[trial.trial_id] = existing
            self._resume_run(trial.trial_id, existing)
            if self.parent_run_name:
                self._parent_run(exp_id)  # so that on_experiment_end closes it
            return
        tags = {"trial_id": trial.trial_id, "trainable": str(trial.trainable_name), **self.tags}
        if self.parent_run_name:
            tags["mlflow.parentRunId"] = self._parent_run(exp_id)
        run = self.client.create_run(exp_id, run_name=str(trial), tags=tags)
        self.run_ids[trial.trial_id] = run.info.run_id
        try:
            cls = trial.get_trainable_cls()
        except Exception:
            cls = None
        try:
            params = algorithm_hyperparameters(cls, trial.config)
        except Exception as err:  # never fail a trial for logging
            logger.warning("MLflowRecorder: could not derive hyperparameters of %s: %s", trial, err)
            params = {}
        self.log_params(run.info.run_id, params)

    def log_params(self, run_id: str, params: Mapping[str, Any]) -> None:
        """All params in one ``log_batch`` request (chunks of 100 if more)."""
        from mlflow.entities import Param

        entries = {}
        for k, v in params.items():
            entries[sanitize_key(k)] = _param_value(v)
        items = [Param(k, v) for k, v in sorted(entries.items())]
        for chunk in _chunks(items, _PARAMS_PER_BATCH):
            self.client.log_batch(run_id, params=chunk)

    def log_trial_result(self, iteration: int, trial, result: Dict) -> None:
        run_id = self.run_ids.get(trial.trial_id)
        if run_id is None:
            self.log_trial_start(trial)
            run_id = self.run_ids[trial.trial_id]
        from mlflow.entities import Metric

        it = result.get("training_iteration")
        if isinstance(it, numbers.Number):
            skip = self._skip_until.get(trial.trial_id)
            if skip is not None and it <= skip:
                return  # an iteration redone after a restore: recorded already
            self._skip_until.pop(trial.trial_id, None)
            self._last_iter[trial.trial_id] = float(it)
        step = env_step(result)
        point = curve_point(result, RETURN_KEY)
        if point is not None:
            self.curves.setdefault(trial.trial_id, []).append(point)
        now = int(time.time() * 1000)
        values = select_metrics(result, self.metric_keys, self.metric_prefixes, self.exclude)
        metrics = [Metric(k, v, now, step) for k, v in sorted(values.items())]
        for chunk in _chunks(metrics, _METRICS_PER_BATCH):
            try:
                self.client.log_batch(run_id, metrics=chunk)
            except Exception as err:  # noqa: BLE001 - a recording failure must not end the experiment
                logger.warning("MLflow: metrics of trial %s at step %s not recorded: %s", trial.trial_id, step,
                               str(err).splitlines()[0] if str(err) else type(err).__name__)

    def log_trial_save(self, trial) -> None:
        path = self._checkpoint_dir(trial)
        if path:
            self._checkpoints[trial.trial_id] = path

    def log_trial_end(self, trial, failed: bool = False) -> None:
        run_id = self.run_ids.get(trial.trial_id)
        if run_id is None:
            return
        try:
            if self.save_checkpoint:
                path = self._checkpoint_dir(trial) or self._checkpoints.get(trial.trial_id)
                if path and os.path.isdir(path):
                    self.client.log_artifacts(run_id, path, artifact_path="checkpoint")
                    self.client.set_tag(run_id, "checkpoint_path", path)
            if self.save_plot:
                with tempfile.TemporaryDirectory() as tmp:
                    png = os.path.join(tmp, "learning_curve.png")
                    plot_curves({str(trial): self.curves.get(trial.trial_id, [])}, png,
                                title=f"{trial.trainable_name} {trial}")
                    self.client.log_artifact(run_id, png, artifact_path="plots")
        except Exception as err:  # artifacts are best effort; the status must still be set
            logger.warning("MLflowRecorder: artifact upload for %s failed: %s", trial, err)
        self.client.set_terminated(run_id, status="FAILED" if failed else "FINISHED")

    def on_trial_recover(self, iteration: int, trials, trial, **info) -> None:
        """A trial that failed and is restarted from its last checkpoint: its redone
        iterations are not logged again (see module docstring)."""
        super().on_trial_recover(iteration, trials, trial, **info)
        if trial.trial_id in self._last_iter:
            self._skip_until[trial.trial_id] = self._last_iter[trial.trial_id]

    def on_experiment_end(self, trials, **info) -> None:
        if self.parent_run_name:  # a resumed sweep whose trials had all finished still closes its parent
            for trial in trials:
                self._parent_run(self._ensure_experiment(self._tune_experiment(trial)))
        for run_id in self.parent_run_ids.values():
            failed = any(getattr(t, "status", "") == "ERROR" for t in trials)
            self.client.set_terminated(run_id, status="FAILED" if failed else "FINISHED")

    # -- helpers ---------------------------------------------------------------
    @staticmethod
    def _tune_experiment(trial) -> Optional[str]:
        return getattr(getattr(trial, "storage", None), "experiment_dir_name", None)

    def _resume_run(self, trial_id: str, run_id: str) -> None:
        """Pick up a run recorded by an earlier driver: the last ``training_iteration``
        it logged (results up to it are skipped) and its learning curve so far."""
        try:
            history = self.client.get_metric_history(run_id, "training_iteration")
            curve = self.client.get_metric_history(run_id, sanitize_key(RETURN_KEY))
        except Exception as err:  # never fail a trial for logging
            logger.warning("MLflowRecorder: could not read the history of run %s: %s", run_id, err)
            return
        if history:  # the last point logged (PBT may move training_iteration backwards)
            last = max(history, key=lambda m: (m.timestamp, m.value))
            self._last_iter[trial_id] = self._skip_until[trial_id] = float(last.value)
        if curve:
            self.curves[trial_id] = [(int(m.step), float(m.value)) for m in sorted(curve, key=lambda m: m.timestamp)]

    def _find_run(self, exp_id: str, filter_string: str) -> Optional[str]:
        try:
            runs = self.client.search_runs([exp_id], filter_string=filter_string, max_results=1)
        except Exception:  # a store without search: no run to pick up, start a new one
            return None
        return runs[0].info.run_id if runs else None

    def _parent_run(self, exp_id: str) -> str:
        """The sweep's parent run in ``exp_id`` (found again after a resume, else created)."""
        if exp_id not in self.parent_run_ids:
            found = self._find_run(exp_id, f"tags.rllib_fast_sweep = '{self.parent_run_name}'")
            if found is None:
                found = self.client.create_run(exp_id, run_name=self.parent_run_name,
                                               tags={"rllib_fast_sweep": self.parent_run_name, **self.tags}
                                               ).info.run_id
            self.parent_run_ids[exp_id] = found
        return self.parent_run_ids[exp_id]

    @staticmethod
    def _checkpoint_dir(trial) -> Optional[str]:
        """Local directory of the trial's latest checkpoint (None if none/remote)."""
        ckpt = getattr(trial, "checkpoint", None)
        if ckpt is None:
            return None
        path = getattr(ckpt, "path", None)
        if path and os.path.isdir(path):
            return path
        try:  # remote storage: materialise locally
            return ckpt.to_directory()
        except Exception:
            return None

    def __getstate__(self):  # the client holds a DB engine; never pickle it
        state = dict(self.__dict__)
        state.update(_client=None, _opening=None, _open_error=None)  # a copy opens its own
        return state
