"""The client of the coordinator's ModelRegistry: model aliases and traffic policies."""

from __future__ import annotations

import os

import grpc

from trainwire_core.errors import InvalidArgumentError
from trainwire_core.grpc_status import from_rpc_error
from trainwire_core.serving import KEEPALIVE_CLIENT_OPTIONS, open_channel
from trainwire_core.tls import ClientTLS
from trainwire_core.v1 import models_pb2, models_pb2_grpc


def parse_weights(text: str) -> list[tuple[str, int]]:
    """``"a=90,b=10"`` -> ``[("a", 90), ("b", 10)]`` (the server checks they add up to 100).

    Raises:
        InvalidArgumentError: An entry that is not ``VERSION=PERCENT`` (field ``weights``).
    """
    weights = []
    for i, item in enumerate(p.strip() for p in text.split(",") if p.strip()):
        target, sep, percent = item.rpartition("=")
        try:
            weight = int(percent)
        except ValueError:
            weight = -1
        if not sep or not target or weight < 0:
            raise InvalidArgumentError(
                f"weights: {item!r} is not VERSION=PERCENT (e.g. a=90,b=10)", field=f"weights[{i}]"
            )
        weights.append((target, weight))
    return weights


class ModelRegistryClient:
    """Calls the ModelRegistry service of a coordinator; failed calls raise the matching TrainwireError.

    Args:
        address: ``host:port`` of the coordinator.
        token: Bearer token, when the coordinator requires one (default: ``$TRAINWIRE_TOKEN``).
    """

    def __init__(self, address: str, token: str | None = None, *, tls: ClientTLS | None = None) -> None:
        token = token if token is not None else os.environ.get("TRAINWIRE_TOKEN")
        self._metadata = (("authorization", f"Bearer {token}"),) if token else ()
        self.channel = open_channel(
            address, list(KEEPALIVE_CLIENT_OPTIONS), tls if tls is not None else ClientTLS.from_files()
        )
        self.stub = models_pb2_grpc.ModelRegistryStub(self.channel)

    def close(self) -> None:
        self.channel.close()

    def __enter__(self) -> ModelRegistryClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _call(self, method: str, request: object) -> object:
        try:
            return getattr(self.stub, method)(request, metadata=self._metadata)
        except grpc.RpcError as err:
            raise from_rpc_error(err) from None

    def set_alias(self, model: str, alias: str, version: str) -> models_pb2.ModelAliases:
        """Points ``alias`` at ``version`` (a committed checkpoint id, or another alias)."""
        return self._call("SetAlias", models_pb2.SetAliasRequest(model=model, alias=alias, version=version))

    def delete_alias(self, model: str, alias: str) -> models_pb2.ModelAliases:
        """Removes ``alias`` (kept in the history); refused while the traffic policy names it."""
        return self._call("DeleteAlias", models_pb2.DeleteAliasRequest(model=model, alias=alias))

    def get_aliases(self, model: str, include_history: bool = False) -> models_pb2.ModelAliases:
        return self._call("GetAliases", models_pb2.GetAliasesRequest(model=model, include_history=include_history))

    def set_route(self, model: str, weights: list[tuple[str, int]], shadow: str = "") -> models_pb2.TrafficPolicy:
        """Sets the model's traffic policy (no weights and no shadow clear it)."""
        request = models_pb2.SetRouteRequest(
            model=model, weights=[models_pb2.RouteWeight(version=v, weight=w) for v, w in weights], shadow=shadow
        )
        return self._call("SetRoute", request)

    def get_route(self, model: str) -> models_pb2.TrafficPolicy:
        return self._call("GetRoute", models_pb2.GetRouteRequest(model=model))
