"""An attacker with a ``predict`` token against the language-model routes: no stall, no INTERNAL, no held slot.

A real predictor (gRPC and REST on loopback) serves a tiny GPT-2 committed to a store of
its own, with small limits (batch 2, waiting 2, a 6 s timeout). Each abuse is sent as it
was found: a 5 MB prompt on every protocol while the health route is timed, text and
deeply nested gRPC parameters, gRPC streams cancelled after their first token, and
hypothesis-drawn parameter maps. After all of it the predictor answers a normal request
and its log holds no traceback.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Iterator
from typing import Any

import grpc
import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from language_model import make_tokenizer, tiny_gpt2

from trainwire_core.inference import grpc_service_pb2 as pb
from trainwire_core.inference import grpc_service_pb2_grpc as pb_grpc

pytestmark = pytest.mark.timeout(300)

MODEL = "abuse-lm"
TOKEN = "abuse-predict"
AUTH = {"authorization": f"Bearer {TOKEN}"}
GRPC_AUTH = (("authorization", f"Bearer {TOKEN}"),)
BIG_PROMPT = "the cat sat on the mat " * (5_000_000 // 23)  # 5 MB
TIMEOUT_S = 6.0
CONTEXT = 1024
MAX_TOKENS = 900


class _Tracebacks(logging.Handler):
    """Keeps every log record that carries an exception (a traceback in the log)."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        if record.exc_info or "Traceback" in record.getMessage():
            self.records.append(record)


@pytest.fixture(scope="module")
def tracebacks() -> Iterator[_Tracebacks]:
    handler = _Tracebacks()
    # uvicorn's loggers do not propagate to the root: watched on their own.
    loggers = [logging.getLogger(), logging.getLogger("uvicorn"), logging.getLogger("uvicorn.error")]
    for logger in loggers:
        logger.addHandler(handler)
    yield handler
    for logger in loggers:
        logger.removeHandler(handler)


@pytest.fixture(scope="module")
def server(tmp_path_factory, tracebacks) -> Iterator[Any]:
    """A predictor with small generation limits serving a tiny language model from its own store."""
    from trainwire.config import CheckpointConfig
    from trainwire.huggingface.checkpoint import HuggingFaceCheckpoint
    from trainwire_coordinator.execution.checkpoint_manager import CheckpointManager
    from trainwire_core.storage import Store
    from trainwire_predictor.server import PredictorThread
    from trainwire_predictor.settings import PredictorSettings

    root = tmp_path_factory.mktemp("abuse-store")
    store = Store(root.as_uri())
    tokenizer = make_tokenizer()
    # 1,024 positions: a greedy generation runs long enough (no end-of-text token) to be cancelled mid-way.
    ckpt = HuggingFaceCheckpoint.from_model(tiny_gpt2(tokenizer, n_positions=CONTEXT, n_embd=128), tokenizer)
    manager = CheckpointManager(store, "abuse-run", MODEL, CheckpointConfig())
    files = store.upload_dir(ckpt.path, store.checkpoint_dir("abuse-run", "c1"))
    manager.commit("c1", 1, {"index": 1}, files)
    thread = PredictorThread(
        PredictorSettings(
            port=0,
            http_port=0,
            store=store.uri,
            tokens=json.dumps({"web": {"token": TOKEN, "scopes": ["predict"]}}),
            generate_max_batch=2,
            generate_max_waiting=2,
            generate_timeout_s=TIMEOUT_S,
            generate_max_tokens=MAX_TOKENS,
            index_refresh_s=0.2,
        )
    )
    thread.start()
    try:
        r = httpx.post(f"http://{thread.server.http_address}/v2/models/{MODEL}/generate", json=_ok(), headers=AUTH)
        assert r.status_code == 200, r.text  # loads the model and starts its engine
        yield thread.server
    finally:
        thread.stop()


@pytest.fixture(scope="module")
def base_url(server) -> str:
    return f"http://{server.http_address}"


@pytest.fixture(scope="module")
def stub(server) -> Iterator[pb_grpc.GRPCInferenceServiceStub]:
    channel = grpc.insecure_channel(server.address, options=[("grpc.max_send_message_length", 64 << 20)])
    yield pb_grpc.GRPCInferenceServiceStub(channel)
    channel.close()


