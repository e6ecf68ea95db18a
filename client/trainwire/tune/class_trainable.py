"""``tune.Trainable``, Ray Tune's class API, and the loop that runs one as a trial.

A class trainable runs as a function trainable does: a one-worker run whose loop is
:func:`run_trainable`. That loop builds the class with the trial's config (``setup``), calls
``train()`` (``step()`` plus Ray's auto-filled keys) and reports each result, saves a checkpoint
(``save_checkpoint``) every ``CheckpointConfig.checkpoint_frequency`` iterations, when a result
asks for one (``should_checkpoint``) and at the end (``checkpoint_at_end``), and, when the run
restarts from a checkpoint, restores it (``load_checkpoint``) so ``training_iteration`` carries on.
The trial ends when a result says ``done``, when the search's ``stop`` dict is met, or when the
search stops it (a stopper, a scheduler).
"""

from __future__ import annotations

import copy
import datetime
import json
import os
import pickle
import platform
import shutil
import socket
import tempfile
import time
from dataclasses import dataclass, field
from typing import Any

from trainwire.checkpoint import Checkpoint

__all__ = ["Trainable", "TrainableOptions", "run_trainable"]

# Ray's file for a checkpoint that save_checkpoint returned as a dict (pickled), and trainwire's
# file for the counters a restore carries on from (Ray keeps them in the checkpoint's result).
DICT_CHECKPOINT_FILE = "dict_checkpoint.pkl"
STATE_FILE = ".trainable_state.json"


def _session_context() -> Any:
    """This worker's TrainContext inside a trial, else None (a Trainable built by hand)."""
    from trainwire.train.session import get_session

    try:
        return get_session().context
    except Exception:  # no session: not inside a trainwire run
        return None


def _local_ip() -> str:
    try:
        return socket.gethostbyname(socket.gethostname())
    except OSError:
        return "127.0.0.1"


