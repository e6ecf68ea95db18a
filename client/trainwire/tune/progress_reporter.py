"""Progress reporters, as ``ray.tune.CLIReporter`` / ``JupyterNotebookReporter``: Ray's status table.

``tune.run(..., progress_reporter=CLIReporter(...))`` feeds the reporter the search's trials
each time the coordinator's stream says it changed; it prints, at most every
``max_report_frequency`` seconds and at the end, the "== Status ==" block Ray prints: the time,
the best trial, the trial counts and a psql-style table (trial, status, location, parameters,
metrics), then the failed trials.
"""

from __future__ import annotations

import collections
import datetime
import math
import time
from typing import Any

from trainwire.tune.callback import Callback, Trial
from trainwire_core.structs import flatten_metrics

__all__ = ["CLIReporter", "JupyterNotebookReporter", "ProgressReporter", "ReporterCallback"]

# Keys Tune fills in itself: not inferred as the user's metrics (Ray's AUTO_RESULT_KEYS).
_AUTO = {
    "training_iteration", "time_this_iter_s", "timesteps_this_iter", "time_total_s", "timesteps_total",
    "episodes_total", "timestamp", "date", "done", "trial_id", "pid", "hostname", "node_ip", "config",
    "time_since_restore", "timesteps_since_restore", "iterations_since_restore", "experiment_id",
    "checkpoint_dir_name", "should_checkpoint", "episodes_this_iter",
}  # fmt: skip


class ProgressReporter:
    """The reporter interface (``ray.tune.ProgressReporter``): ``should_report`` then ``report``."""

    def setup(
        self,
        start_time: float | None = None,
        total_samples: int | None = None,
        metric: str | None = None,
        mode: str | None = None,
        **kwargs: Any,
    ) -> None:
        """Called once before the search's first report."""

    def should_report(self, trials: list[Trial], done: bool = False) -> bool:
        """Whether to report now."""
        raise NotImplementedError

    def report(self, trials: list[Trial], done: bool, *sys_info: str) -> None:
        """Reports the trials' progress."""
        raise NotImplementedError


def _cell(value: Any, width: int) -> str:
    if value is None:
        return ""
    if isinstance(value, float):
        text = f"{value:.5g}"
    else:
        text = str(value)
    return text if len(text) <= width else text[: max(width - 3, 1)] + "..."


def psql_table(headers: list[str], rows: list[list[str]]) -> str:
    """A table as tabulate's "psql" format draws it (what Ray's reporters print)."""
    widths = [max([len(h), *(len(r[i]) for r in rows)]) for i, h in enumerate(headers)]
    numeric = [all(_is_number(r[i]) for r in rows if r[i]) and any(r[i] for r in rows) for i in range(len(headers))]
    rule = "+" + "+".join("-" * (w + 2) for w in widths) + "+"

    def line(cells: list[str], head: bool = False) -> str:
        parts = []
        for i, cell in enumerate(cells):
            parts.append(cell.rjust(widths[i]) if numeric[i] and not head else cell.ljust(widths[i]))
        return "| " + " | ".join(parts) + " |"

    return "\n".join([rule, line(headers, head=True), rule, *(line(r) for r in rows), rule])


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


