"""``ResultGrid``: what ``Tuner.fit()`` returns, as ``ray.tune.ResultGrid``."""

from __future__ import annotations

import datetime
import math
import numbers
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Protocol

import pandas as pd

from trainwire.checkpoint import Checkpoint
from trainwire.client import TERMINAL_STATES
from trainwire.result import Result
from trainwire.tune.tune_config import default_metric_mode
from trainwire_core.errors import InvalidArgumentError, TrainingFailedError
from trainwire_core.structs import flatten_metrics, merge_dicts, struct_to_dict
from trainwire_core.v1 import common_pb2, coordinator_pb2, tune_pb2

_SCOPES = ("last", "all", "avg", "last-5-avg", "last-10-avg")
# Reading trials' histories at once: a 32-trial grid is one round trip of time, not 32.
_FETCH_THREADS = 8


# The keys Ray's Tune adds to every result (those trainwire knows; no pid, hostname or node_ip: a
# trial's workers are many processes, on many nodes).
AUTO_FILLED = (
    "timestamp",
    "done",
    "training_iteration",
    "trial_id",
    "date",
    "time_this_iter_s",
    "time_total_s",
    "time_since_restore",
    "iterations_since_restore",
    "checkpoint_dir_name",
)


def _auto_filled(
    trial_id: str, iteration: int, at: float, this_iter: float, total: float, since_restore: int | None = None
) -> dict[str, Any]:
    """Ray's auto-filled result keys for a trial's ``iteration``-th report, made at time ``at``.

    ``since_restore``: the report's number in the trial's current run (a trial that went on from a
    checkpoint, PBT's or a restore's, counts its iterations on from it).
    """
    return {
        "timestamp": int(at),
        "done": False,
        "training_iteration": iteration,
        "trial_id": trial_id,
        "date": datetime.datetime.fromtimestamp(at).strftime("%Y-%m-%d_%H-%M-%S"),
        "time_this_iter_s": this_iter,
        "time_total_s": total,
        # A trial's restarts resume its run: its time and iterations count from its start.
        "time_since_restore": total,
        "iterations_since_restore": iteration if since_restore is None else since_restore,
        "checkpoint_dir_name": None,  # the report's checkpoint id, when it has one
    }


class RunReader(Protocol):
    """What a ResultGrid reads trials' runs with (a ``CoordinatorClient``)."""

    def get_run(self, run_id: str) -> coordinator_pb2.Run: ...

    def watch_run(self, run_id: str) -> Iterator[coordinator_pb2.RunEvent]: ...


def _number(value: Any) -> float | None:
    """A reported value as a float ("nan" and "inf" too: reports keep them as strings), else None."""
    if isinstance(value, bool):
        return None
    if isinstance(value, numbers.Real):
        return float(value)
    if isinstance(value, str) and value.lower() in ("nan", "inf", "-inf", "infinity", "-infinity"):
        return float(value)
    return None