class Trainable:
    """A class trainable, as ``ray.tune.Trainable``: override ``setup``, ``step``,
    ``save_checkpoint`` and ``load_checkpoint`` (and ``cleanup``, ``reset_config``).

    ``Tuner(MyTrainable, param_space=...)`` and ``tune.run(MyTrainable, ...)`` run each trial as
    a one-worker run (the class travels pickled, as a function trainable does: a submit-code token).

    Args:
        config: The trial's config; ``setup`` gets a copy.
        storage: Accepted for Ray's signature (a trial's checkpoints go to the run's store).
    """

    def __init__(self, config: dict[str, Any] | None = None, storage: Any = None) -> None:
        self.config = config or {}
        self._storage = storage
        self._context = _session_context()
        self._logdir: str | None = None
        self._iteration = 0
        self._time_total = 0.0
        self._timesteps_total: float | None = None
        self._episodes_total: float | None = None
        self._time_since_restore = 0.0
        self._timesteps_since_restore = 0
        self._iterations_since_restore = 0
        self._last_result: dict[str, Any] | None = None
        self._restored = False
        self._start_time = time.time()
        self._local_ip = _local_ip()
        self.setup(copy.deepcopy(self.config))

    # --- resources ----------------------------------------------------------------------
    @classmethod
    def default_resource_request(cls, config: dict[str, Any]) -> Any:
        """The resources a trial of this class needs (None: one CPU, or ``with_resources``'s)."""
        return None

    @classmethod
    def resource_help(cls, config: dict[str, Any]) -> str:
        """How to set this trainable's resources (shown when they do not fit)."""
        return ""

    def get_current_ip_pid(self) -> tuple[str, int]:
        return self._local_ip, os.getpid()

    def is_actor(self) -> bool:
        """Whether this runs inside a trial (a worker actor of a trainwire run)."""
        return self._context is not None

    # --- training -----------------------------------------------------------------------
    def get_auto_filled_metrics(
        self,
        now: datetime.datetime | None = None,
        time_this_iter: float | None = None,
        timestamp: int | None = None,
        debug_metrics_only: bool = False,
    ) -> dict[str, Any]:
        """Ray's auto-filled result keys (``trial_id``, ``date``, ``timestamp``, times, ``pid``, ...)."""
        if now is None:
            now = datetime.datetime.today()
        filled: dict[str, Any] = {
            "trial_id": self.trial_id,
            "date": now.strftime("%Y-%m-%d_%H-%M-%S"),
            "timestamp": timestamp if timestamp else int(time.mktime(now.timetuple())),
            "time_this_iter_s": time_this_iter,
            "time_total_s": self._time_total,
            "pid": os.getpid(),
            "hostname": platform.node(),
            "node_ip": self._local_ip,
            "config": self.config,
            "time_since_restore": self._time_since_restore,
            "iterations_since_restore": self._iterations_since_restore,
        }
        if self._timesteps_since_restore:
            filled["timesteps_since_restore"] = self._timesteps_since_restore
        if debug_metrics_only:
            keep = ("time_this_iter_s", "time_total_s", "time_since_restore", "iterations_since_restore")
            filled = {k: v for k, v in filled.items() if k in keep}
        return filled

    def train(self) -> dict[str, Any]:
        """One iteration: ``step()``, then Ray's auto-filled keys (``training_iteration``, ...)."""
        start = time.time()
        result = self.step()
        if not isinstance(result, dict):
            raise TypeError(f"step() needs to return a dict, got {type(result).__name__}")
        if "__duplicate__" in result:
            return result
        result = dict(result)
        self._iteration += 1
        self._iterations_since_restore += 1
        this_iter = result.get("time_this_iter_s")
        this_iter = float(this_iter) if this_iter is not None else time.time() - start
        self._time_total += this_iter
        self._time_since_restore += this_iter
        result.setdefault("done", False)
        if result.get("timesteps_this_iter") is not None:
            self._timesteps_total = (self._timesteps_total or 0) + result["timesteps_this_iter"]
            self._timesteps_since_restore += result["timesteps_this_iter"]
        if result.get("episodes_this_iter") is not None:
            self._episodes_total = (self._episodes_total or 0) + result["episodes_this_iter"]
        if self._timesteps_total is not None:
            result.setdefault("timesteps_total", self._timesteps_total)
        if self._episodes_total is not None:
            result.setdefault("episodes_total", self._episodes_total)
        result.setdefault("training_iteration", self._iteration)
        result.update(
            self.get_auto_filled_metrics(
                now=datetime.datetime.today(), time_this_iter=this_iter, timestamp=result.get("timestamp")
            )
        )
        self.log_result(result)
        self._last_result = result
        return result

    def train_buffered(self, buffer_time_s: float, max_buffer_length: int = 1000) -> list[dict[str, Any]]:
        """Results of ``train()`` for up to ``buffer_time_s`` seconds (at least one), until one is done."""
        results: list[dict[str, Any]] = []
        deadline = time.monotonic() + buffer_time_s
        while len(results) < max_buffer_length:
            results.append(self.train())
            if results[-1].get("done") or time.monotonic() >= deadline:
                break
        return results

    def get_state(self) -> dict[str, Any]:
        return {
            "iteration": self._iteration,
            "timesteps_total": self._timesteps_total,
            "time_total": self._time_total,
            "episodes_total": self._episodes_total,
            "last_result": self._last_result,
        }

    # --- checkpoints --------------------------------------------------------------------
    def save(self, checkpoint_dir: str | None = None) -> Checkpoint:
        """Saves the trainable (``save_checkpoint``) into ``checkpoint_dir`` (else a new temporary directory).

        Returns:
            The checkpoint, which ``restore`` takes; it also holds the iteration and times.
        """
        checkpoint_dir = checkpoint_dir or tempfile.mkdtemp(prefix="trainable-checkpoint-")
        os.makedirs(checkpoint_dir, exist_ok=True)
        saved = self.save_checkpoint(checkpoint_dir)
        if isinstance(saved, dict):
            with open(os.path.join(checkpoint_dir, DICT_CHECKPOINT_FILE), "wb") as f:
                pickle.dump(saved, f)
        elif isinstance(saved, str) and os.path.normpath(saved) != os.path.normpath(checkpoint_dir):
            raise ValueError(
                "The returned checkpoint path from `save_checkpoint` must be None or the same as the provided "
                f"path argument.Got {saved} != {checkpoint_dir}"
            )
        state = {
            "training_iteration": self._iteration,
            "time_total_s": self._time_total,
            "timesteps_total": self._timesteps_total,
            "episodes_total": self._episodes_total,
        }
        with open(os.path.join(checkpoint_dir, STATE_FILE), "w") as f:
            json.dump(state, f)
        return Checkpoint.from_directory(checkpoint_dir)

    def restore(self, checkpoint_path: str | Checkpoint) -> None:
        """Restores a checkpoint ``save`` made (a directory or a Checkpoint): ``load_checkpoint`` and the counters."""
        checkpoint = Checkpoint.from_directory(checkpoint_path) if isinstance(checkpoint_path, str) else checkpoint_path
        with checkpoint.as_directory() as directory:
            state_file = os.path.join(directory, STATE_FILE)
            state: dict[str, Any] = {}
            if os.path.exists(state_file):
                with open(state_file) as f:
                    state = json.load(f)
            self._iteration = state.get("training_iteration", 0)
            self._time_total = state.get("time_total_s", 0.0)
            self._timesteps_total = state.get("timesteps_total")
            self._episodes_total = state.get("episodes_total")
            self._time_since_restore = 0.0
            self._timesteps_since_restore = 0
            self._iterations_since_restore = 0
            dict_file = os.path.join(directory, DICT_CHECKPOINT_FILE)
            if os.path.exists(dict_file):
                with open(dict_file, "rb") as f:
                    self.load_checkpoint(pickle.load(f))
            else:
                self.load_checkpoint(directory)
        self._restored = True

    def export_model(self, export_formats: list[str] | str, export_dir: str | None = None) -> dict[str, Any]:
        """Exports the model in the given formats (``_export_model``) into ``export_dir`` (default: logdir)."""
        if isinstance(export_formats, str):
            export_formats = [export_formats]
        return self._export_model(export_formats, export_dir or self.logdir)

    def reset(self, new_config: dict[str, Any], storage: Any = None) -> bool:
        """Gives the trainable a new config (``reset_config``); on success its counters start again."""
        self.config = new_config
        self._storage = storage
        if not self.reset_config(new_config):
            return False
        self._iteration = 0
        self._time_total = 0.0
        self._timesteps_total = None
        self._episodes_total = None
        self._time_since_restore = 0.0
        self._timesteps_since_restore = 0
        self._iterations_since_restore = 0
        self._restored = False
        return True

    def stop(self) -> None:
        """Releases the trainable's resources (``cleanup``)."""
        self.cleanup()

    # --- where it runs ------------------------------------------------------------------
    @property
    def logdir(self) -> str:
        """A local directory for this trial's outputs (the worker's trial directory inside a trial)."""
        if self._logdir is None:
            trial_dir = getattr(self._context, "trial_dir", "") if self._context is not None else ""
            self._logdir = trial_dir or tempfile.mkdtemp(prefix=f"{self.trial_name}_")
            os.makedirs(self._logdir, exist_ok=True)
        return self._logdir

    @property
    def trial_name(self) -> str:
        """The trial's name (its run's name; "default" outside a trial)."""
        return self._context.run_name if self._context is not None else "default"

    @property
    def trial_id(self) -> str:
        """The trial's id (its run id; "default" outside a trial)."""
        return self._context.run_id if self._context is not None else "default"

    @property
    def trial_resources(self) -> Any:
        """The trial's resources (None: not known to the trainable in trainwire)."""
        return None

    @property
    def iteration(self) -> int:
        """Iterations trained so far (``train()`` calls), restores included."""
        return self._iteration

    @property
    def training_iteration(self) -> int:
        """The same as ``iteration``."""
        return self._iteration

    def get_config(self) -> dict[str, Any]:
        return self.config

    # --- what subclasses override ------------------------------------------------------
    def step(self) -> dict[str, Any]:
        """One iteration of training; returns its result (``done``: the trial ends; ``should_checkpoint``)."""
        raise NotImplementedError

    def save_checkpoint(self, checkpoint_dir: str) -> dict[str, Any] | None:
        """Saves state into ``checkpoint_dir`` (or returns a dict, pickled for you)."""
        raise NotImplementedError

    def load_checkpoint(self, checkpoint: dict[str, Any] | str | None) -> None:
        """Loads what ``save_checkpoint`` saved: its dict, or the checkpoint's directory."""
        raise NotImplementedError

    def reset_config(self, new_config: dict[str, Any]) -> bool:
        """Takes a new config in place (True) or not (False, the default)."""
        return False

    def setup(self, config: dict[str, Any]) -> None:
        """Builds the trainable's state from its config (a copy of ``self.config``)."""

    def log_result(self, result: dict[str, Any]) -> None:
        """Called with each result on the worker."""

    def cleanup(self) -> None:
        """Releases what ``setup`` took."""

    def _export_model(self, export_formats: list[str], export_dir: str) -> dict[str, Any]:
        return {}

    def _implements_method(self, key: str) -> bool:
        return hasattr(self, key) and callable(getattr(self, key))