class TuneReporterBase(ProgressReporter):
    """Ray's table reporters' common part (columns, frequency, the status text)."""

    DEFAULT_COLUMNS = collections.OrderedDict(
        {
            "training_iteration": "iter",
            "time_total_s": "total time (s)",
            "timesteps_total": "ts",
            "episode_reward_mean": "reward",
        }
    )
    VALID_SUMMARY_TYPES = (int, float, bool, str)

    def __init__(
        self,
        *,
        metric_columns: list[str] | dict[str, str] | None = None,
        parameter_columns: list[str] | dict[str, str] | None = None,
        total_samples: int | None = None,
        max_progress_rows: int = 20,
        max_error_rows: int = 20,
        max_column_length: int = 20,
        max_report_frequency: int = 5,
        infer_limit: int = 3,
        print_intermediate_tables: bool | None = None,
        metric: str | None = None,
        mode: str | None = None,
        sort_by_metric: bool = False,
    ) -> None:
        self._metrics_override = metric_columns is not None
        self._metric_columns: Any = metric_columns or self.DEFAULT_COLUMNS.copy()
        self._parameter_columns: Any = parameter_columns or []
        self._total_samples = total_samples
        self._max_progress_rows = max_progress_rows
        self._max_error_rows = max_error_rows
        self._max_column_length = max_column_length
        self._max_report_frequency = max_report_frequency
        self._infer_limit = infer_limit
        self._print_intermediate_tables = print_intermediate_tables
        self._metric, self._mode = metric, mode
        self._sort_by_metric = sort_by_metric
        self._inferred: dict[str, str] = {}
        self._start_time = time.time()
        self._last_report_time = 0.0

    def setup(
        self,
        start_time: float | None = None,
        total_samples: int | None = None,
        metric: str | None = None,
        mode: str | None = None,
        **kwargs: Any,
    ) -> None:
        self.set_start_time(start_time)
        if total_samples:
            self.set_total_samples(total_samples)
        self.set_search_properties(metric, mode)

    def set_search_properties(self, metric: str | None, mode: str | None) -> bool:
        """Takes the search's metric and mode unless given already (False: they conflict)."""
        if (self._metric and metric and self._metric != metric) or (self._mode and mode and self._mode != mode):
            return False
        self._metric = self._metric or metric
        self._mode = self._mode or mode
        return True

    def set_total_samples(self, total_samples: int) -> None:
        self._total_samples = total_samples

    def set_start_time(self, timestamp: float | None = None) -> None:
        self._start_time = timestamp if timestamp is not None else time.time()

    def should_report(self, trials: list[Trial], done: bool = False) -> bool:
        if time.time() - self._last_report_time > self._max_report_frequency:
            self._last_report_time = time.time()
            return True
        return done

    def add_metric_column(self, metric: str, representation: str | None = None) -> None:
        """Shows ``metric`` in the table (under ``representation``)."""
        self._metrics_override = True
        if isinstance(self._metric_columns, collections.abc.MutableMapping):
            if metric in self._metric_columns:
                raise ValueError(f"Column {metric} already exists.")
            self._metric_columns[metric] = representation or metric
        else:
            if representation is not None and representation != metric:
                raise ValueError(
                    "`representation` cannot differ from `metric` if this reporter was initialized "
                    "with a list of metric columns."
                )
            if metric in self._metric_columns:
                raise ValueError(f"Column {metric} already exists.")
            self._metric_columns.append(metric)

    def add_parameter_column(self, parameter: str, representation: str | None = None) -> None:
        """Shows the config value ``parameter`` in the table."""
        if isinstance(self._parameter_columns, collections.abc.MutableMapping):
            if parameter in self._parameter_columns:
                raise ValueError(f"Column {parameter} already exists.")
            self._parameter_columns[parameter] = representation or parameter
        else:
            if parameter in self._parameter_columns:
                raise ValueError(f"Column {parameter} already exists.")
            self._parameter_columns.append(parameter)

    # --- the text ----------------------------------------------------------------------
    def _infer_user_metrics(self, trials: list[Trial], limit: int) -> dict[str, str]:
        if len(self._inferred) >= limit:
            return self._inferred
        self._inferred = {}
        for trial in trials:
            for key, value in flatten_metrics(trial.last_result or {}).items():
                if key not in self.DEFAULT_COLUMNS and key not in _AUTO and type(value) in self.VALID_SUMMARY_TYPES:
                    self._inferred[key] = key
                if len(self._inferred) >= limit:
                    return self._inferred
        return self._inferred

    def _columns(self, spec: Any) -> dict[str, str]:
        return dict(spec) if isinstance(spec, dict) else {k: k for k in spec}

    def _best(self, trials: list[Trial]) -> tuple[Trial | None, str | None]:
        metric, mode = self._metric, self._mode
        if not metric and len(self._inferred) == 1:
            metric = next(iter(self._inferred))
        if not metric or not mode:
            return None, metric
        best, best_value = None, None
        for trial in trials:
            value = flatten_metrics(trial.last_result or {}).get(metric)
            if not isinstance(value, int | float) or isinstance(value, bool) or math.isnan(value):
                continue
            if best_value is None or (value > best_value if mode == "max" else value < best_value):
                best, best_value = trial, value
        return best, metric

    def _progress_str(self, trials: list[Trial], done: bool, *sys_info: str, fmt: str = "psql", delim: str = "\n"):
        """Ray's status text for these trials."""
        if not self._metrics_override:
            self._metric_columns = self.DEFAULT_COLUMNS.copy()
            self._metric_columns.update(self._infer_user_metrics(trials, self._infer_limit))
        now = time.time()
        running = datetime.timedelta(seconds=now - self._start_time)
        messages = [
            "== Status ==",
            f"Current time: {time.strftime('%Y-%m-%d %H:%M:%S', time.localtime(now))} (running for {running})",
            *sys_info,
        ]
        best, metric = self._best(trials)
        parameters = self._columns(self._parameter_columns)
        if best is not None:
            value = flatten_metrics(best.last_result).get(metric)
            config = best.config if not parameters else {k: flatten_metrics(best.config).get(k) for k in parameters}
            messages.append(f"Current best trial: {best} with {metric}={value} and parameters={config}")
        messages.append(self._trial_table(trials, done, parameters))
        errors = [t for t in trials if t.status == "ERROR"]
        if errors:
            shown = errors if done else errors[: self._max_error_rows]
            messages.append(f"Number of errored trials: {len(errors)}")
            rows = [[str(t), "1", _cell(t.error_msg, 120)] for t in shown]
            messages.append(psql_table(["Trial name", "# failures", "error"], rows))
        return delim.join(messages) + delim

    def _trial_table(self, trials: list[Trial], done: bool, parameters: dict[str, str]) -> str:
        by_state = collections.Counter(t.status for t in trials)
        states = ", ".join(f"{n} {s}" for s, n in sorted(by_state.items()))
        total = self._total_samples or len(trials)
        head = f"Number of trials: {len(trials)}/{total} ({states})" if trials else "Number of trials: 0"
        if not parameters:
            keys: list[str] = []
            for trial in trials:
                for key in flatten_metrics(trial.config):
                    if key not in keys:
                        keys.append(key)
            parameters = {k: k for k in keys}
        metrics = self._columns(self._metric_columns)
        metrics = {k: v for k, v in metrics.items() if any(k in flatten_metrics(t.last_result or {}) for t in trials)}
        shown = list(trials)
        if self._sort_by_metric and self._metric and self._mode:
            sign = -1 if self._mode == "max" else 1

            def key(t: Trial) -> float:
                value = flatten_metrics(t.last_result or {}).get(self._metric)
                return sign * value if isinstance(value, int | float) else math.inf

            shown.sort(key=key)
        if not done and self._max_progress_rows and len(shown) > self._max_progress_rows:
            shown = shown[: self._max_progress_rows]
        width = self._max_column_length
        headers = ["Trial name", "status", "loc", *(_cell(v, width) for v in parameters.values())]
        headers += [_cell(v, width) for v in metrics.values()]
        rows = []
        for trial in shown:
            config, result = flatten_metrics(trial.config), flatten_metrics(trial.last_result or {})
            row = [str(trial), trial.status, ""]
            row += [_cell(config.get(k), width) for k in parameters]
            row += [_cell(result.get(k), width) for k in metrics]
            rows.append(row)
        more = len(trials) - len(shown)
        table = psql_table(headers, rows)
        return head + "\n" + table + (f"\n... {more} more trials not shown" if more > 0 else "")


