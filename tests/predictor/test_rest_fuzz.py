"""Fuzzing the REST routes of a real predictor: whatever arrives, the answer is a 4xx or a 2xx, never a 500.

Each answer to a bad request is KServe's ``{"error": "..."}``.
"""

from __future__ import annotations

import http.client
import json

import pytest
from conftest import REST_MAX_BODY
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

pytestmark = pytest.mark.timeout(180)

FUZZ = settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture], derandomize=True
)
MODELS = ["rest-xgb", "rest-torch", "no-such-model", "", "rest-xgb/versions/c1", "rest-xgb/versions/c9"]
DATATYPES = ["FP32", "FP64", "INT8", "INT64", "UINT8", "BOOL", "BYTES", "FP16", "fp32", "COMPLEX", ""]

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=20,
)
shapes = st.lists(st.integers(min_value=-2, max_value=40), max_size=3) | json_values
tensor = st.fixed_dictionaries(
    {"name": st.sampled_from(["input", "text", "", "x"]) | json_values, "datatype": st.sampled_from(DATATYPES)},
    optional={
        "shape": shapes,
        "data": st.lists(st.floats(allow_nan=False, width=32) | st.integers() | st.text(max_size=4), max_size=40)
        | st.lists(st.lists(st.floats(allow_nan=False, width=32), max_size=30), max_size=4)
        | json_values,
        "parameters": st.dictionaries(st.sampled_from(["binary_data_size", "x"]), json_values, max_size=2)
        | json_values,
    },
)
infer_doc = st.fixed_dictionaries(
    {"inputs": st.lists(tensor, max_size=3) | json_values},
    optional={
        "id": json_values,
        "outputs": st.lists(st.fixed_dictionaries({"name": st.text(max_size=12) | json_values}), max_size=2)
        | json_values,
        "parameters": st.dictionaries(st.sampled_from(["binary_data_output", "x"]), json_values, max_size=2),
    },
)


@pytest.fixture(scope="module")
def conn(rest_predictor):
    host, port = rest_predictor.http_address.rsplit(":", 1)
    connection = http.client.HTTPConnection(host, int(port), timeout=30)
    yield connection
    connection.close()


def request(conn, method: str, path: str, body: bytes | None = None, headers: dict | None = None) -> tuple[int, bytes]:
    try:
        conn.request(method, path, body=body, headers=headers or {})
        response = conn.getresponse()
        return response.status, response.read()
    except (http.client.HTTPException, ConnectionError):
        # The server may close a connection after refusing a body: reconnect, ask again.
        conn.close()
        conn.request(method, path, body=body, headers=headers or {})
        response = conn.getresponse()
        return response.status, response.read()


def check(status: int, body: bytes) -> None:
    assert status < 500, (status, body[:500])
    if status >= 400:
        assert isinstance(json.loads(body)["error"], str), body[:500]


@FUZZ
@given(model=st.sampled_from(MODELS), doc=infer_doc)
def test_infer_never_500s_on_malformed_requests(conn, model, doc):
    status, body = request(conn, "POST", f"/v2/models/{model}/infer", json.dumps(doc).encode())
    check(status, body)


@FUZZ
@given(
    model=st.sampled_from(MODELS[:2]),
    body=st.binary(max_size=300),
    header=st.none()
    | st.integers(min_value=-5, max_value=400).map(str)
    | st.text(st.characters(codec="ascii", categories=["L", "N", "P"]), min_size=1, max_size=5),
)
def test_infer_never_500s_on_malformed_bytes_and_header_lengths(conn, model, body, header):
    headers = {} if header is None else {"Inference-Header-Content-Length": header}
    status, answer = request(conn, "POST", f"/v2/models/{model}/infer", body, headers)
    check(status, answer)
    assert status == 400  # nothing random is a valid request


@FUZZ
@given(
    method=st.sampled_from(["GET", "POST", "PUT", "DELETE"]),
    path=st.sampled_from(["/v2", "/v2/models/rest-xgb", "/v2/repository/index", "/v2/models/stats", "/"]).flatmap(
        lambda base: st.text(st.characters(codec="ascii", categories=["L", "N"]), max_size=12).map(
            lambda tail: f"{base}/{tail}" if tail else base
        )
    ),
    body=st.none() | json_values.map(lambda v: json.dumps(v).encode()),
)
def test_any_route_and_method_never_500s(conn, method, path, body):
    status, answer = request(conn, method, path, body)
    check(status, answer)


def test_oversized_bodies_are_413_declared_or_streamed(rest_predictor, conn):
    big = b"{" + b" " * REST_MAX_BODY + b"}"
    status, body = request(conn, "POST", "/v2/models/rest-xgb/infer", big)
    assert status == 413 and "over the limit" in json.loads(body)["error"]
    conn.close()
    # Chunked, with no Content-Length: refused once the stream passes the limit.
    chunks = (big[i : i + 65536] for i in range(0, len(big), 65536))
    conn.request("POST", "/v2/models/rest-xgb/infer", body=chunks, encode_chunked=True)
    response = conn.getresponse()
    assert response.status == 413 and "over the limit" in json.loads(response.read())["error"]
    conn.close()
