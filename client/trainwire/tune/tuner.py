"""``Tuner``, as ``ray.tune.Tuner``: the search runs in the coordinator; this starts it, watches it, reads it."""

from __future__ import annotations

import copy
import dataclasses
import itertools
import sys
import time
import uuid
from collections.abc import Callable
from typing import Any

from trainwire.checkpoint import Checkpoint
from trainwire.client import TERMINAL_STATES, CoordinatorClient
from trainwire.config import RunConfig, ScalingConfig
from trainwire.runtime_env import pickle_by_value
from trainwire.session_client import get_client
from trainwire.trainer import BaseTrainer
from trainwire.tune.callback import Callback, CallbackFeed
from trainwire.tune.error import TuneError
from trainwire.tune.progress import describe_changes
from trainwire.tune.registry import registered_trainable
from trainwire.tune.result_grid import ResultGrid
from trainwire.tune.search.optuna import OptunaSearch
from trainwire.tune.search.sample import Categorical, Function, GridSearch, alternatives_domain
from trainwire.tune.search.searcher import SearcherWrapper
from trainwire.tune.search.variant_generator import Path, Searched, split_space
from trainwire.tune.stopper import CombinedStopper, FunctionStopper, Stopper, as_stopper
from trainwire.tune.trainable import as_trainer, is_function_trainable
from trainwire.tune.tune_config import TuneConfig
from trainwire_core.errors import InvalidArgumentError, NotFoundError, UnavailableError
from trainwire_core.search_space import SCALING_FIELDS
from trainwire_core.structs import to_struct
from trainwire_core.v1 import common_pb2, tune_pb2

# Top-level param_space keys and the trainer attribute each one needs (None: every trainer).
SEARCHABLE = {
    "train_loop_config": "train_loop_config",
    "params": "params",
    "num_boost_round": "num_boost_round",
    "scaling_config": None,
    # Searched over objects only (grid_search / choice): each alternative travels as the trainer sends its own.
    "datasets": "datasets",
    "preprocessor": "preprocessor",
}
# Roots whose values are objects: a grid or choice there always travels as alternatives.
OBJECT_ROOTS = ("datasets", "preprocessor")
# Converts one alternative of a searched path into what that place of the request carries.
Converter = Callable[[Path, Any], tune_pb2.Alternative]
# How long a Tune call is retried while the coordinator is unreachable (the idempotency key
# makes a retry return the search the first call started).
START_RETRY_S = 60.0


def scaling_config_dict(config: Any) -> dict[str, Any]:
    """A ScalingConfig (ours or Ray's) as the dict of fields a trial's scaling config is merged with."""
    sc = ScalingConfig.coerce(config)
    if sc.searched_fields:
        return _searched_scaling_dict(sc)
    out: dict[str, Any] = {
        "num_workers": sc.max_workers,
        "use_gpu": sc.use_gpu,
        "placement_strategy": sc.placement_strategy,
        # 0: a fixed group, so a trainer's elastic bounds do not outlive a fixed num_workers.
        "min_workers": sc.min_workers if isinstance(sc.num_workers, tuple) else 0,
    }
    if sc.resources_per_worker is not None:
        out["resources_per_worker"] = dict(sc.resources_per_worker)
    if sc.trainer_resources is not None:
        out["trainer_resources"] = dict(sc.trainer_resources)
    return out


def _searched_scaling_dict(sc: ScalingConfig) -> dict[str, Any]:
    """A ScalingConfig holding search domains, field by field: the search resolves and checks them per trial."""
    out: dict[str, Any] = {
        "num_workers": sc.num_workers,
        "use_gpu": sc.use_gpu,
        "placement_strategy": sc.placement_strategy,
    }
    if "num_workers" in sc.searched_fields or not isinstance(sc.num_workers, tuple):
        out["min_workers"] = 0  # a fixed group per trial, as a fixed num_workers
    else:
        out["num_workers"], out["min_workers"] = sc.num_workers[1], sc.num_workers[0]
    for name in ("resources_per_worker", "trainer_resources"):
        if getattr(sc, name) is not None:
            out[name] = dict(getattr(sc, name))
    return out


