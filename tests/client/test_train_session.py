"""The session base both transports share: what a report carries to the transport, checked and numbered once."""

from __future__ import annotations

import threading
import time

import pytest

from trainwire.checkpoint import Checkpoint
from trainwire.train.session import Report, ReportingSession, TrainContext
from trainwire.train.v2 import CheckpointUploadMode, ValidationConfig, ValidationTaskConfig
from trainwire_core.errors import InvalidArgumentError


class Recording(ReportingSession):
    """A transport that keeps what it is handed."""

    def __init__(self, rank: int = 0, next_report_index: int = 7) -> None:
        context = TrainContext(
            "run", "run", world_rank=rank, world_size=2, local_rank=0, local_world_size=1, node_rank=0
        )
        super().__init__(context, None, {"train": [1, 2]}, next_report_index)
        self.delivered: list[Report] = []

    def _deliver(self, report: Report) -> None:
        self.delivered.append(report)


def test_reports_are_numbered_from_the_given_index_and_checkpoints_named_after_it(tmp_path):
    session = Recording()
    session.report({"a": 1})
    session.report({"a": 2}, checkpoint=Checkpoint.from_directory(str(tmp_path)))
    session.report({"a": 3}, checkpoint=Checkpoint.from_directory(str(tmp_path)), checkpoint_dir_name="best")
    assert [r.index for r in session.delivered] == [7, 8, 9]
    assert [r.checkpoint_id for r in session.delivered] == ["", "checkpoint_000008", "best"]
    assert session.delivered[1].mode is CheckpointUploadMode.SYNC


def test_a_bad_report_never_reaches_the_transport_nor_takes_a_number(tmp_path):
    session = Recording()
    with pytest.raises(InvalidArgumentError) as info:
        session.report({"a": 1}, checkpoint=Checkpoint.from_directory(str(tmp_path)), checkpoint_dir_name="../x")
    assert info.value.field == "checkpoint_dir_name"
    session.report({"a": 1})
    assert [r.index for r in session.delivered] == [7]


def test_only_rank_zero_validates(tmp_path):
    for rank, expected in [(0, True), (1, False)]:
        session = Recording(rank)
        session.validation_config = ValidationConfig(lambda checkpoint: {"val": 1})
        session.report({"a": 1}, checkpoint=Checkpoint.from_directory(str(tmp_path)), validation=True)
        assert session.delivered[0].validation is expected


def test_validation_metrics_inline_and_with_a_timeout(tmp_path):
    session = Recording()
    checkpoint = Checkpoint.from_directory(str(tmp_path))
    session.validation_config = ValidationConfig(lambda c: {"thread": threading.current_thread().name})
    assert session._validation_metrics(checkpoint, True) == {"thread": threading.current_thread().name}
    assert session._validation_metrics(checkpoint, True, timeout=True) == {"thread": "trainwire-validate"}
    session.validation_config = ValidationConfig(lambda c: [1])
    with pytest.raises(TypeError, match="must return a dict"):
        session._validation_metrics(checkpoint, True)
    session.validation_config = ValidationConfig(lambda c: time.sleep(5))
    with pytest.raises(TimeoutError):
        session._validation_metrics(checkpoint, ValidationTaskConfig(timeout_s=0.1), timeout=True)


def test_an_upload_function_must_return_a_checkpoint(tmp_path):
    session = Recording()
    session.report({"a": 1}, checkpoint=Checkpoint.from_directory(str(tmp_path)), checkpoint_upload_fn=lambda c, n: n)
    with pytest.raises(InvalidArgumentError) as info:
        session._upload_with_fn(session.delivered[0])
    assert info.value.field == "checkpoint_upload_fn"


def test_an_unknown_dataset_names_the_known_ones():
    session = Recording()
    assert session.get_dataset_shard("train") == [1, 2]
    with pytest.raises(InvalidArgumentError, match=r"datasets: train"):
        session.get_dataset_shard("valid")
