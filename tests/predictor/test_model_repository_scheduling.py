"""A model repository's ``config.pbtxt`` scheduling applied as Triton applies it.

``max_batch_size``, ``dynamic_batching`` (``max_queue_delay_microseconds``, ``preferred_batch_size``)
and ``instance_group`` (count, kind) are read from a real model folder by ``ModelDirectory`` and
the model is driven through the predictor's real ``Batcher`` with the server's policy lookup.
The model is a counting stand-in for the file's framework, so each setting shows in counts: the
rows of each model call, and how many calls ran at once. None of the checks rests on a timing.
"""

from __future__ import annotations

import asyncio
import pathlib
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

from trainwire.predictor import Predictor
from trainwire_core.errors import FailedPreconditionError, InvalidArgumentError
from trainwire_core.inference import grpc_service_pb2 as pb
from trainwire_core.inference.codec import to_raw
from trainwire_predictor.batching import Batcher, parse_batching
from trainwire_predictor.grpc.codec import request_from_proto
from trainwire_predictor.model_repository import describe
from trainwire_predictor.model_repository_dir import ModelDirectory
from trainwire_predictor.model_repository_dir import repository as repository_module
from trainwire_predictor.models import LoadedModel, ModelRef

pytestmark = pytest.mark.timeout(60)


class Counting(Predictor):
    """Doubles column "a", noting each call's rows and the most calls at once; batch invariant, as a tree model."""

    batch_invariant = True

    def __init__(self, hold_s: float = 0.0) -> None:
        super().__init__(None, ["a"])
        self.hold_s = hold_s
        self.calls: list[int] = []
        self.running = self.most = 0
        self._lock = threading.Lock()

    def _predict_numpy(self, data: np.ndarray, **kwargs) -> np.ndarray:
        with self._lock:
            self.calls.append(len(data))
            self.running += 1
            self.most = max(self.most, self.running)
        try:
            if self.hold_s:
                time.sleep(self.hold_s)  # long enough for every other request to reach the gate
            return data[:, 0] * 2
        finally:
            with self._lock:
                self.running -= 1


def load(tmp_path: pathlib.Path, config: str | None, monkeypatch, hold_s: float = 0.0) -> tuple[Counting, LoadedModel]:
    """A model folder (an XGBoost file and ``config``) loaded by ``ModelDirectory`` as the counting model."""
    folder = tmp_path / "repo" / "m" / "1"
    folder.mkdir(parents=True)
    (folder / "model.json").write_text("{}")
    if config is not None:
        (tmp_path / "repo" / "m" / "config.pbtxt").write_text(config)
    predictor = Counting(hold_s)
    monkeypatch.setattr(repository_module, "load_model", lambda *args: predictor)
    directory = ModelDirectory(str(tmp_path / "repo"))
    directory.refresh()
    directory.read("m")
    framework, loaded = directory.load("m", "1")
    assert loaded is predictor
    inputs, outputs = describe(predictor)
    predictor.calls.clear()
    return predictor, LoadedModel(ModelRef("m", "m", "1"), framework, predictor, inputs, outputs)


def request(rows: int, rid: str) -> pb.ModelInferRequest:
    arr = np.arange(rows, dtype=np.float64)
    req = pb.ModelInferRequest(model_name="m", id=rid)
    req.inputs.add(name="a", datatype="FP64", shape=arr.shape)
    req.raw_input_contents.append(to_raw(arr))
    return request_from_proto(req)


def run(model: LoadedModel, rows: list[int], threads: int = 4) -> list:
    """The requests at once through a Batcher with the server's policy lookup (no operator setting)."""

    async def go():
        with ThreadPoolExecutor(threads) as pool:
            batcher = Batcher(pool, batching=parse_batching(""))
            return await asyncio.gather(
                *(batcher.infer(request(n, str(i)), model) for i, n in enumerate(rows)), return_exceptions=True
            )

    return asyncio.run(go())


def config(max_batch_size: int, batching: str | None = None, count: int = 0) -> str:
    """A FIL config.pbtxt; ``batching``: the dynamic_batching block's fields (None: no block)."""
    text = f'backend: "fil"\nmax_batch_size: {max_batch_size}\n'
    text += 'input [ { name: "a" data_type: TYPE_FP64 dims: [ 1 ] } ]\n'
    text += 'parameters [ { key: "model_type" value: { string_value: "xgboost" } } ]\n'
    if batching is not None:
        text += f"dynamic_batching {{ {batching} }}\n"
    if count:
        text += f"instance_group [ {{ count: {count} kind: KIND_CPU }} ]\n"
    return text


def test_without_a_config_pbtxt_the_predictor_joins_a_tree_models_requests_while_busy(tmp_path, monkeypatch) -> None:
    predictor, model = load(tmp_path, None, monkeypatch)
    assert predictor.batch_invariant and not hasattr(predictor, "scheduling")
    results = run(model, [1] * 8)
    assert all(r.outputs[0][1].tolist() == [0.0] for r in results)
    assert sum(predictor.calls) == 8 and len(predictor.calls) < 8  # joined: fewer calls than requests


