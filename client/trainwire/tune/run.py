"""``tune.run``, ``tune.run_experiments`` and ``Experiment``: Ray Tune's older entry points.

Each experiment becomes a ``Tuner`` search in the coordinator (its trainable, ``config`` as
the param space, ``TuneConfig`` and ``RunConfig`` from the arguments), followed to its end;
``tune.run`` returns an ``ExperimentAnalysis`` over its results. Arguments that only shape a
local Ray Tune (log files, trial directory names, a filesystem object, ...) are accepted: a
non-default value trainwire cannot honour is named in one warning, or refused where ignoring
it would change the results.
"""

from __future__ import annotations

import dataclasses
import datetime
import warnings
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from trainwire.config import CheckpointConfig, FailureConfig, RunConfig
from trainwire.tune.analysis import ExperimentAnalysis
from trainwire.tune.callback import Trial
from trainwire.tune.error import TuneError
from trainwire.tune.placement_groups import PlacementGroupFactory
from trainwire.tune.registry import create_scheduler, create_searcher, registered_trainable
from trainwire.tune.trainable import WithResources, with_resources
from trainwire.tune.tune_config import ResumeConfig, TuneConfig
from trainwire_core.errors import InvalidArgumentError

__all__ = ["Experiment", "run", "run_experiments"]

_DEPRECATED_VALUE = "DEPRECATED"


class Experiment:
    """One search's specification, as ``ray.tune.Experiment`` (``run_experiments`` takes a list of them).

    Args:
        name: The search's name (its trials are ``<name>_<index>``).
        run: A function trainable, a ``tune.Trainable`` class, or a name given to ``register_trainable``.
        stop, time_budget_s, config, resources_per_trial, num_samples, storage_path,
            checkpoint_config, max_failures: As ``tune.run``'s.
        storage_filesystem, sync_config, trial_name_creator, trial_dirname_creator, log_to_file,
            export_formats, restore, local_dir: Accepted for Ray's signature (see ``tune.run``).
    """

    PUBLIC_KEYS = {"stop", "num_samples", "time_budget_s"}

    def __init__(
        self,
        name: str,
        run: str | Callable | type,
        *,
        stop: Mapping | Callable[[str, Mapping], bool] | Any | None = None,
        time_budget_s: float | datetime.timedelta | None = None,
        config: dict[str, Any] | None = None,
        resources_per_trial: Mapping[str, Any] | PlacementGroupFactory | None = None,
        num_samples: int = 1,
        storage_path: str | None = None,
        storage_filesystem: Any = None,
        sync_config: Any = None,
        checkpoint_config: CheckpointConfig | dict | None = None,
        trial_name_creator: Callable[[Trial], str] | None = None,
        trial_dirname_creator: Callable[[Trial], str] | None = None,
        log_to_file: bool = False,
        export_formats: Sequence | None = None,
        max_failures: int = 0,
        restore: str | None = None,
        local_dir: str | None = None,
    ) -> None:
        if local_dir is not None:
            raise DeprecationWarning(
                "The `local_dir` argument is deprecated. You should set the `storage_path` instead."
            )
        if isinstance(checkpoint_config, dict):
            checkpoint_config = CheckpointConfig(**checkpoint_config)
        self.name = name
        self.run_identifier = run if isinstance(run, str) else getattr(run, "__name__", type(run).__name__)
        self._run = run
        self.stop = stop
        self.time_budget_s = time_budget_s
        self.config = config or {}
        self.resources_per_trial = resources_per_trial
        self.num_samples = num_samples
        self.storage_path = storage_path
        self._checkpoint_config = checkpoint_config or CheckpointConfig()
        self.max_failures = max_failures
        self.sync_config = sync_config
        unsupported = {
            "storage_filesystem": storage_filesystem is not None,
            "trial_name_creator": trial_name_creator is not None,
            "trial_dirname_creator": trial_dirname_creator is not None,
            "log_to_file": bool(log_to_file),
            "export_formats": bool(export_formats),
        }
        self._unsupported = [k for k, given in unsupported.items() if given]
        if restore is not None:
            raise InvalidArgumentError(
                "restore (one checkpoint for every trial) is not supported: a trial resumes from its own run's "
                "checkpoints; load a checkpoint in the trainable instead",
                field="restore",
            )

    @property
    def stopper(self) -> Any:
        return self.stop

    @property
    def checkpoint_config(self) -> CheckpointConfig:
        return self._checkpoint_config

    @property
    def path(self) -> str | None:
        return self.storage_path

    @property
    def public_spec(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in self.PUBLIC_KEYS}

    @classmethod
    def get_trainable_name(cls, run_object: str | Callable | type) -> str:
        """The name a trainable is known by (a registered name, else the function's or class's name)."""
        if isinstance(run_object, str):
            return run_object
        return getattr(run_object, "__name__", type(run_object).__name__)

    @classmethod
    def register_if_needed(cls, run_object: str | Callable | type) -> str:
        """Registers the trainable under its name (``tune.register_trainable``) and returns the name."""
        from trainwire.tune.registry import register_trainable

        name = cls.get_trainable_name(run_object)
        if not isinstance(run_object, str):
            register_trainable(name, run_object)
        return name

    @classmethod
    def from_json(cls, name: str, spec: dict[str, Any]) -> Experiment:
        """An Experiment from Ray's dict form (``{"run": ..., "config": ..., "stop": ...}``)."""
        if "run" not in spec:
            raise TuneError(f"No trainable specified! Got {spec}")
        spec = dict(spec)
        return cls(name, spec.pop("run"), **spec)

    def trainable(self) -> Any:
        """The trainable, with ``resources_per_trial`` applied."""
        run = registered_trainable(self._run) if isinstance(self._run, str) else self._run
        if self.resources_per_trial is not None and not isinstance(run, WithResources):
            run = with_resources(run, self.resources_per_trial)
        return run