def _ok(max_tokens: int = 4) -> dict[str, Any]:
    return {"text_input": "the cat", "parameters": {"max_tokens": max_tokens}}


def _engine(server: Any) -> Any:
    return next(m.generation_engine for m in server.models._cache.values() if m.generation_engine)


def _bytes_tensor(name: str, value: bytes) -> tuple[pb.ModelInferRequest.InferInputTensor, bytes]:
    tensor = pb.ModelInferRequest.InferInputTensor(name=name, datatype="BYTES", shape=[1])
    return tensor, len(value).to_bytes(4, "little") + value


def generate_request(prompt: str, sampling: str | None = None, **parameters: Any) -> pb.ModelInferRequest:
    """A Triton-style generate request: ``text_input``, ``stream``, optional ``sampling_parameters``."""
    inputs = [_bytes_tensor("text_input", prompt.encode())]
    stream = pb.ModelInferRequest.InferInputTensor(name="stream", datatype="BOOL", shape=[1])
    inputs.append((stream, b"\x01"))
    if sampling is not None:
        inputs.append(_bytes_tensor("sampling_parameters", sampling.encode()))
    params = {}
    for key, value in parameters.items():
        if isinstance(value, bool):
            params[key] = pb.InferParameter(bool_param=value)
        elif isinstance(value, int):
            params[key] = pb.InferParameter(int64_param=value)
        elif isinstance(value, float):
            params[key] = pb.InferParameter(double_param=value)
        else:
            params[key] = pb.InferParameter(string_param=str(value))
    return pb.ModelInferRequest(
        model_name=MODEL,
        inputs=[t for t, _ in inputs],
        raw_input_contents=[raw for _, raw in inputs],
        parameters=params,
    )


def stream_answers(
    stub: pb_grpc.GRPCInferenceServiceStub, request: pb.ModelInferRequest, timeout: float = 30
) -> list[pb.ModelStreamInferResponse]:
    return list(stub.ModelStreamInfer(iter([request]), metadata=GRPC_AUTH, timeout=timeout))


def _error(answer: pb.ModelStreamInferResponse) -> tuple[str, str]:
    params = answer.infer_response.parameters
    return params["error_code"].string_param, params["error_field"].string_param


class _HealthProbe:
    """Times ``GET /v2/health/live`` over and over from its own thread until stopped."""

    def __init__(self, base_url: str) -> None:
        self.base_url = base_url
        self.latencies: list[float] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        with httpx.Client(timeout=30) as http:
            while not self._stop.is_set():
                started = time.perf_counter()
                assert http.get(f"{self.base_url}/v2/health/live").status_code == 200
                self.latencies.append(time.perf_counter() - started)
                time.sleep(0.01)

    def __enter__(self) -> _HealthProbe:
        self._thread.start()
        time.sleep(0.2)
        return self

    def __exit__(self, *exc: object) -> None:
        time.sleep(0.2)
        self._stop.set()
        self._thread.join(30)


def test_a_huge_prompt_is_refused_while_health_keeps_answering(base_url, stub):
    with _HealthProbe(base_url) as probe:
        for path, body, field in [
            ("/v1/completions", {"model": MODEL, "prompt": BIG_PROMPT}, "prompt"),
            (
                "/v1/chat/completions",
                {"model": MODEL, "messages": [{"role": "user", "content": BIG_PROMPT}]},
                "messages",
            ),
        ]:
            r = httpx.post(f"{base_url}{path}", json=body, headers=AUTH, timeout=60)
            assert r.status_code == 400, r.text[:300]
            assert r.json()["error"]["param"] == field
            assert r.json()["error"]["type"] == "invalid_request_error"
            assert "over the limit" in r.json()["error"]["message"]
        r = httpx.post(
            f"{base_url}/v2/models/{MODEL}/generate", json={"text_input": BIG_PROMPT}, headers=AUTH, timeout=60
        )
        assert r.status_code == 400 and "text_input" in r.json()["error"], r.text[:300]
        (answer,) = stream_answers(stub, generate_request(BIG_PROMPT))
        assert _error(answer) == ("INVALID_ARGUMENT", "inputs.text_input")
    # Tokenizing the 5 MB once took seconds on the event loop; now nothing waits for it.
    assert len(probe.latencies) > 10
    assert max(probe.latencies) < 0.5, sorted(probe.latencies)[-5:]


