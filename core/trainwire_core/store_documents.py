"""The documents the coordinator writes to the shared store and the predictor reads: one typed contract.

Two files per run carry everything serving needs, written whole and atomically by
the coordinator (``Store.write_json``) and read by every predictor replica:

- ``runs/<run_id>/checkpoints.json``: the committed checkpoints (``CheckpointIndex``);
- ``runs/<run_id>/aliases.json``: aliases, their history and the traffic policy (``RegistryState``).

Both are frozen types with a ``schema_version``. Reading is lenient towards files an
earlier release wrote (no ``schema_version``: version 0, same keys) and refuses a file
of a newer schema than this release knows, so an old predictor never misreads a new
layout. No other module indexes these files' keys.
"""

from __future__ import annotations

import dataclasses
import functools
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from trainwire_core.errors import DataLossError, NotFoundError
from trainwire_core.storage import Store

SCHEMA_VERSION = 1


def _schema(data: Mapping[str, Any], what: str) -> int:
    version = int(data.get("schema_version", 0))
    if version > SCHEMA_VERSION:
        raise DataLossError(
            f"{what} has schema_version {version}; this release reads up to {SCHEMA_VERSION}: upgrade it"
        )
    return version


# --- the checkpoint index ------------------------------------------------------------------------
@dataclass(frozen=True)
class IndexedCheckpoint:
    """One committed checkpoint as the index lists it."""

    id: str
    index: int
    metrics: Mapping[str, Any] = field(default_factory=dict)
    size_bytes: int = 0
    created_at: float = 0.0
    # Its number among the run's checkpoints: 1, 2, ... in commit order, never reused (Triton's
    # integer model versions). 0 in an index written before numbers were kept.
    version: int = 0

    @property
    def path(self) -> str:
        """Its directory, relative to the run's."""
        return f"checkpoints/{self.id}"

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "path": self.path,
            "index": self.index,
            "metrics": dict(self.metrics),
            "size_bytes": self.size_bytes,
            "created_at": self.created_at,
            "version": self.version,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> IndexedCheckpoint:
        return cls(
            id=str(data["id"]),
            index=int(data.get("index", 0)),
            metrics=dict(data.get("metrics") or {}),
            size_bytes=int(data.get("size_bytes", 0)),
            created_at=float(data.get("created_at", 0.0)),
            version=int(data.get("version", 0)),
        )