def _verbose(verbose: Any) -> int:
    if verbose is None:
        return 1
    return int(getattr(verbose, "value", verbose))


def _warn_unsupported(names: list[str]) -> None:
    if names:
        warnings.warn(
            f"tune.run: {', '.join(sorted(set(names)))} have no effect in trainwire (a search runs in the "
            "coordinator; each trial is a run named <name>_<index> with its files in the store)",
            UserWarning,
            stacklevel=3,
        )


def _tuner(
    experiment: Experiment,
    *,
    metric: str | None,
    mode: str | None,
    search_alg: Any,
    scheduler: Any,
    max_concurrent_trials: int | None,
    callbacks: Sequence[Any] | None,
    verbose: int,
    progress_reporter: Any,
    resume: Any,
    resume_config: ResumeConfig | None,
) -> Any:
    from trainwire.tune.tuner import Tuner

    if isinstance(search_alg, str):
        search_alg = create_searcher(search_alg)
    if isinstance(scheduler, str):
        scheduler = create_scheduler(scheduler)
    run_config = RunConfig(
        name=experiment.name or None,
        storage_path=experiment.storage_path,
        stop=experiment.stop,
        failure_config=FailureConfig(max_failures=experiment.max_failures),
        checkpoint_config=experiment.checkpoint_config,
        verbose=verbose,
        callbacks=list(callbacks or []),
    )
    if experiment.sync_config is not None:
        run_config = dataclasses.replace(run_config, sync_config=experiment.sync_config)
    tune_config = TuneConfig(
        metric=metric,
        mode=mode,
        search_alg=search_alg,
        scheduler=scheduler,
        num_samples=experiment.num_samples,
        max_concurrent_trials=max_concurrent_trials,
        time_budget_s=experiment.time_budget_s,
    )
    tuner = Tuner(experiment.trainable(), param_space=experiment.config, tune_config=tune_config, run_config=run_config)
    tuner._progress_reporter = progress_reporter
    modes = resume_config if resume_config is not None else _legacy_resume_config(resume)
    if (resume or resume_config is not None) and experiment.name:
        # The search of this name goes on in the coordinator: follow it rather than start another.
        if Tuner.can_restore(experiment.name):
            tuner._tune_id = experiment.name
            tuner._resume = modes.request(experiment.name) if modes is not None else None
        elif resume and str(resume).split("+")[0].upper() != "AUTO":
            raise InvalidArgumentError(
                f"resume={resume!r}: the coordinator has no search named {experiment.name!r} (resume='AUTO' "
                "starts one when there is none)",
                field="resume",
            )
    return tuner


def _legacy_resume_config(resume: Any) -> ResumeConfig | None:
    """``resume=True`` / ``"AUTO+ERRORED"`` ... as the ResumeConfig Ray builds from it (None: no resume)."""
    if not resume:
        return None
    if resume is True:
        return ResumeConfig()
    settings = str(resume).split("+")
    if settings[0] in ("LOCAL", "REMOTE", "PROMPT", "ERRORED_ONLY"):
        raise DeprecationWarning(f"'{settings[0]}' is deprecated. Please pass in one of (True, False, 'AUTO').")
    kinds = ResumeConfig.ResumeType
    by_setting = {
        "ERRORED": ResumeConfig(errored=kinds.RESUME),
        "RESTART_ERRORED": ResumeConfig(errored=kinds.RESTART),
        "ERRORED_ONLY": ResumeConfig(unfinished=kinds.SKIP, errored=kinds.RESUME),
        "RESTART_ERRORED_ONLY": ResumeConfig(unfinished=kinds.SKIP, errored=kinds.RESTART),
    }
    config = ResumeConfig()
    for setting in settings[1:]:
        if setting not in by_setting:
            raise ValueError(f"Invalid resume setting: '{setting}'")
        config = by_setting[setting]
    return config


