"""Server reflection as grpcurl list/describe see it: every proto-declared RPC is discoverable."""

from __future__ import annotations

import re
from pathlib import Path

import grpc
import pytest
from google.protobuf.descriptor_pool import DescriptorPool
from grpc_reflection.v1alpha.proto_reflection_descriptor_database import ProtoReflectionDescriptorDatabase

pytestmark = pytest.mark.timeout(120)

PROTOS = Path(__file__).resolve().parents[2] / "protos"


def declared_rpcs(proto: Path) -> dict[str, set[str]]:
    """``{package.Service: {method, ...}}`` as declared in a .proto file's text."""
    text = re.sub(r"//[^\n]*", "", proto.read_text())
    package = re.search(r"^\s*package\s+([\w.]+)\s*;", text, re.MULTILINE).group(1)
    services = {}
    for match in re.finditer(r"\bservice\s+(\w+)\s*\{", text):
        depth, end = 1, match.end()
        while depth:
            depth += {"{": 1, "}": -1}.get(text[end], 0)
            end += 1
        services[f"{package}.{match.group(1)}"] = set(re.findall(r"\brpc\s+(\w+)\s*\(", text[match.end() : end]))
    return services


def reflected(address: str) -> tuple[list[str], dict[str, set[str]]]:
    """What ``grpcurl list`` and ``grpcurl describe <service>`` show, via the same reflection calls."""
    channel = grpc.insecure_channel(address)
    try:
        db = ProtoReflectionDescriptorDatabase(channel)
        pool = DescriptorPool(db)  # private pool: the generated stubs' default pool is not involved
        names = list(db.get_services())
        return names, {name: {m.name for m in pool.FindServiceByName(name).methods} for name in names}
    finally:
        channel.close()


@pytest.fixture(scope="module")
def predictor_address(store):
    from trainwire_predictor.server import PredictorThread
    from trainwire_predictor.settings import PredictorSettings

    thread = PredictorThread(PredictorSettings(port=0, store=store.uri, index_refresh_s=0.2))
    thread.start()
    yield thread.server.address
    thread.stop()


def test_declared_rpcs_parse():
    services = declared_rpcs(PROTOS / "trainwire" / "v1" / "coordinator.proto")
    assert "Fit" in services["trainwire.v1.Coordinator"]
    assert (
        "ModelStreamInfer"
        in declared_rpcs(PROTOS / "inference" / "grpc_service.proto")["inference.GRPCInferenceService"]
    )


def test_coordinator_reflects_every_declared_rpc(coordinator_address):
    names, methods = reflected(coordinator_address)
    for required in ("trainwire.v1.Coordinator", "grpc.health.v1.Health", "grpc.reflection.v1alpha.ServerReflection"):
        assert required in names, names
    for proto in sorted((PROTOS / "trainwire" / "v1").glob("*.proto")):
        for service, rpcs in declared_rpcs(proto).items():
            assert service in methods, (proto.name, service, names)
            assert rpcs <= methods[service], (service, rpcs - methods[service])
    assert {"Check", "Watch"} <= methods["grpc.health.v1.Health"]


def test_predictor_reflects_every_declared_rpc(predictor_address):
    names, methods = reflected(predictor_address)
    for required in ("inference.GRPCInferenceService", "grpc.health.v1.Health"):
        assert required in names, names
    declared = declared_rpcs(PROTOS / "inference" / "grpc_service.proto")
    assert set(declared) == {"inference.GRPCInferenceService"}
    for service, rpcs in declared.items():
        assert rpcs <= methods[service], (service, rpcs - methods[service])