@dataclass
class TrainableOptions:
    """How a class trainable's loop checkpoints and when it ends (from the search's RunConfig).

    Attributes:
        checkpoint_frequency: Save every N iterations (0: never by count).
        checkpoint_at_end: Save when the trial ends by ``done`` or the ``stop`` dict.
        stop: The search's stop dict; the loop checks it too, so the last checkpoint goes with the last result.
    """

    checkpoint_frequency: int = 0
    checkpoint_at_end: bool = False
    stop: dict[str, float] = field(default_factory=dict)


# Keys of Ray's auto-filled results that stay on the worker: the config is the trial's already,
# and pid / hostname / node_ip are one worker's (ResultGrid leaves them out as well).
_NOT_REPORTED = ("config", "pid", "hostname", "node_ip", "should_checkpoint", "__duplicate__")


def _stop_reached(stop: dict[str, float], result: dict[str, Any]) -> bool:
    for key, threshold in stop.items():
        value = result.get(key)
        if isinstance(value, int | float) and not isinstance(value, bool) and value >= threshold:
            return True
    return False


def run_trainable(cls: type[Trainable], config: dict[str, Any], options: TrainableOptions) -> None:
    """A class trainable's trial: restore, then train, report and checkpoint until it ends."""
    from trainwire import train

    trainable = cls(config)
    try:
        latest = train.get_checkpoint()
        if latest is not None:  # the run restarted: carry on from its latest checkpoint
            trainable.restore(latest)
        while True:
            result = trainable.train()
            if "__duplicate__" in result:
                continue
            iteration = trainable.iteration
            done = bool(result.get("done")) or _stop_reached(options.stop, result)
            save = bool(result.get("should_checkpoint")) or (
                options.checkpoint_frequency > 0 and iteration % options.checkpoint_frequency == 0
            )
            save = save or (done and options.checkpoint_at_end)
            metrics = {k: v for k, v in result.items() if k not in _NOT_REPORTED}
            if save:
                directory = tempfile.mkdtemp(prefix="trainable-checkpoint-")
                try:
                    train.report(metrics, checkpoint=trainable.save(directory))
                finally:  # uploaded when report returns
                    shutil.rmtree(directory, ignore_errors=True)
            else:
                train.report(metrics)
            if done:
                return
    finally:
        trainable.stop()