def _raise_if_failed(analysis: ExperimentAnalysis, raise_on_failed_trial: bool) -> None:
    incomplete = [t for t in analysis.trials if t.status != "TERMINATED"]
    if incomplete and raise_on_failed_trial:
        error = TuneError("Trials did not complete", None, analysis)
        error.args = ("Trials did not complete", incomplete)  # as Ray's: the message, then the trials
        raise error


def run(
    run_or_experiment: str | Callable | type,
    *,
    name: str | None = None,
    metric: str | None = None,
    mode: str | None = None,
    stop: Mapping | Callable[[str, Mapping], bool] | Any | None = None,
    time_budget_s: float | datetime.timedelta | None = None,
    config: dict[str, Any] | None = None,
    resources_per_trial: Mapping[str, Any] | PlacementGroupFactory | None = None,
    num_samples: int = 1,
    storage_path: str | None = None,
    storage_filesystem: Any = None,
    search_alg: Any = None,
    scheduler: Any = None,
    checkpoint_config: CheckpointConfig | None = None,
    verbose: Any = None,
    progress_reporter: Any = None,
    log_to_file: bool = False,
    trial_name_creator: Callable[[Trial], str] | None = None,
    trial_dirname_creator: Callable[[Trial], str] | None = None,
    sync_config: Any = None,
    export_formats: Sequence | None = None,
    max_failures: int = 0,
    fail_fast: bool = False,
    restore: str | None = None,
    resume: bool | str | None = None,
    resume_config: ResumeConfig | None = None,
    reuse_actors: bool = False,
    raise_on_failed_trial: bool = True,
    callbacks: Sequence[Any] | None = None,
    max_concurrent_trials: int | None = None,
    keep_checkpoints_num: int | None = None,
    checkpoint_score_attr: str | None = None,
    checkpoint_freq: int = 0,
    checkpoint_at_end: bool = False,
    chdir_to_trial_dir: Any = _DEPRECATED_VALUE,
    local_dir: str | None = None,
    _remote: bool | None = None,
    _remote_string_queue: Any = None,
    _entrypoint: Any = None,
) -> ExperimentAnalysis:
    """Runs a search of a function or ``tune.Trainable`` class and waits for it, as ``ray.tune.run``.

    The search runs in the coordinator as ``Tuner`` searches do: ``config`` is the param space,
    ``metric`` / ``mode`` / ``search_alg`` / ``scheduler`` / ``num_samples`` /
    ``max_concurrent_trials`` / ``time_budget_s`` its TuneConfig, ``name`` / ``stop`` /
    ``storage_path`` / ``checkpoint_config`` / ``max_failures`` / ``callbacks`` / ``verbose`` its
    RunConfig; ``resources_per_trial`` (a dict or a PlacementGroupFactory) each trial's worker's
    resources; ``progress_reporter`` prints Ray's status table. ``resume`` (True, "AUTO", ...)
    follows the coordinator's search of this ``name`` instead of starting one.

    ``log_to_file``, ``trial_name_creator``, ``trial_dirname_creator``, ``export_formats``,
    ``reuse_actors`` and ``fail_fast`` are accepted and have no effect (one warning names them);
    ``restore`` and ``storage_filesystem`` are refused.

    Returns:
        An ExperimentAnalysis of the search's trials.

    Raises:
        TuneError: A trial did not finish (``raise_on_failed_trial``), or the search failed.
        InvalidArgumentError: A bad argument (``field`` names it).
    """
    if local_dir is not None:
        raise DeprecationWarning("The `local_dir` argument is deprecated. You should set the `storage_path` instead.")
    if chdir_to_trial_dir != _DEPRECATED_VALUE:
        raise DeprecationWarning(
            "`chdir_to_trial_dir` is deprecated. Use the RAY_CHDIR_TO_TRIAL_DIR environment variable instead."
        )
    if mode and mode not in ("min", "max"):
        raise ValueError("The `mode` parameter passed to `tune.run()` must be one of ['min', 'max']")
    if storage_filesystem is not None:
        raise InvalidArgumentError(
            "storage_filesystem: a filesystem object does not cross the service boundary; give storage_path a URI",
            field="storage_filesystem",
        )
    if fail_fast and max_failures != 0:
        raise ValueError("max_failures must be 0 if fail_fast=True.")
    checkpoint_config = dataclasses.replace(checkpoint_config) if checkpoint_config else CheckpointConfig()
    if keep_checkpoints_num is not None:
        warnings.warn(
            "keep_checkpoints_num is deprecated and will be removed. use checkpoint_config.num_to_keep instead.",
            DeprecationWarning,
            stacklevel=2,
        )
        checkpoint_config.num_to_keep = keep_checkpoints_num
    if checkpoint_score_attr is not None:
        warnings.warn(
            "checkpoint_score_attr is deprecated and will be removed. use "
            "checkpoint_config.checkpoint_score_attribute instead.",
            DeprecationWarning,
            stacklevel=2,
        )
        order = "min" if checkpoint_score_attr.startswith("min-") else "max"
        checkpoint_config.checkpoint_score_attribute = checkpoint_score_attr.removeprefix("min-").removeprefix("max-")
        checkpoint_config.checkpoint_score_order = order
    if checkpoint_freq > 0:
        warnings.warn(
            "checkpoint_freq is deprecated and will be removed. use checkpoint_config.checkpoint_frequency instead.",
            DeprecationWarning,
            stacklevel=2,
        )
        checkpoint_config.checkpoint_frequency = checkpoint_freq
    if checkpoint_at_end:
        warnings.warn(
            "checkpoint_at_end is deprecated and will be removed. use checkpoint_config.checkpoint_at_end instead.",
            DeprecationWarning,
            stacklevel=2,
        )
        checkpoint_config.checkpoint_at_end = True
    if config is not None and not isinstance(config, dict):
        raise ValueError(f"The `config` passed to `tune.run()` must be a dict. Got '{type(config)}' instead.")
    if resume_config is not None and not isinstance(resume_config, ResumeConfig):
        raise InvalidArgumentError("resume_config must be a tune.ResumeConfig", field="resume_config")
    ignored = {"fail_fast": bool(fail_fast), "reuse_actors": bool(reuse_actors)}
    if isinstance(run_or_experiment, Experiment):
        experiment = run_or_experiment
    elif isinstance(run_or_experiment, list | tuple):
        raise InvalidArgumentError(
            "tune.run takes one trainable or Experiment; run_experiments takes several", field="run_or_experiment"
        )
    else:
        experiment = Experiment(
            name or "",
            run_or_experiment,
            stop=stop,
            time_budget_s=time_budget_s,
            config=config,
            resources_per_trial=resources_per_trial,
            num_samples=num_samples,
            storage_path=storage_path,
            sync_config=sync_config,
            checkpoint_config=checkpoint_config,
            trial_name_creator=trial_name_creator,
            trial_dirname_creator=trial_dirname_creator,
            log_to_file=log_to_file,
            export_formats=export_formats,
            max_failures=max_failures,
            restore=restore,
        )
    _warn_unsupported([k for k, given in ignored.items() if given] + experiment._unsupported)
    tuner = _tuner(
        experiment,
        metric=metric,
        mode=mode,
        search_alg=search_alg,
        scheduler=scheduler,
        max_concurrent_trials=max_concurrent_trials,
        callbacks=callbacks,
        verbose=_verbose(verbose),
        progress_reporter=progress_reporter,
        resume=resume,
        resume_config=resume_config,
    )
    grid = tuner.fit()
    analysis = ExperimentAnalysis(grid.experiment_path, default_metric=metric, default_mode=mode, result_grid=grid)
    _raise_if_failed(analysis, raise_on_failed_trial)
    return analysis