def test_without_dynamic_batching_each_request_is_its_own_call_of_at_most_max_batch_size_rows(
    tmp_path, monkeypatch
) -> None:
    predictor, model = load(tmp_path, config(4), monkeypatch)
    assert not predictor.batch_invariant and not predictor.scheduling.dynamic_batching
    results = run(model, [1] * 8 + [4, 5])
    assert sorted(predictor.calls) == [1] * 8 + [4]  # no call joins requests; the 5-row one never runs
    assert isinstance(results[-1], InvalidArgumentError)
    assert "batch-size must be <= 4" in str(results[-1]) and "max_batch_size" in str(results[-1])
    assert results[-2].outputs[0][1].tolist() == [0.0, 2.0, 4.0, 6.0]


def test_max_batch_size_caps_the_rows_joined_in_one_call(tmp_path, monkeypatch) -> None:
    # A delay far beyond the test: a call starts only when its queue holds max_batch_size rows.
    predictor, model = load(tmp_path, config(4, "max_queue_delay_microseconds: 600000000"), monkeypatch)
    results = run(model, [1] * 8)
    assert predictor.calls == [4, 4]
    assert [r.id for r in results] == [str(i) for i in range(8)]


def test_max_queue_delay_decides_whether_a_request_waits_for_others(tmp_path, monkeypatch) -> None:
    waiting, model = load(tmp_path / "a", config(4, "max_queue_delay_microseconds: 600000000"), monkeypatch)
    run(model, [1] * 4)
    assert waiting.calls == [4]  # the first request waited for the other three
    eager, model = load(tmp_path / "b", config(4, "max_queue_delay_microseconds: 0"), monkeypatch)
    run(model, [1] * 4)
    assert eager.calls == [1, 3]  # the first went at once; the rest joined while it ran


def test_a_preferred_batch_size_starts_a_call_at_once(tmp_path, monkeypatch) -> None:
    delay = "max_queue_delay_microseconds: 600000000"
    preferred, model = load(tmp_path / "a", config(4, f"{delay} preferred_batch_size: [ 2 ]", count=2), monkeypatch)
    run(model, [1] * 4)
    assert preferred.calls == [2, 2]
    plain, model = load(tmp_path / "b", config(4, delay, count=2), monkeypatch)
    run(model, [1] * 4)
    assert plain.calls == [4]


@pytest.mark.parametrize("count", [1, 2, 3])
def test_instance_group_count_is_the_most_calls_at_once(tmp_path, monkeypatch, count: int) -> None:
    predictor, model = load(tmp_path, config(4, count=count), monkeypatch, hold_s=0.15)
    run(model, [1] * 6, threads=6)
    assert predictor.calls == [1] * 6 and predictor.most == count


def test_instance_group_count_bounds_dynamic_batching_calls_too(tmp_path, monkeypatch) -> None:
    predictor, model = load(tmp_path, config(2, "max_queue_delay_microseconds: 0", count=2), monkeypatch, hold_s=0.15)
    run(model, [1] * 8, threads=6)
    assert sum(predictor.calls) == 8 and max(predictor.calls) <= 2 and predictor.most == 2


def test_parse_reads_scheduling_and_refuses_what_cannot_apply(tmp_path) -> None:
    from trainwire_predictor.model_repository_dir import parse_triton

    settings = parse_triton(
        "max_batch_size: 16\ndynamic_batching { preferred_batch_size: [4, 8] max_queue_delay_microseconds: 300 }\n"
        "instance_group [ { count: 2 kind: KIND_CPU }, { kind: KIND_AUTO } ]",
        "m/config.pbtxt",
    )
    s = settings.scheduling
    assert (s.max_batch_size, s.dynamic_batching, s.max_queue_delay_us, s.preferred_batch_sizes, s.instances) == (
        16,
        True,
        300,
        (4, 8),
        3,
    )
    assert parse_triton('platform: "onnxruntime_onnx"', "m/config.pbtxt").scheduling.instances == 0
    for text, says in (
        ("max_batch_size: 8\ninstance_group [ { count: 1 kind: KIND_GPU } ]", "instance_group[0].kind is KIND_GPU"),
        ("dynamic_batching { }", "dynamic_batching needs max_batch_size > 0"),
        ("max_batch_size: 4\ndynamic_batching { preferred_batch_size: [8] }", "preferred_batch_size 8"),
        ("max_batch_size: -1", "max_batch_size must not be negative"),
    ):
        with pytest.raises(FailedPreconditionError) as caught:
            parse_triton(text, "m/config.pbtxt")
        assert says in caught.value.message and "m/config.pbtxt" in caught.value.message, caught.value.message