def test_a_prompt_within_the_characters_but_over_the_context_names_its_tokens(base_url):
    prompt = "the cat sat on the mat " * 1000  # within 32 characters a position, far past 1,024 tokens
    r = httpx.post(f"{base_url}/v1/completions", json={"model": MODEL, "prompt": prompt}, headers=AUTH, timeout=60)
    assert r.status_code == 400, r.text
    assert (
        r.json()["error"]["param"] == "prompt"
        and f"tokens, over the limit of {CONTEXT}" in r.json()["error"]["message"]
    )


@pytest.mark.parametrize(
    ("sampling", "parameters", "field"),
    [
        (None, {"timeout_s": "soon"}, "parameters.timeout_s"),
        (None, {"max_tokens": "many"}, "parameters.max_tokens"),
        ('{"timeout_s": "soon"}', {}, "inputs.sampling_parameters.timeout_s"),
        ("[" * 10_000 + "]" * 10_000, {}, "inputs.sampling_parameters"),
        ('{"a": ' * 5_000 + "1" + "}" * 5_000, {}, "inputs.sampling_parameters"),
        ("not json", {}, "inputs.sampling_parameters"),
        ('{"temperature": 1e999}', {}, "inputs.sampling_parameters.temperature"),
        ('{"seed": ' + "9" * 40 + "}", {}, "inputs.sampling_parameters.seed"),
    ],
)
def test_bad_grpc_parameters_are_invalid_argument_naming_the_field(stub, sampling, parameters, field):
    (answer,) = stream_answers(stub, generate_request("the cat", sampling, **parameters))
    assert _error(answer) == ("INVALID_ARGUMENT", field), answer.error_message
    # The unary call answers the same with its status.
    with pytest.raises(grpc.RpcError) as err:
        stub.ModelInfer(generate_request("the cat", sampling, **parameters), metadata=GRPC_AUTH, timeout=30)
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert field in err.value.details()


def test_cancelled_grpc_streams_free_their_slots_at_the_next_step(server, stub):
    engine = _engine(server)
    calls = []
    for prompt in ("the cat", "the dog"):
        request = generate_request(prompt, max_tokens=MAX_TOKENS, timeout_s=TIMEOUT_S)
        call = stub.ModelStreamInfer(iter([request]), metadata=GRPC_AUTH, timeout=60)
        first = next(call)
        assert not first.error_message and first.infer_response.outputs
        calls.append(call)
    # A first token is sent as its sequence joins the batch: wait for the join itself.
    deadline = time.monotonic() + 10
    while engine.active < 2 and time.monotonic() < deadline:
        time.sleep(0)
    assert engine.active == 2
    cancelled = list(engine._active)
    for call in calls:
        call.cancel()
    # The moment the server has both cancels, then the decode steps until both have left.
    while not all(seq.generation.cancelled.is_set() for seq in list(engine._active)) and time.monotonic() < deadline:
        time.sleep(0)
    steps_at_cancel = engine.steps
    while engine.active and time.monotonic() < deadline:
        time.sleep(0)
    assert engine.active == 0 and engine.steps - steps_at_cancel <= 2, engine.steps - steps_at_cancel
    assert all(len(seq.tokens) < MAX_TOKENS / 2 for seq in cancelled)  # they left, they did not finish
    started = time.monotonic()
    answers = stream_answers(stub, generate_request("the dog", max_tokens=1))
    assert not answers[0].error_message and answers[-1].infer_response.parameters["triton_final_response"].bool_param
    assert time.monotonic() - started < TIMEOUT_S / 2  # it waited for no deadline