def _experiments(experiments: Any) -> list[Experiment]:
    if isinstance(experiments, Experiment):
        return [experiments]
    if isinstance(experiments, Mapping):
        return [Experiment.from_json(name, spec) for name, spec in experiments.items()]
    if isinstance(experiments, Sequence) and not isinstance(experiments, str):
        out: list[Experiment] = []
        for item in experiments:
            out.extend(_experiments(item))
        return out
    raise TuneError("Invalid argument type for experiments.")


def run_experiments(
    experiments: Experiment | Mapping | Sequence[Experiment | Mapping],
    scheduler: Any = None,
    verbose: Any = None,
    progress_reporter: Any = None,
    resume: bool | str | None = None,
    resume_config: ResumeConfig | None = None,
    reuse_actors: bool = False,
    raise_on_failed_trial: bool = True,
    concurrent: bool = True,
    callbacks: Sequence[Any] | None = None,
    _remote: bool | None = None,
) -> list[Trial]:
    """Runs experiments (``Experiment`` objects or Ray's ``{name: spec}`` dicts), as ``ray.tune.run_experiments``.

    Each is a search of its own in the coordinator, run one after another (``concurrent`` has
    no other effect).

    Returns:
        Every experiment's trials.

    Raises:
        TuneError: A trial did not finish (``raise_on_failed_trial``).
    """
    trials: list[Trial] = []
    for experiment in _experiments(experiments):
        analysis = run(
            experiment,
            scheduler=scheduler,
            verbose=verbose,
            progress_reporter=progress_reporter,
            resume=resume,
            resume_config=resume_config,
            reuse_actors=reuse_actors,
            raise_on_failed_trial=raise_on_failed_trial,
            callbacks=callbacks,
        )
        trials.extend(analysis.trials)
    return trials
