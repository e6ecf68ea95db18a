"""The bench/ghz configs: only documented ghz keys, and calls that work through server reflection alone.

ghz needs no proto files: it resolves ``call`` by server reflection and builds each request from ``data``
as protobuf JSON. These tests do the same (a private DescriptorPool fed by reflection, no generated stubs)
against a predictor serving a real XGBoost model.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import grpc
import numpy as np
import pytest
from google.protobuf import json_format, message_factory
from google.protobuf.descriptor_pool import DescriptorPool
from grpc_reflection.v1alpha.proto_reflection_descriptor_database import ProtoReflectionDescriptorDatabase

pytestmark = pytest.mark.timeout(300)

GHZ_DIR = Path(__file__).resolve().parents[2] / "bench" / "ghz"
CONFIGS = sorted(p.name for p in GHZ_DIR.glob("*.json"))
MODEL = "ghz-cancer"

# The options ghz documents for its JSON/TOML/YAML config file (https://ghz.sh/docs/options).
GHZ_KEYS = {
    "proto", "protoset", "call", "import-paths", "cacert", "cert", "key", "cname", "skipTLS", "insecure",
    "authority", "async", "rps", "load-schedule", "load-start", "load-end", "load-step", "load-step-duration",
    "load-max-duration", "concurrency", "concurrency-schedule", "concurrency-start", "concurrency-end",
    "concurrency-step", "concurrency-step-duration", "concurrency-max-duration", "total", "timeout", "duration",
    "max-duration", "duration-stop", "data", "data-file", "binary", "binary-file", "metadata", "metadata-file",
    "stream-interval", "stream-call-duration", "stream-call-count", "stream-dynamic-messages", "reflect-metadata",
    "output", "format", "connections", "connect-timeout", "keepalive", "name", "tags", "cpus", "debug", "host",
    "enable-compression", "count-errors", "skipFirst", "lb-strategy", "disable-template-functions",
    "disable-template-data", "max-recv-message-size", "max-send-message-size", "max-call-recv-msg-size",
    "max-call-send-msg-size",
}  # fmt: skip


def load(name: str) -> dict:
    return json.loads((GHZ_DIR / name).read_text())


def with_model(message: dict) -> dict:
    """The message with ``model_name`` set to the model this test serves.

    ghz renders string values as Go text/template (``{{.RequestNumber}}`` and so on) per request; a model name
    given literally (``cancer``) or as a template is replaced by the fixture's model name, and no other field
    may hold a template, since this test does not render them.
    """
    message = dict(message, model_name=MODEL)
    assert "{{" not in json.dumps(message), "a template outside model_name: render it here first"
    return message


@pytest.fixture(scope="module")
def served_model(client, local_booster):
    """The in-process booster uploaded through the coordinator as run ``MODEL``; returns a local predictor."""
    from trainwire.xgboost.checkpoint import XGBoostCheckpoint
    from trainwire.xgboost.predictor import XGBoostPredictor

    ckpt = XGBoostCheckpoint.from_model(local_booster)
    client.upload_checkpoint(ckpt.path, MODEL)
    return XGBoostPredictor.from_checkpoint(ckpt)


@pytest.fixture(scope="module")
def local_booster(cancer_data):
    import xgboost

    train_df = cancer_data[0]
    features = [c for c in train_df.columns if c != "target"]
    params = {"objective": "binary:logistic", "max_depth": 3, "nthread": 1}
    return xgboost.train(params, xgboost.DMatrix(train_df[features], label=train_df["target"]), 8)


@pytest.fixture(scope="module")
def channel(store):
    from trainwire_predictor.server import PredictorThread
    from trainwire_predictor.settings import PredictorSettings

    thread = PredictorThread(PredictorSettings(port=0, store=store.uri, index_refresh_s=0.2))
    thread.start()
    ch = grpc.insecure_channel(thread.server.address)
    yield ch
    ch.close()
    thread.stop()


@pytest.mark.parametrize("name", CONFIGS)
def test_only_documented_ghz_keys(name):
    config = load(name)
    assert not set(config) - GHZ_KEYS, f"{name}: keys ghz does not know: {sorted(set(config) - GHZ_KEYS)}"
    assert re.fullmatch(r"[\w.]+\.\w+", config["call"]), config["call"]
    assert config.get("insecure") is True  # the predictor listens in plaintext unless given a certificate


def test_there_are_configs():
    assert {"unary.json", "stream.json"} <= set(CONFIGS)


@pytest.mark.parametrize("name", CONFIGS)
def test_call_works_through_reflection_alone(name, channel, served_model):
    config = load(name)
    service_name, method_name = config["call"].rsplit(".", 1)
    pool = DescriptorPool(ProtoReflectionDescriptorDatabase(channel))  # not the generated stubs' default pool
    method = pool.FindServiceByName(service_name).methods_by_name[method_name]
    request_cls = message_factory.GetMessageClass(method.input_type)
    response_cls = message_factory.GetMessageClass(method.output_type)
    path = f"/{service_name}/{method_name}"

    data = config["data"] if isinstance(config["data"], list) else [config["data"]]
    # ParseDict reads bytes fields as base64, as ghz does.
    requests = [json_format.ParseDict(with_model(m), request_cls(), descriptor_pool=pool) for m in data]
    timeout = float(config.get("timeout", "10s").rstrip("s"))

    if method.client_streaming or method.server_streaming:
        assert method.client_streaming and method.server_streaming, "only bidi streams are handled here"
        call = channel.stream_stream(
            path, request_serializer=request_cls.SerializeToString, response_deserializer=response_cls.FromString
        )
        responses = list(call(iter(requests), timeout=timeout))
        assert len(responses) == len(requests)
        for response in responses:
            assert not response.error_message, response.error_message
        responses = [r.infer_response for r in responses]
    else:
        call = channel.unary_unary(
            path, request_serializer=request_cls.SerializeToString, response_deserializer=response_cls.FromString
        )
        responses = [call(r, timeout=timeout) for r in requests]

    for request, response in zip(requests, responses):
        assert response.model_name == MODEL
        assert response.id == request.id
        rows = np.array(request.inputs[0].contents.fp64_contents).reshape(list(request.inputs[0].shape))
        expected = served_model.predict(rows)  # numpy in, the predictions array out
        got = np.array(response.outputs[0].contents.fp32_contents, dtype=np.float32)
        np.testing.assert_allclose(got, expected, rtol=1e-6)