def _innermost(search_alg: Any) -> Any:
    while isinstance(search_alg, SearcherWrapper):
        search_alg = search_alg.searcher
    return search_alg


def _apply_tuner_kwargs(kwargs: dict[str, Any], run_config: RunConfig | None, trainable: Any) -> RunConfig | None:
    """Ray's private ``Tuner(_tuner_kwargs=...)``: ``fail_fast`` is honoured, the others warned about."""
    import warnings

    fail_fast = kwargs.pop("fail_fast", None)
    if kwargs:
        warnings.warn(
            f"Tuner(_tuner_kwargs=...): {', '.join(sorted(kwargs))} have no effect in trainwire "
            "(a search runs in the coordinator)",
            UserWarning,
            stacklevel=3,
        )
    if not fail_fast:
        return run_config
    base = run_config
    if base is None:
        base = trainable.run_config if isinstance(trainable, BaseTrainer) else RunConfig()
    return dataclasses.replace(base, failure_config=dataclasses.replace(base.failure_config, fail_fast=True))


def _nested_search_alg(search_alg: Any) -> Any:
    """A search algorithm whose space and points are a function trainable's config, keyed as its trainer's."""
    search_alg = copy.copy(search_alg)
    if isinstance(search_alg, SearcherWrapper):
        search_alg.searcher = _nested_search_alg(search_alg.searcher)
        return search_alg
    if getattr(search_alg, "space", None):
        search_alg.space = {"train_loop_config": search_alg.space}
    if getattr(search_alg, "points_to_evaluate", None):
        search_alg.points_to_evaluate = [{"train_loop_config": p} for p in search_alg.points_to_evaluate]
    return search_alg


def parse_param_space(
    param_space: dict[str, Any] | None, trainable: Any = None, search_alg: Any = None
) -> tuple[dict[str, Any], list[tuple[Path, Searched]]]:
    """A Tuner's param_space as its constants and its searched values, checked against the trainer.

    ``OptunaSearch(space=...)``'s samplers are added to it.

    Raises:
        InvalidArgumentError: A key no trainer takes (``field`` is ``param_space.<key>``), a
            ``datasets`` key, a constant that is not JSON, or a path given twice.
    """
    if param_space is None:
        param_space = {}
    if not isinstance(param_space, dict):
        raise InvalidArgumentError(f"param_space must be a dict, got {type(param_space).__name__}", field="param_space")
    space = dict(param_space)
    for key in space:
        field = f"param_space.{key}"
        if key not in SEARCHABLE:
            raise InvalidArgumentError(
                f"param_space has no key {key!r}: a trainer's searchable keys are {', '.join(SEARCHABLE)}",
                field=field,
            )
        needs = SEARCHABLE[key]
        if needs is not None and trainable is not None and not hasattr(trainable, needs):
            raise InvalidArgumentError(f"param_space.{key} does not apply to {type(trainable).__name__}", field=field)
    if "scaling_config" in space:
        scaling = space["scaling_config"]
        if not isinstance(scaling, dict):
            try:
                space["scaling_config"] = scaling = scaling_config_dict(scaling)
            except InvalidArgumentError:
                raise InvalidArgumentError(
                    f"param_space.scaling_config must be a ScalingConfig or a dict, got {type(scaling).__name__}",
                    field="param_space.scaling_config",
                ) from None
        for key in scaling:
            if key not in SCALING_FIELDS:
                raise InvalidArgumentError(
                    f"param_space.scaling_config has no field {key!r} (fields: {', '.join(SCALING_FIELDS)})",
                    field=f"param_space.scaling_config.{key}",
                )
    _check_object_roots(space)
    constants, params = split_space(space)
    search_alg = _innermost(search_alg)
    if isinstance(search_alg, OptunaSearch) and search_alg.space:
        space_constants, space_params = split_space(search_alg.space, "search_alg.space")
        assert not space_constants  # OptunaSearch holds samplers only
        params.extend(space_params)
    seen: set[Path] = set()
    for path, _ in params:
        if path in seen:
            where = ".".join(path)
            raise InvalidArgumentError(
                f"{where} is searched twice (param_space and OptunaSearch's space)", field=f"param_space.{where}"
            )
        seen.add(path)
    return constants, params