class ResultGrid:
    """The trials of a search and their Results, in trial order.

    Args:
        tune_run: The search as the coordinator reports it.
        client: Reads the trials' runs (GetRun, WatchRunBatched), once each and only when needed.
        checkpoint_cls: The class the trials' checkpoints are given as (the trainer's).
    """

    def __init__(
        self, tune_run: tune_pb2.TuneRun, client: RunReader, checkpoint_cls: type[Checkpoint] = Checkpoint
    ) -> None:
        self.tune_run = tune_run
        self._client = client
        self._checkpoint_cls = checkpoint_cls
        self._constants = struct_to_dict(tune_run.request.param_space)
        self._results: dict[int, Result] = {}
        self._histories: dict[int, list[dict[str, Any]]] = {}
        self._lock = threading.Lock()

    # --- trials --------------------------------------------------------------------
    @property
    def experiment_path(self) -> str:
        """The search's id: it lives in the coordinator, and ``Tuner.restore`` takes this."""
        return self.tune_run.tune_id

    @property
    def trials(self) -> list[tune_pb2.Trial]:
        return list(self.tune_run.trials)

    def trial_config(self, index: int) -> dict[str, Any]:
        """A trial's whole config: the param space's constants with its sampled values merged in."""
        config = merge_dicts(self._constants, struct_to_dict(self.tune_run.trials[index].config))
        if self.tune_run.request.function_trainable:  # the function's own config, as Ray shows it
            return config.get("train_loop_config", {})
        return config

    def __len__(self) -> int:
        return len(self.tune_run.trials)

    def __getitem__(self, i: int) -> Result:
        """The i'th trial's Result."""
        index = range(len(self))[i]
        self._fetch([index])
        return self._results[index]

    def __iter__(self) -> Iterator[Result]:
        self._fetch(range(len(self)))
        return (self._results[i] for i in range(len(self)))

    def _fetch(self, indices: Any) -> None:
        missing = [i for i in indices if i not in self._results]
        if len(missing) > 1:
            with ThreadPoolExecutor(min(_FETCH_THREADS, len(missing))) as pool:
                list(pool.map(self._load, missing))
        elif missing:
            self._load(missing[0])

    def _load(self, index: int) -> None:
        trial = self.tune_run.trials[index]
        history: list[dict[str, Any]] = []
        if trial.run_id:
            run = self._client.get_run(trial.run_id)
            if run.state in TERMINAL_STATES:  # a run still going would keep the stream open
                started = run.created_at.ToNanoseconds() / 1e9
                last = started
                for event in self._client.watch_run(trial.run_id):
                    kind = event.WhichOneof("kind")
                    at = event.time.ToNanoseconds() / 1e9 if event.HasField("time") else last
                    if kind == "metrics":
                        row = struct_to_dict(event.metrics.metrics)
                        n = len(history) + 1
                        auto = _auto_filled(
                            trial.run_id, trial.iteration_offset + n, at, at - last, at - started, since_restore=n
                        )
                        history.append({**auto, **row})  # a loop's own value of a key wins, as in Ray
                        last = at
                    elif kind == "checkpoint" and history:  # committed after its report's metrics
                        history[-1]["checkpoint_dir_name"] = event.checkpoint.checkpoint_id
                    elif kind == "state_change" and event.state_change.state == common_pb2.RUNNING and not history:
                        started = last = at  # Ray counts a trial's time from its start, not its wait
                    elif kind == "state_change" and event.state_change.state in TERMINAL_STATES:
                        break
                if history:
                    history[-1]["done"] = True
            result = Result.from_run(run, history, self._checkpoint_cls)
            if history:  # Ray's Result.metrics has the auto-filled keys too
                result.metrics = {**{k: v for k, v in history[-1].items() if k in AUTO_FILLED}, **result.metrics}
        else:  # not started yet
            result = Result(
                metrics=struct_to_dict(trial.last_result),
                checkpoint=None,
                error=None,
                path="",
                metrics_dataframe=pd.DataFrame(),
                state=common_pb2.RunState.Name(trial.state),
            )
        result.config = self.trial_config(index)
        with self._lock:
            self._results[index], self._histories[index] = result, history

    def _history(self, index: int) -> list[dict[str, Any]]:
        self._fetch([index])
        return [flatten_metrics(row) for row in self._histories[index]]

    # --- errors ----------------------------------------------------------------------
    @property
    def errors(self) -> list[TrainingFailedError]:
        """One error per FAILED trial, its Result attached (``.result``)."""
        failed = [t.index for t in self.tune_run.trials if t.state == common_pb2.FAILED]
        self._fetch(failed)
        out = []
        for i in failed:
            result, trial = self._results[i], self.tune_run.trials[i]
            detail = str(result.error) if result.error else trial.state_reason
            out.append(TrainingFailedError(f"trial {i} (run {trial.run_id or '-'}) failed: {detail}", result))
        return out

    @property
    def num_errors(self) -> int:
        """Trials that FAILED."""
        return sum(t.state == common_pb2.FAILED for t in self.tune_run.trials)

    @property
    def num_terminated(self) -> int:
        """Trials that ended and did not fail (finished, or stopped early by the scheduler)."""
        return sum(t.state in TERMINAL_STATES and t.state != common_pb2.FAILED for t in self.tune_run.trials)

    # --- the best trial ------------------------------------------------------------------
    def _metric_mode(self, metric: str | None, mode: str | None) -> tuple[str, str]:
        default_metric, default_mode = default_metric_mode(self.tune_run.request.tune_config)
        metric, mode = metric or default_metric, mode or default_mode
        if not metric:
            raise InvalidArgumentError(
                "no metric: pass metric= or set TuneConfig(metric=...) on the Tuner", field="metric"
            )
        if mode not in ("min", "max"):
            raise InvalidArgumentError(
                f"mode must be 'min' or 'max' (pass mode= or set TuneConfig(mode=...)), got {mode!r}", field="mode"
            )
        return metric, mode

    def _score(self, index: int, metric: str, mode: str, scope: str, keep_nan: bool) -> float | None:
        trial = self.tune_run.trials[index]
        if scope == "last":
            values = [_number(flatten_metrics(struct_to_dict(trial.last_result)).get(metric))]
        elif scope == "all" and (metric, mode) == default_metric_mode(self.tune_run.request.tune_config):
            values = [trial.best_metric if trial.HasField("best_metric") else None]
        else:
            values = [_number(row.get(metric)) for row in self._history(index)]
            if scope != "all":
                size = {"avg": len(values), "last-5-avg": 5, "last-10-avg": 10}[scope]
                window = [v for v in values[-size:] if v is not None]
                values = [sum(window) / len(window)] if window else []
        kept = [v for v in values if v is not None and (keep_nan or math.isfinite(v))]
        if not kept:
            return None
        return min(kept) if mode == "min" else max(kept)

    def get_best_result(
        self,
        metric: str | None = None,
        mode: str | None = None,
        scope: str = "last",
        filter_nan_and_inf: bool = True,
    ) -> Result:
        """The Result of the best trial.

        Args:
            metric: The metric to compare (nested ones as "a/b"); default: the TuneConfig's.
            mode: "min" or "max"; default: the TuneConfig's.
            scope: "last" (each trial's last report), "all" (each trial's best report),
                "avg", "last-5-avg" or "last-10-avg" (averages of its reports).
            filter_nan_and_inf: Never pick a trial whose value is NaN or infinite.

        Raises:
            InvalidArgumentError: No metric or mode to compare by, or an unknown scope.
            RuntimeError: No trial reported the metric.
        """
        if len(self) == 1:
            return self[0]
        return self[self.best_index(metric, mode, scope, filter_nan_and_inf)]

    def best_index(
        self, metric: str | None = None, mode: str | None = None, scope: str = "last", filter_nan_and_inf: bool = True
    ) -> int:
        """The index of the best trial (``get_best_result``'s choice; the same arguments and errors)."""
        if scope not in _SCOPES:
            raise InvalidArgumentError(f"scope must be one of {', '.join(_SCOPES)}, got {scope!r}", field="scope")
        metric, mode = self._metric_mode(metric, mode)
        if scope not in ("last", "all") or (metric, mode) != default_metric_mode(self.tune_run.request.tune_config):
            self._fetch(range(len(self)))  # every trial's history, at once
        best, best_score = None, None
        for index in range(len(self)):
            score = self._score(index, metric, mode, scope, not filter_nan_and_inf)
            if score is None:
                continue
            if (
                best_score is None
                or (math.isnan(best_score) and not math.isnan(score))
                or (score < best_score if mode == "min" else score > best_score)
            ):
                best, best_score = index, score
        if best is None:
            raise RuntimeError(
                f"no trial reported {metric!r}"
                + (" as a finite number (filter_nan_and_inf=False keeps NaN and inf)" if filter_nan_and_inf else "")
            )
        return best

    def history(self, index: int) -> list[dict[str, Any]]:
        """A trial's reports in order, flat (nested metrics as "a/b"), with Ray's auto-filled keys."""
        return self._history(index)

    def get_dataframe(self, filter_metric: str | None = None, filter_mode: str | None = None) -> pd.DataFrame:
        """One row per trial, as Ray's: its last result (nested metrics as "a/b") with Ray's
        auto-filled keys (``training_iteration``, ``time_total_s``, ``time_this_iter_s``,
        ``timestamp``, ``date``, ``done``, ``trial_id``: its run id, ...), ``config/<path>``
        columns, ``logdir`` (the run's path in the store) and trainwire's ``state``.

        Args:
            filter_metric: With ``filter_mode``, each trial's row is its report with the best value of this metric.
            filter_mode: "min" or "max".
        """
        if (filter_metric is None) != (filter_mode is None):
            raise InvalidArgumentError("give both filter_metric and filter_mode, or neither", field="filter_mode")
        if filter_mode is not None and filter_mode not in ("min", "max"):
            raise InvalidArgumentError(f"filter_mode must be 'min' or 'max', got {filter_mode!r}", field="filter_mode")
        self._fetch(range(len(self)))  # each trial's results, for the auto-filled keys
        rows = []
        for index, trial in enumerate(self.tune_run.trials):
            history = self._history(index)
            metrics = history[-1] if history else flatten_metrics(struct_to_dict(trial.last_result))
            if filter_metric is not None:
                reports = [r for r in self._history(index) if _number(r.get(filter_metric)) is not None]
                if reports:
                    pick = min if filter_mode == "min" else max
                    metrics = pick(reports, key=lambda r: _number(r[filter_metric]))
            config = flatten_metrics({"config": self.trial_config(index)})
            rows.append(
                {
                    **metrics,
                    **config,
                    "trial_id": trial.run_id,
                    "logdir": self._results[index].path,
                    "state": common_pb2.RunState.Name(trial.state),
                }
            )
        return pd.DataFrame(rows)

    def __repr__(self) -> str:
        state = common_pb2.RunState.Name(self.tune_run.state)
        return (
            f"ResultGrid<{self.tune_run.name or self.tune_run.tune_id}: {len(self)} trials, {state}, "
            f"{self.num_errors} failed>"
        )