@dataclass(frozen=True)
class CheckpointIndex:
    """A run's committed checkpoints, its best and latest (``runs/<run_id>/checkpoints.json``)."""

    run_id: str
    run_name: str = ""
    checkpoints: tuple[IndexedCheckpoint, ...] = ()
    latest: str = ""
    best: str = ""
    score_attribute: str = ""
    score_order: str = "max"
    updated_at: float = 0.0
    schema_version: int = SCHEMA_VERSION
    # The highest number ever given to a checkpoint of the run (a dropped one's is not reused).
    last_version: int = 0

    def __post_init__(self) -> None:
        # An index written before numbers were kept: its checkpoints are numbered in commit order.
        last = max([self.last_version, *(c.version for c in self.checkpoints)])
        if any(c.version <= 0 for c in self.checkpoints):
            numbered = []
            for c in self.checkpoints:
                if c.version <= 0:
                    last += 1
                    c = dataclasses.replace(c, version=last)
                numbered.append(c)
            object.__setattr__(self, "checkpoints", tuple(numbered))
        object.__setattr__(self, "last_version", last)

    @functools.cached_property
    def numbers(self) -> Mapping[str, int]:
        """Each committed checkpoint id's number."""
        return {c.id: c.version for c in self.checkpoints}

    @functools.cached_property
    def ids(self) -> frozenset[str]:
        """The committed checkpoint ids (a set: the request path asks membership)."""
        return frozenset(c.id for c in self.checkpoints)

    @property
    def ordered_ids(self) -> tuple[str, ...]:
        """The committed checkpoint ids in commit order."""
        return tuple(c.id for c in self.checkpoints)

    def default_version(self) -> str:
        """The version an empty ``model_version`` means: the best checkpoint, else the latest."""
        return self.best or self.latest or self.checkpoints[-1].id

    def to_json(self) -> dict[str, Any]:
        return {
            "schema_version": SCHEMA_VERSION,
            "run_id": self.run_id,
            "run_name": self.run_name,
            "score_attribute": self.score_attribute,
            "score_order": self.score_order,
            "checkpoints": [c.to_json() for c in self.checkpoints],
            "latest": self.latest,
            "best": self.best,
            "updated_at": self.updated_at,
            "last_version": self.last_version,
        }

    @classmethod
    def from_json(cls, data: Any) -> CheckpointIndex:
        """Raises DataLossError for a file that is not an index, or of a newer schema."""
        if not isinstance(data, Mapping):
            raise DataLossError("a checkpoint index must be a JSON object")
        try:
            return cls(
                run_id=str(data["run_id"]),
                run_name=str(data.get("run_name") or ""),
                checkpoints=tuple(IndexedCheckpoint.from_json(c) for c in data.get("checkpoints") or ()),
                latest=str(data.get("latest") or ""),
                best=str(data.get("best") or ""),
                score_attribute=str(data.get("score_attribute") or ""),
                score_order=str(data.get("score_order") or "max"),
                updated_at=float(data.get("updated_at", 0.0)),
                schema_version=_schema(data, "checkpoints.json"),
                last_version=int(data.get("last_version", 0)),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise DataLossError(f"checkpoints.json is not a checkpoint index: {exc!r}") from None

    @classmethod
    def read(cls, store: Store, run_id: str) -> CheckpointIndex | None:
        """The run's index, or None when the run has none (or it cannot be read as one)."""
        try:
            return cls.from_json(store.read_json(store.index_path(run_id)))
        except (NotFoundError, DataLossError, ValueError):
            return None

    def write(self, store: Store) -> None:
        store.write_json(store.index_path(self.run_id), self.to_json())


# --- aliases and the traffic policy ------------------------------------------------------------------
@dataclass(frozen=True)
class RouteWeight:
    """A share of a model's traffic: a version or alias, and a whole percent."""

    version: str
    weight: int


@dataclass(frozen=True)
class TrafficPolicy:
    """Weights over versions or aliases (A/B/N) and a shadow that gets a copy of each request."""

    weights: tuple[RouteWeight, ...] = ()
    shadow: str = ""
    revision: int = 0
    time: float = 0.0
    set_by: str = ""

    def __bool__(self) -> bool:
        return bool(self.weights or self.shadow)

    def targets(self) -> set[str]:
        """The versions and aliases the policy names: its weights' and its shadow."""
        named = {w.version for w in self.weights}
        if self.shadow:
            named.add(self.shadow)
        return named

    def to_json(self) -> dict[str, Any]:
        return {
            "weights": [{"version": w.version, "weight": w.weight} for w in self.weights],
            "shadow": self.shadow,
            "revision": self.revision,
            "time": self.time,
            "set_by": self.set_by,
        }

    @classmethod
    def from_json(cls, data: Any) -> TrafficPolicy:
        if not isinstance(data, Mapping):
            return cls()
        weights = tuple(
            RouteWeight(str(w.get("version", "")), int(w.get("weight", 0)))
            for w in data.get("weights") or ()
            if isinstance(w, Mapping)
        )
        return cls(
            weights=weights,
            shadow=str(data.get("shadow") or ""),
            revision=int(data.get("revision", 0)),
            time=float(data.get("time", 0.0)),
            set_by=str(data.get("set_by") or ""),
        )


@dataclass(frozen=True)
class AliasMove:
    """One alias move, kept for ever in the registry's history (``version`` "" removed it)."""

    revision: int
    alias: str
    version: str
    previous_version: str = ""
    time: float = 0.0
    moved_by: str = ""

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> AliasMove:
        return cls(
            revision=int(data.get("revision", 0)),
            alias=str(data.get("alias", "")),
            version=str(data.get("version") or ""),
            previous_version=str(data.get("previous_version") or ""),
            time=float(data.get("time", 0.0)),
            moved_by=str(data.get("moved_by") or ""),
        )


@dataclass(frozen=True)
class RegistryState:
    """A model's aliases, their history and its traffic policy (``runs/<run_id>/aliases.json``)."""

    run_id: str = ""
    aliases: Mapping[str, str] = field(default_factory=dict)
    history: tuple[AliasMove, ...] = ()
    route: TrafficPolicy = field(default_factory=TrafficPolicy)
    schema_version: int = SCHEMA_VERSION

    def served_versions(self) -> set[str]:
        """What the registry points at: every alias's version and every target of the policy."""
        return set(self.aliases.values()) | self.route.targets()

    def with_alias(self, run_id: str, alias: str, version: str, moved_by: str) -> RegistryState:
        """The state after pointing ``alias`` at ``version`` ("": removing it), the move recorded."""
        aliases = {k: v for k, v in self.aliases.items() if k != alias}
        if version:
            aliases[alias] = version
        move = AliasMove(
            revision=(self.history[-1].revision + 1) if self.history else 1,
            alias=alias,
            version=version,
            previous_version=self.aliases.get(alias, ""),
            time=time.time(),
            moved_by=moved_by,
        )
        return dataclasses.replace(
            self, run_id=run_id, aliases=aliases, history=(*self.history, move), schema_version=SCHEMA_VERSION
        )

    def with_route(self, run_id: str, weights: Sequence[tuple[str, int]], shadow: str, set_by: str) -> RegistryState:
        """The state with a new traffic policy (its revision one up)."""
        route = TrafficPolicy(
            weights=tuple(RouteWeight(t, int(w)) for t, w in weights),
            shadow=shadow,
            revision=self.route.revision + 1,
            time=time.time(),
            set_by=set_by,
        )
        return dataclasses.replace(self, run_id=run_id, route=route, schema_version=SCHEMA_VERSION)

    def to_json(self) -> dict[str, Any]:
        return {
            "schema_version": SCHEMA_VERSION,
            "run_id": self.run_id,
            "aliases": dict(self.aliases),
            "history": [m.to_json() for m in self.history],
            "route": self.route.to_json(),
        }

    @classmethod
    def from_json(cls, data: Any) -> RegistryState:
        """Raises DataLossError for a file of a newer schema; anything else not an object is an empty state."""
        if not isinstance(data, Mapping):
            return cls()
        aliases = data.get("aliases") or {}
        return cls(
            run_id=str(data.get("run_id") or ""),
            aliases={str(k): str(v) for k, v in aliases.items()} if isinstance(aliases, Mapping) else {},
            history=tuple(AliasMove.from_json(m) for m in _mappings(data.get("history"))),
            route=TrafficPolicy.from_json(data.get("route")),
            schema_version=_schema(data, "aliases.json"),
        )

    @classmethod
    def read(cls, store: Store, run_id: str) -> RegistryState:
        """The run's registry state; empty where none was ever set."""
        try:
            return cls.from_json(store.read_json(store.aliases_path(run_id)))
        except NotFoundError:
            return cls(run_id=run_id)

    def write(self, store: Store) -> None:
        store.write_json(store.aliases_path(self.run_id), self.to_json())


def _mappings(value: Any) -> Iterable[Mapping[str, Any]]:
    return [m for m in value if isinstance(m, Mapping)] if isinstance(value, list) else []
