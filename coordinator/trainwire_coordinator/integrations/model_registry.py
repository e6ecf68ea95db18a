"""Model aliases and traffic policies, kept in the shared store beside each model's checkpoint index.

One file per run, ``runs/<run_id>/aliases.json``, holds the aliases (alias ->
checkpoint id), the traffic policy and every alias move so far. Each change
rewrites the whole file atomically (``Store.write_json``), so a predictor reads
the old or the new state, never a part, and resolves it through the store alone
as it resolves the index. The history is append-only inside the file: a
rollback is one more move, back to the previous version.

Whoever mirrors the aliases elsewhere (the coordinator's MLflow tracker) is one of the
registry's ``observers``: each is called with an ``AliasChange`` once the move is written.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import re
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from trainwire_core.auth import current_caller
from trainwire_core.errors import FailedPreconditionError, InvalidArgumentError, NotFoundError
from trainwire_core.grpc_status import handle_errors
from trainwire_core.storage import RUN_ID_RE, Store
from trainwire_core.store_documents import CheckpointIndex, RegistryState
from trainwire_core.v1 import models_pb2, models_pb2_grpc

# An alias: a letter first, so it never reads as a number; path-safe; short enough to log.
ALIAS_RE = re.compile(r"^[A-Za-z][A-Za-z0-9_.-]{0,63}$")
MAX_ROUTE_VERSIONS = 16

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class ModelState:
    """A model's registry state as the name it was asked by."""

    name: str
    state: RegistryState


@dataclass(frozen=True)
class AliasChange:
    """One alias move, as the registry's observers see it once it is written.

    Attributes:
        model: The model's name as the move named it (a run name or run id).
        run_id: The run the name resolved to.
        alias: The alias moved.
        version: The checkpoint id it points to now; "" when the alias was removed.
        previous_version: The checkpoint id it pointed to before ("" when new).
        uri: The store URI of ``version``'s checkpoint ("" when removed).
        revision: The move's revision in the model's history.
        moved_by: Who moved it (the caller's name; "" when unauthenticated).
    """

    model: str
    run_id: str
    alias: str
    version: str
    previous_version: str
    uri: str
    revision: int
    moved_by: str = ""


@dataclass(frozen=True)
class Model:
    """A model name resolved to its run and committed versions."""

    name: str
    run_id: str
    versions: tuple[str, ...]