class CLIReporter(TuneReporterBase):
    """Prints Ray's status table to the terminal (``ray.tune.CLIReporter``); its arguments are the base's."""

    def _print(self, msg: str) -> None:
        print(msg, flush=True)

    def report(self, trials: list[Trial], done: bool, *sys_info: str) -> None:
        self._print(self._progress_str(trials, done, *sys_info))


class JupyterNotebookReporter(TuneReporterBase):
    """Shows Ray's status table in a notebook cell, replacing it each time (``overwrite``); prints outside one."""

    def __init__(
        self,
        *,
        overwrite: bool = True,
        metric_columns: list[str] | dict[str, str] | None = None,
        parameter_columns: list[str] | dict[str, str] | None = None,
        total_samples: int | None = None,
        max_progress_rows: int = 20,
        max_error_rows: int = 20,
        max_column_length: int = 20,
        max_report_frequency: int = 5,
        infer_limit: int = 3,
        print_intermediate_tables: bool | None = None,
        metric: str | None = None,
        mode: str | None = None,
        sort_by_metric: bool = False,
    ) -> None:
        super().__init__(
            metric_columns=metric_columns,
            parameter_columns=parameter_columns,
            total_samples=total_samples,
            max_progress_rows=max_progress_rows,
            max_error_rows=max_error_rows,
            max_column_length=max_column_length,
            max_report_frequency=max_report_frequency,
            infer_limit=infer_limit,
            print_intermediate_tables=print_intermediate_tables,
            metric=metric,
            mode=mode,
            sort_by_metric=sort_by_metric,
        )
        self._overwrite = overwrite

    def report(self, trials: list[Trial], done: bool, *sys_info: str) -> None:
        self.display(self._progress_str(trials, done, *sys_info))

    def display(self, string: str) -> None:
        try:
            from IPython.display import clear_output, display
        except ImportError:
            print(string, flush=True)
            return
        if self._overwrite:
            clear_output(wait=True)
        display({"text/plain": string}, raw=True)


class ReporterCallback(Callback):
    """Feeds a progress reporter from the search's stream (a Tune callback the Tuner adds)."""

    def __init__(self, reporter: ProgressReporter, tune_config: Any) -> None:
        self.reporter, self.tune_config = reporter, tune_config

    def setup(self, stop: Any = None, num_samples: int | None = None, total_num_samples: int | None = None, **info):
        total = total_num_samples if total_num_samples and total_num_samples > 0 else None
        self.reporter.setup(
            start_time=time.time(), total_samples=total, metric=self.tune_config.metric, mode=self.tune_config.mode
        )

    def on_step_end(self, iteration: int, trials: list[Trial], **info):
        if self.reporter.should_report(trials, done=False):
            self.reporter.report(trials, False)

    def on_experiment_end(self, trials: list[Trial], **info):
        if self.reporter.should_report(trials, done=True):
            self.reporter.report(trials, True)