def _check_object_roots(space: dict[str, Any]) -> None:
    """``datasets`` and ``preprocessor`` take a grid_search or choice over objects, nothing else."""

    def searched(value: Any) -> bool:
        return isinstance(value, GridSearch | Categorical) or (
            isinstance(value, dict) and list(value) == ["grid_search"] and isinstance(value["grid_search"], list)
        )

    if "preprocessor" in space and not searched(space["preprocessor"]):
        raise InvalidArgumentError(
            "param_space.preprocessor takes tune.grid_search or tune.choice over preprocessors; "
            "give a single preprocessor to the trainer",
            field="param_space.preprocessor",
        )
    if "datasets" in space:
        datasets = space["datasets"]
        if not isinstance(datasets, dict) or not datasets:
            raise InvalidArgumentError(
                "param_space.datasets takes {name: tune.grid_search([...])}", field="param_space.datasets"
            )
        for name, value in datasets.items():
            if not isinstance(name, str) or not searched(value):
                raise InvalidArgumentError(
                    f"param_space.datasets.{name} takes tune.grid_search or tune.choice over datasets; "
                    "give a single dataset to the trainer",
                    field="param_space.datasets",
                )


def _options(domain: Searched) -> list[Any]:
    return domain.options if isinstance(domain, GridSearch | Categorical) else []


def pickled_alternative(path: Path, value: Any) -> tune_pb2.Alternative:
    """An object as a by-value pickle: a preprocessor, or a value inside train_loop_config."""
    try:
        return tune_pb2.Alternative(pickled=pickle_by_value(value))
    except Exception as exc:
        where = ".".join(path)
        raise InvalidArgumentError(
            f"param_space.{where}: {type(value).__name__} cannot be pickled: {exc}", field=f"param_space.{where}"
        ) from exc


def search_params(params: list[tuple[Path, Searched]], convert: Converter | None = None) -> list[tune_pb2.SearchParam]:
    """The searched values as the Tune request carries them.

    A grid or choice over objects (any values under ``datasets`` or ``preprocessor``; values that are
    not JSON under ``train_loop_config``) carries alternatives, each turned by ``convert`` (default: a
    by-value pickle) into what that place of the request carries for a plain value.
    """
    out = []
    for path, domain in params:
        field = f"param_space.{'.'.join(path)}"
        objects = path[0] in OBJECT_ROOTS or (path[0] == "train_loop_config" and domain.has_objects)
        if path[0] in OBJECT_ROOTS and not isinstance(domain, GridSearch | Categorical):
            raise InvalidArgumentError(f"{field} takes tune.grid_search or tune.choice over objects", field=field)
        try:
            if objects:
                proto = alternatives_domain(
                    domain.sampler,
                    _options(domain),
                    lambda value, path=path: (convert or pickled_alternative)(path, value),
                )
            else:
                proto = domain.to_proto()
        except InvalidArgumentError as exc:
            raise InvalidArgumentError(
                f"param_space.{'.'.join(path)}: {exc}", field=f"param_space.{'.'.join(path)}"
            ) from None
        except Exception as exc:
            if not isinstance(domain, Function):
                raise
            raise InvalidArgumentError(
                f"param_space.{'.'.join(path)}: sample_from's function cannot be pickled: {exc}",
                field=f"param_space.{'.'.join(path)}",
            ) from exc
        out.append(tune_pb2.SearchParam(path=list(path), domain=proto))
    return out


def _code_modules(stopper: Any) -> set[str]:
    """The modules of a stopper's code: its class's, a FunctionStopper's function's, a CombinedStopper's parts'."""
    modules = {type(stopper).__module__}
    if isinstance(stopper, FunctionStopper):
        modules.add(getattr(stopper._fn, "__module__", None) or type(stopper._fn).__module__)
    for part in getattr(stopper, "_stoppers", ()) if isinstance(stopper, CombinedStopper) else ():
        modules |= _code_modules(part)
    return modules