class ModelRegistry:
    """Moves aliases and sets traffic policies (blocking store I/O: call it off the event loop).

    Args:
        store: The shared store the coordinator commits checkpoints to.
    """

    def __init__(self, store: Store) -> None:
        self.store = store
        # Each change is a read-modify-write of one file: one at a time in this process.
        self._lock = threading.Lock()
        # Called with each alias move once it is written, in the order of the moves (under the
        # lock): an observer must return at once (queue the change), and what it raises is logged.
        self.observers: list[Callable[[AliasChange], None]] = []

    # --- resolution -------------------------------------------------------------
    def model(self, name: str) -> Model:
        """The run a model name (run name or run id) means, and its committed versions.

        Raises:
            InvalidArgumentError: No name.
            NotFoundError: No run of that name or id has a committed checkpoint.
        """
        if not name:
            raise InvalidArgumentError("a model name is required (a run name or run id)", field="model")
        run_id = None
        try:
            entry = self.store.read_json(self.store.name_path(name))
            run_id = entry.get("run_id") if isinstance(entry, dict) else None
        except NotFoundError:
            pass
        if run_id is None and RUN_ID_RE.match(name):
            run_id = name
        index = CheckpointIndex.read(self.store, str(run_id)) if run_id else None
        if index is None or not index.checkpoints:
            raise NotFoundError(
                f"model {name!r} not found: no run with that name or id has a committed checkpoint", field="model"
            )
        return Model(name, str(run_id), index.ordered_ids)

    def _state(self, model: Model) -> RegistryState:
        return RegistryState.read(self.store, model.run_id)

    def _version_of(self, model: Model, state: RegistryState, target: str, field: str) -> str:
        """The checkpoint id ``target`` names now: a committed version, or an alias of one."""
        if not target:
            raise InvalidArgumentError(f"{field} is required (a committed version or an alias)", field=field)
        if target in model.versions:
            return target
        aliased = state.aliases.get(target)
        if aliased is not None:
            if aliased not in model.versions:
                raise NotFoundError(
                    f"alias {target!r} of model {model.name!r} points to version {aliased!r}, which is no longer "
                    "committed",
                    field=field,
                )
            return str(aliased)
        raise NotFoundError(
            f"model {model.name!r} has no version or alias {target!r}; committed versions: {', '.join(model.versions)}",
            field=field,
        )

    # --- aliases -------------------------------------------------------------
    def set_alias(self, name: str, alias: str, version: str, moved_by: str = "") -> ModelState:
        """Points ``alias`` at ``version`` (a committed checkpoint id, or another alias's version).

        Returns:
            The model's registry state after the move.

        Raises:
            InvalidArgumentError: A bad alias name, or one that is also a checkpoint id (field ``alias``).
            NotFoundError: No such model (``model``) or version (``version``).
        """
        if not ALIAS_RE.match(alias):
            raise InvalidArgumentError(
                f"alias {alias!r} is not a valid alias: a letter, then up to 63 letters, digits, '_', '.' or '-'",
                field="alias",
            )
        with self._lock:
            model = self.model(name)
            if alias in model.versions:
                raise InvalidArgumentError(
                    f"alias {alias!r} is a version of model {name!r}; an alias needs a name of its own",
                    field="alias",
                )
            state = self._state(model)
            target = self._version_of(model, state, version, "version")
            state = self._write(state.with_alias(model.run_id, alias, target, moved_by))
            self._notify(model, state)
        return ModelState(name, state)

    def delete_alias(self, name: str, alias: str, moved_by: str = "") -> ModelState:
        """Removes ``alias``; the history keeps it as a move to no version.

        Returns:
            The model's registry state after the removal.

        Raises:
            InvalidArgumentError: No alias (``alias``).
            NotFoundError: No such model (``model``) or alias (``alias``).
            FailedPreconditionError: The traffic policy weights or shadows the alias (``alias``):
                removing it would leave the policy pointing nowhere.
        """
        if not alias:
            raise InvalidArgumentError("alias is required (the alias to remove)", field="alias")
        with self._lock:
            model = self.model(name)
            state = self._state(model)
            if alias not in state.aliases:
                raise NotFoundError(f"model {name!r} has no alias {alias!r}", field="alias")
            if alias in state.route.targets():
                raise FailedPreconditionError(
                    f"alias {alias!r} is in model {name!r}'s traffic policy; set a policy without it first",
                    field="alias",
                )
            state = self._write(state.with_alias(model.run_id, alias, "", moved_by))
            self._notify(model, state)
        return ModelState(name, state)

    def _write(self, state: RegistryState) -> RegistryState:
        state.write(self.store)
        return state

    def _notify(self, model: Model, state: RegistryState) -> None:
        """Tells the observers of the move just written (the last of ``state``'s history)."""
        if not self.observers:
            return
        move = state.history[-1]
        uri = self.store.uri_of(self.store.checkpoint_dir(model.run_id, move.version)) if move.version else ""
        change = AliasChange(
            model.name, model.run_id, move.alias, move.version, move.previous_version, uri, move.revision, move.moved_by
        )
        for observe in self.observers:
            try:
                observe(change)
            except Exception:  # a mirror never undoes nor fails the move
                logger.exception("an observer of model %r's aliases failed", model.name)

    def get(self, name: str) -> ModelState:
        """The model's registry state: aliases, history and route (empty where none is set)."""
        model = self.model(name)
        return ModelState(name, dataclasses.replace(self._state(model), run_id=model.run_id))

    # --- traffic policy --------------------------------------------------------
    def set_route(
        self, name: str, weights: Sequence[tuple[str, int]], shadow: str = "", moved_by: str = ""
    ) -> ModelState:
        """Sets the model's weights (percent, adding up to 100) and shadow; none of either clears it.

        Targets are versions or aliases, kept as given: a weight on an alias follows the alias as it moves.

        Raises:
            InvalidArgumentError: Weights that are not whole percents adding up to 100, a target
                named twice, or too many targets (field ``weights``).
            NotFoundError: A target that is neither a committed version nor an alias
                (field ``weights[i].version`` or ``shadow``).
        """
        check_weights(weights)
        with self._lock:
            model = self.model(name)
            state = self._state(model)
            for i, (target, _) in enumerate(weights):
                self._version_of(model, state, target, f"weights[{i}].version")
            if shadow:
                self._version_of(model, state, shadow, "shadow")
            state = self._write(state.with_route(model.run_id, weights, shadow, moved_by))
        return ModelState(name, state)


