"""``tune.Callback``, as ``ray.tune.Callback``: hooks called in this program from the search's event stream.

The search runs in the coordinator; ``Tuner.fit()`` follows it (``WatchTune``) and calls the
callbacks given in ``RunConfig(callbacks=[...])`` as each change arrives, the way trainwire's
``RunCallback`` objects are fed by a run's event stream. The stream sends the search each time it
changes, at most every quarter second: a trial that reports faster is given to
``on_trial_result`` with its newest result (``training_iteration`` tells how many came).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from trainwire_core.structs import merge_dicts, struct_to_dict
from trainwire_core.v1 import common_pb2, tune_pb2

__all__ = ["Callback", "Trial"]

# Ray's trial statuses, by trainwire's run states.
_STATUS = {
    common_pb2.PENDING: "PENDING",
    common_pb2.STARTING: "PENDING",
    common_pb2.RUNNING: "RUNNING",
    common_pb2.RESTARTING: "RUNNING",
    common_pb2.SUCCEEDED: "TERMINATED",
    common_pb2.CANCELLED: "TERMINATED",
    common_pb2.FAILED: "ERROR",
}


@dataclass
class Trial:
    """A trial as callbacks see it (the parts of ``ray.tune.experiment.Trial`` they read).

    Attributes:
        trial_id: The trial's run id ("" until it starts; then as ``ResultGrid``'s ``trial_id``).
        index: 0-based, in the order trials were created.
        config: The trial's config (a function trainable's own config, as Ray shows it).
        status: "PENDING", "RUNNING", "TERMINATED" or "ERROR", as Ray's.
        last_result: Its newest result, ``training_iteration`` included.
        error_msg: Why it failed (ERROR) or was stopped ("" otherwise).
    """

    trial_id: str
    index: int
    config: dict[str, Any]
    status: str
    last_result: dict[str, Any] = field(default_factory=dict)
    error_msg: str = ""
    # Set on the trials of an ExperimentAnalysis (tune.run's): the trial's latest checkpoint and
    # its run's path in the store.
    checkpoint: Any = None
    path: str = ""
    metric_analysis: dict[str, dict[str, float]] = field(default_factory=dict)

    @property
    def local_path(self) -> str:
        """The same as ``path`` (a trial's files are in the store, not on this machine)."""
        return self.path

    @property
    def evaluated_params(self) -> dict[str, Any]:
        """The trial's config, flat ("a/b" keys)."""
        from trainwire_core.structs import flatten_metrics

        return flatten_metrics(self.config)

    def __str__(self) -> str:
        return self.trial_id or f"trial_{self.index:05d}"


class Callback:
    """Base of Tune callbacks (``ray.tune.Callback``): override the hooks you need."""

    def setup(self, stop: Any = None, num_samples: int | None = None, total_num_samples: int | None = None, **info):
        """Called once, before the search is followed."""

    def on_step_begin(self, iteration: int, trials: list[Trial], **info):
        """Called when a change of the search arrives, before the trial hooks."""

    def on_step_end(self, iteration: int, trials: list[Trial], **info):
        """Called after the trial hooks of a change."""

    def on_trial_start(self, iteration: int, trials: list[Trial], trial: Trial, **info):
        """Called when a trial's run has started."""

    def on_trial_restore(self, iteration: int, trials: list[Trial], trial: Trial, **info):
        """Ray's hook for a trial restored from a checkpoint; trainwire restarts runs itself (not called)."""

    def on_trial_save(self, iteration: int, trials: list[Trial], trial: Trial, **info):
        """Ray's hook for a trial's save; see ``on_checkpoint`` (not called)."""

    def on_trial_result(self, iteration: int, trials: list[Trial], trial: Trial, result: dict, **info):
        """Called with a trial's newest result."""

    def on_trial_complete(self, iteration: int, trials: list[Trial], trial: Trial, **info):
        """Called when a trial has ended without error (finished, or stopped)."""

    def on_trial_recover(self, iteration: int, trials: list[Trial], trial: Trial, **info):
        """Ray's hook for a trial that failed and will be retried (a run's restarts are its own: not called)."""

    def on_trial_error(self, iteration: int, trials: list[Trial], trial: Trial, **info):
        """Called when a trial has failed."""

    def on_checkpoint(self, iteration: int, trials: list[Trial], trial: Trial, checkpoint: Any, **info):
        """Ray's hook for a trial's checkpoint (not called: ``ResultGrid`` gives each trial's checkpoint)."""

    def on_experiment_end(self, trials: list[Trial], **info):
        """Called once the search has ended."""

    def get_state(self) -> dict | None:
        """The callback's state, as Ray's (None: nothing to keep)."""
        return None

    def set_state(self, state: dict):
        """Restores the state ``get_state`` gave."""


def _trials(tune: tune_pb2.TuneRun) -> list[Trial]:
    constants = struct_to_dict(tune.request.param_space)
    out = []
    for t in tune.trials:
        config = merge_dicts(constants, struct_to_dict(t.config))
        if tune.request.function_trainable:
            config = config.get("train_loop_config", {})
        result = struct_to_dict(t.last_result)
        if t.run_id and result:
            result.setdefault("trial_id", t.run_id)
            result.setdefault("config", config)
        error = t.state_reason if t.state in (common_pb2.FAILED, common_pb2.CANCELLED) or t.early_stopped else ""
        out.append(Trial(t.run_id, t.index, config, _STATUS.get(t.state, "PENDING"), result, error))
    return out


class CallbackFeed:
    """Calls callbacks from the search's successive snapshots (what WatchTune streams).

    Args:
        callbacks: The Tune callbacks of the Tuner's RunConfig.
    """

    def __init__(self, callbacks: list[Callback]) -> None:
        self.callbacks = callbacks
        self.iteration = 0
        self.previous: tune_pb2.TuneRun | None = None

    def _call(self, hook: str, **kwargs: Any) -> None:
        for callback in self.callbacks:
            getattr(callback, hook)(**kwargs)

    def setup(self, stop: Any, num_samples: int, total: int | None) -> None:
        self._call("setup", stop=stop, num_samples=num_samples, total_num_samples=total)

    def feed(self, tune: tune_pb2.TuneRun) -> None:
        """Calls the hooks for what changed since the previous snapshot."""
        if not self.callbacks:
            return
        self.iteration += 1
        before = {t.index: t for t in self.previous.trials} if self.previous is not None else {}
        trials = _trials(tune)
        info = {"iteration": self.iteration, "trials": trials}
        self._call("on_step_begin", **info)
        for proto, trial in zip(tune.trials, trials, strict=True):
            old = before.get(proto.index)
            if proto.run_id and (old is None or not old.run_id):
                self._call("on_trial_start", trial=trial, **info)
            if proto.num_reports > (old.num_reports if old is not None else 0):
                self._call("on_trial_result", trial=trial, result=trial.last_result, **info)
            ended = proto.state in (common_pb2.SUCCEEDED, common_pb2.FAILED, common_pb2.CANCELLED)
            if ended and (old is None or old.state != proto.state):
                self._call(
                    "on_trial_error" if proto.state == common_pb2.FAILED else "on_trial_complete", trial=trial, **info
                )
        self._call("on_step_end", **info)
        self.previous = tune

    def end(self, tune: tune_pb2.TuneRun) -> None:
        if self.callbacks:
            self._call("on_experiment_end", trials=_trials(tune))