def test_a_closed_rest_stream_frees_its_slot_at_the_next_step(server, base_url):
    engine = _engine(server)
    body = {"model": MODEL, "prompt": "the cat", "max_tokens": MAX_TOKENS, "temperature": 0, "stream": True}
    with httpx.Client(timeout=30) as http:
        with http.stream("POST", f"{base_url}/v1/completions", json=body, headers=AUTH) as r:
            lines = r.iter_lines()
            assert any(next(lines).startswith("data: ") for _ in range(6))
            deadline = time.monotonic() + 10
            while engine.active < 1 and time.monotonic() < deadline:
                time.sleep(0)
            assert engine.active == 1
            (generating,) = list(engine._active)
        # The connection is closed: the server sees it, then the sequence leaves at the next step.
        deadline = time.monotonic() + 10
        while not generating.generation.cancelled.is_set() and time.monotonic() < deadline:
            time.sleep(0)
        steps_at_close = engine.steps
        while engine.active and time.monotonic() < deadline:
            time.sleep(0)
    assert engine.active == 0 and engine.steps - steps_at_close <= 2
    assert len(generating.tokens) < MAX_TOKENS / 2  # it left; it did not run to its length


def test_openai_errors_are_openai_types(base_url):
    r = httpx.post(
        f"{base_url}/v1/completions",
        content=b"x" * (65 << 20),
        headers={**AUTH, "content-type": "application/json"},
        timeout=60,
    )
    assert r.status_code == 413
    assert r.json()["error"]["type"] == "invalid_request_error"


def test_a_deadline_has_its_own_finish_reason_that_the_openai_client_parses(base_url):
    import openai

    client = openai.OpenAI(base_url=f"{base_url}/v1", api_key=TOKEN, max_retries=0)
    answer = client.completions.create(
        model=MODEL, prompt="the cat", max_tokens=MAX_TOKENS, extra_body={"timeout_s": 0.001}
    )
    assert answer.choices[0].finish_reason == "deadline"
    chat = client.chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": "hi"}], max_tokens=3, temperature=0
    )
    assert chat.choices[0].finish_reason in ("length", "stop")


JSON_SCALARS = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**80), max_value=2**80)
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(max_size=20)
)
JSON_VALUES = st.recursive(
    JSON_SCALARS, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3)
)
FIELDS = st.sampled_from(
    ["max_tokens", "temperature", "top_p", "seed", "stop", "timeout_s", "n", "routing_key", "max_completion_tokens"]
)
PARAMETER_MAPS = st.dictionaries(FIELDS, JSON_VALUES, max_size=5)


def _json_text(doc: dict[str, Any]) -> str:
    return json.dumps(doc, allow_nan=True)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(params=PARAMETER_MAPS, nesting=st.integers(min_value=0, max_value=3000))
def test_generated_parameters_never_reach_internal(base_url, stub, params, nesting):
    params.setdefault("max_tokens", 2)  # a valid example stays short
    sampling = _json_text(params) if nesting < 2000 else "[" * nesting + "]" * nesting
    answers = stream_answers(stub, generate_request("the cat", sampling))
    for answer in answers:
        if answer.error_message:
            code, _ = _error(answer)
            assert code in ("INVALID_ARGUMENT", "RESOURCE_EXHAUSTED"), answer.error_message
    body = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], **params}
    r = httpx.post(f"{base_url}/v1/chat/completions", content=_json_text(body), headers=AUTH, timeout=60)
    assert r.status_code < 500, r.text[:300]
    if r.status_code == 200:
        assert r.json()["choices"][0]["finish_reason"] in ("stop", "length", "deadline")
    # A normal request is answered after each example.
    r = httpx.post(f"{base_url}/v2/models/{MODEL}/generate", json=_ok(2), headers=AUTH, timeout=60)
    assert r.status_code == 200, r.text


def test_nothing_left_a_traceback(base_url, tracebacks):
    r = httpx.post(f"{base_url}/v2/models/{MODEL}/generate", json=_ok(), headers=AUTH, timeout=60)
    assert r.status_code == 200
    assert [(r.name, r.getMessage(), r.exc_info and r.exc_info[1]) for r in tracebacks.records] == [], "\n".join(
        logging.Formatter().format(r) for r in tracebacks.records
    )