def _pickle_stopper(stopper: Stopper) -> bytes:
    """cloudpickle, shipping the code of the caller's own modules (the cluster cannot import them)."""
    try:
        return pickle_by_value(stopper, _code_modules(stopper))
    except Exception as exc:
        raise InvalidArgumentError(f"run_config.stop cannot be pickled: {exc}", field="run_config.stop") from exc


class Tuner:
    """Searches hyperparameters of a trainer, as ``ray.tune.Tuner``; each trial is a run.

    The search runs in the coordinator: it goes on if this program stops, and
    ``Tuner.restore(tune_id)`` follows it again.

    Args:
        trainable: A trainwire trainer (``TorchTrainer``, ``XGBoostTrainer``, ...).
        param_space: Values that replace or merge into the trainer's: ``train_loop_config``,
            ``params`` (GBDT), ``num_boost_round``, ``scaling_config`` (a ScalingConfig, or a
            dict when a field is searched); ``tune`` samplers and ``tune.grid_search`` anywhere in them.
        tune_config: Metric, mode, search algorithm, scheduler, samples.
        run_config: The search's name (trials are ``<name>_<index>``) and verbosity; it
            replaces the trainer's run config, as in Ray.
    """

    def __init__(
        self,
        trainable: BaseTrainer | None = None,
        *,
        param_space: dict[str, Any] | None = None,
        tune_config: TuneConfig | None = None,
        run_config: RunConfig | None = None,
        _tuner_kwargs: dict[str, Any] | None = None,
    ) -> None:
        if _tuner_kwargs:
            # Ray passes these on to tune.run: fail_fast is the run's FailureConfig.fail_fast, as there.
            run_config = _apply_tuner_kwargs(dict(_tuner_kwargs), run_config, trainable)
        if isinstance(trainable, str):  # a name given to tune.register_trainable
            trainable = registered_trainable(trainable)
        # A function trainable (Ray Tune's train_fn(config)) or a Trainable class: param_space is its config.
        self.function_trainable = trainable is not None and not isinstance(trainable, BaseTrainer)
        if self.function_trainable:
            if not is_function_trainable(trainable):
                raise InvalidArgumentError(
                    "Tuner takes a trainwire trainer (TorchTrainer, XGBoostTrainer, ...), a function of config "
                    f"or a tune.Trainable class, got {type(trainable).__name__}",
                    field="trainable",
                )
            trainable = as_trainer(trainable, run_config)
            param_space = {"train_loop_config": param_space} if param_space else None
            if tune_config is not None and tune_config.search_alg is not None:
                tune_config = copy.copy(tune_config)
                tune_config.search_alg = _nested_search_alg(tune_config.search_alg)
        if tune_config is not None and not isinstance(tune_config, TuneConfig):
            raise InvalidArgumentError("tune_config must be a trainwire.tune.TuneConfig", field="tune_config")
        if run_config is not None and not isinstance(run_config, RunConfig):
            raise InvalidArgumentError("run_config must be a trainwire.RunConfig", field="run_config")
        self.trainable = trainable
        self.param_space = param_space
        self.tune_config = tune_config or TuneConfig()
        self.run_config = run_config
        self._constants, self._params = parse_param_space(param_space, trainable, self.tune_config.search_alg)
        self._tune_id = ""  # set by restore: fit() follows that search
        # Set by restore when failed trials run again or unfinished ones stop: fit() asks for it first.
        self._resume: tune_pb2.ResumeTuneRequest | None = None
        self._results: ResultGrid | None = None
        # tune.run's progress_reporter: it prints its table instead of the change lines.
        self._progress_reporter: Any = None

    # --- the request -----------------------------------------------------------------
    def _effective_run_config(self) -> RunConfig:
        if self.run_config is not None:
            return self.run_config
        return self.trainable.run_config if self.trainable is not None else RunConfig()

    def build_request(self, client: CoordinatorClient) -> tune_pb2.TuneRequest:
        """The Tune request (uploads the trainer's datasets and code, as ``Trainer.fit()`` does)."""
        if self.trainable is None:
            raise InvalidArgumentError("a Tuner needs a trainable to start a search", field="trainable")
        trainer = copy.copy(self.trainable)
        run_config = self._effective_run_config()
        stopper = as_stopper(run_config.stop)
        if stopper is not None:  # decided by the search (pickled), not by each trial's run
            run_config = dataclasses.replace(run_config, stop=None)
        trainer.run_config = run_config
        fit_request = trainer.build_request(client)
        # The search's name is the one name: the coordinator names the trials after it.
        fit_request.run_config.name = ""
        return tune_pb2.TuneRequest(
            trainer=fit_request,
            param_space=to_struct(self._constants, "param_space"),
            search_space=search_params(self._params, self._converter(trainer, client)),
            tune_config=self.tune_config.to_proto(),
            name=trainer.run_config.name or "",
            idempotency_key=uuid.uuid4().hex,
            function_trainable=self.function_trainable,
            pickled_stopper=_pickle_stopper(stopper) if stopper is not None else b"",
        )

    @staticmethod
    def _converter(trainer: BaseTrainer, client: CoordinatorClient) -> Converter:
        """Turns an alternative into what the trainer sends for a plain value at its path."""

        def convert(path: Path, value: Any) -> tune_pb2.Alternative:
            if path[0] == "datasets":
                # As the trainer's own datasets: uploaded (content-addressed) or a URI.
                return tune_pb2.Alternative(dataset=trainer._dataset_ref(client, path[1], value))
            if path[0] == "preprocessor" and value is None:
                return tune_pb2.Alternative()  # no preprocessor for this trial
            return pickled_alternative(path, value)

        return convert

    # --- running ---------------------------------------------------------------------
    def fit(self) -> ResultGrid:
        """Starts the search (or follows the restored one) until it ends; returns its trials' results.

        A trial that fails does not raise: it is in ``ResultGrid.errors``.

        Raises:
            TuneError: The search itself failed.
        """
        client = get_client()
        if self._tune_id and self._resume is not None:
            tune = client.resume_tune(self._resume)
            self._resume = None  # done once: a second fit() follows the search
        elif self._tune_id:
            tune = client.get_tune(self._tune_id)
        else:
            tune = self._start(client, self.build_request(client))
        self._tune_id = tune.tune_id
        run_config = self._effective_run_config()
        callbacks = [c for c in run_config.callbacks or [] if isinstance(c, Callback)]
        verbose = bool(run_config.verbose)
        # tune.run's argument, else RunConfig(progress_reporter=...), as Ray's.
        reporter = self._progress_reporter if self._progress_reporter is not None else run_config.progress_reporter
        if reporter is not None:
            from trainwire.tune.progress_reporter import ReporterCallback

            callbacks.append(ReporterCallback(reporter, self.tune_config))
            verbose = False
        feed = CallbackFeed(callbacks)
        feed.setup(run_config.stop, self.tune_config.num_samples, tune.num_trials_planned)
        tune = self._follow(client, tune, verbose, feed)
        feed.end(tune)
        self._results = self._grid(tune, client)
        if run_config.log_to_file:  # each trial's output in its own run's directory, as Ray's trial directories
            from trainwire.train.log_files import write_log_files

            for trial in (t for t in tune.trials if t.run_id):
                write_log_files(client, trial.run_id, client.get_run(trial.run_id).path, run_config.log_to_file)
        if tune.state == common_pb2.FAILED:
            raise TuneError(f"search {tune.name!r} ({tune.tune_id}) failed: {tune.state_reason}", tune, self._results)
        return self._results

    @staticmethod
    def _start(client: CoordinatorClient, request: tune_pb2.TuneRequest) -> tune_pb2.TuneRun:
        give_up_at = time.monotonic() + START_RETRY_S
        delay_s = 0.5
        while True:
            try:
                return client.tune(request)
            except UnavailableError:
                if time.monotonic() >= give_up_at:
                    raise
                time.sleep(delay_s)
                delay_s = min(delay_s * 2, 5.0)

    @staticmethod
    def _follow(
        client: CoordinatorClient, tune: tune_pb2.TuneRun, verbose: bool, feed: CallbackFeed | None = None
    ) -> tune_pb2.TuneRun:
        previous = None
        try:
            later = client.watch_tune(tune.tune_id) if tune.state not in TERMINAL_STATES else iter(())
            for snapshot in itertools.chain([tune], later):
                if verbose:
                    for line in describe_changes(previous, snapshot):
                        print(line, flush=True)
                previous = snapshot
                if feed is not None:
                    feed.feed(snapshot)
                if snapshot.state in TERMINAL_STATES:
                    return snapshot
        except KeyboardInterrupt:
            print(
                f"search {tune.tune_id} goes on in the coordinator: Tuner.restore({tune.tune_id!r}) follows it again, "
                f"`trainwire tunes cancel {tune.tune_id}` stops it",
                file=sys.stderr,
                flush=True,
            )
            raise
        tune = client.get_tune(tune.tune_id)  # the stream ended early: the search as it is now
        if feed is not None:
            feed.feed(tune)
        return tune

    def _grid(self, tune: tune_pb2.TuneRun, client: CoordinatorClient) -> ResultGrid:
        checkpoint_cls = self.trainable.checkpoint_cls if self.trainable is not None else Checkpoint
        return ResultGrid(tune, client, checkpoint_cls)

    def get_results(self) -> ResultGrid:
        """The results of ``fit()``; for a restored Tuner, the search's trials as they are now."""
        if self._results is not None:
            return self._results
        if not self._tune_id:
            raise RuntimeError("no results yet: call fit() first, or Tuner.restore() a search")
        client = get_client()
        return self._grid(client.get_tune(self._tune_id), client)

    # --- restoring -------------------------------------------------------------------
    @staticmethod
    def _tune_ref(path: str) -> str:
        """A tune id or name, from itself or from a path or URI that ends with it."""
        ref = str(path).rstrip("/").rsplit("/", 1)[-1]
        if not ref:
            raise InvalidArgumentError(f"no tune id or name in {path!r}", field="path")
        return ref

    @classmethod
    def restore(
        cls,
        path: str,
        trainable: BaseTrainer | None = None,
        resume_unfinished: bool = True,
        resume_errored: bool = False,
        restart_errored: bool = False,
        param_space: dict[str, Any] | None = None,
    ) -> Tuner:
        """A Tuner whose ``fit()`` follows an existing search (by id or name) to its end, as Ray's.

        The search never stopped (it runs in the coordinator). At ``fit()``, as Ray's restore:

        - ``resume_errored``: its failed trials go on in new runs from their latest committed
          checkpoint (from the start when they have none); ``restart_errored``: from the start
          (it wins over ``resume_errored``). A search that had ended runs again until they end.
        - ``resume_unfinished=False``: its trials still pending or running stop now, as finished
          (Ray marks them TERMINATED), and it starts no more.

        A cancelled search's cancelled trials are not run again: cancelling is a request of its own
        (Ray resumes the trials an interrupted experiment left unfinished; a trainwire search is not
        interrupted by its caller's end).

        ``trainable`` sets the class its checkpoints are given as; ``param_space`` is accepted for
        Ray's signature (Ray re-specifies object references with it; the coordinator kept the
        search's request).
        """
        for name, value in (
            ("resume_unfinished", resume_unfinished),
            ("resume_errored", resume_errored),
            ("restart_errored", restart_errored),
        ):
            if not isinstance(value, bool):
                raise InvalidArgumentError(f"{name} must be a bool, got {type(value).__name__}", field=name)
        tuner = cls(trainable)
        tuner._tune_id = cls._tune_ref(path)
        if resume_errored or restart_errored or not resume_unfinished:
            tuner._resume = tune_pb2.ResumeTuneRequest(
                tune_id=tuner._tune_id,
                resume_unfinished=resume_unfinished,
                resume_errored=resume_errored,
                restart_errored=restart_errored,
            )
        return tuner

    @classmethod
    def can_restore(cls, path: str) -> bool:
        """Whether the coordinator has a search of this id or name."""
        try:
            get_client().get_tune(cls._tune_ref(path))
        except NotFoundError:
            return False
        return True