def check_weights(weights: Sequence[tuple[str, int]]) -> None:
    """Raises InvalidArgumentError (naming the field) unless the weights make a valid split."""
    if not weights:
        return
    if len(weights) > MAX_ROUTE_VERSIONS:
        raise InvalidArgumentError(f"at most {MAX_ROUTE_VERSIONS} versions may share traffic", field="weights")
    seen: set[str] = set()
    for i, (target, weight) in enumerate(weights):
        if not target:
            raise InvalidArgumentError(f"weights[{i}] names no version", field=f"weights[{i}].version")
        if target in seen:
            raise InvalidArgumentError(f"version {target!r} is weighted twice", field=f"weights[{i}].version")
        seen.add(target)
        if isinstance(weight, bool) or not isinstance(weight, int) or not 0 <= weight <= 100:
            raise InvalidArgumentError(
                f"the weight of {target!r} must be a whole percent from 0 to 100, not {weight!r}",
                field=f"weights[{i}].weight",
            )
    total = sum(w for _, w in weights)
    if total != 100:
        raise InvalidArgumentError(f"the weights add up to {total}, not 100", field="weights")


# --- gRPC ----------------------------------------------------------------------


def _aliases_proto(model: ModelState, include_history: bool) -> models_pb2.ModelAliases:
    state = model.state
    message = models_pb2.ModelAliases(model=model.name, run_id=state.run_id, aliases=dict(state.aliases))
    if include_history:
        message.history.extend(models_pb2.AliasMove(**move.to_json()) for move in state.history)
    return message


def _route_proto(model: ModelState) -> models_pb2.TrafficPolicy:
    route = model.state.route
    return models_pb2.TrafficPolicy(
        model=model.name,
        run_id=model.state.run_id,
        weights=[models_pb2.RouteWeight(version=w.version, weight=w.weight) for w in route.weights],
        shadow=route.shadow,
        revision=route.revision,
    )


class ModelRegistryServicer(models_pb2_grpc.ModelRegistryServicer):
    """ModelRegistry: protos in, ``ModelRegistry`` calls in a thread, protos out."""

    def __init__(self, registry: ModelRegistry) -> None:
        self.registry = registry

    @handle_errors
    async def SetAlias(self, request, context):  # type: ignore[no-untyped-def]
        state = await asyncio.to_thread(
            self.registry.set_alias, request.model, request.alias, request.version, current_caller().name
        )
        return _aliases_proto(state, include_history=False)

    @handle_errors
    async def DeleteAlias(self, request, context):  # type: ignore[no-untyped-def]
        state = await asyncio.to_thread(self.registry.delete_alias, request.model, request.alias, current_caller().name)
        return _aliases_proto(state, include_history=False)

    @handle_errors
    async def GetAliases(self, request, context):  # type: ignore[no-untyped-def]
        state = await asyncio.to_thread(self.registry.get, request.model)
        return _aliases_proto(state, request.include_history)

    @handle_errors
    async def SetRoute(self, request, context):  # type: ignore[no-untyped-def]
        weights = [(w.version, w.weight) for w in request.weights]
        state = await asyncio.to_thread(
            self.registry.set_route, request.model, weights, request.shadow, current_caller().name
        )
        return _route_proto(state)

    @handle_errors
    async def GetRoute(self, request, context):  # type: ignore[no-untyped-def]
        return _route_proto(await asyncio.to_thread(self.registry.get, request.model))
