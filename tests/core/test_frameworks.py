"""The one table of frameworks: every row is consistent with the classes it names, and every component reads it."""

from __future__ import annotations

import subprocess
import sys

import pytest

from trainwire.checkpoint import Checkpoint
from trainwire.predictor import Predictor
from trainwire.trainer import BaseTrainer
from trainwire_core import frameworks
from trainwire_core.errors import InvalidArgumentError

ALL = list(frameworks.frameworks().values())


def test_the_table_holds_every_trainer_of_ray_train():
    assert frameworks.names() == sorted(
        [
            "data_parallel",
            "huggingface",
            "horovod",
            "jax",
            "lightgbm",
            "rllib",
            "sklearn",
            "tensorflow",
            "torch",
            "xgboost",
        ]
    )


@pytest.mark.parametrize("declared", ALL, ids=lambda f: f.name)
def test_each_row_names_classes_that_agree_with_it(declared):
    trainer = declared.trainer_class()
    assert issubclass(trainer, BaseTrainer) and trainer.framework == declared.name
    assert trainer.checkpoint_cls is declared.checkpoint_class()
    assert issubclass(declared.checkpoint_class(), Checkpoint)
    assert issubclass(declared.predictor_class(), Predictor)


@pytest.mark.parametrize("declared", ALL, ids=lambda f: f.name)
def test_the_worker_and_the_coordinator_each_have_their_half(declared):
    from trainwire_coordinator.backends import CoordinatorBackend
    from trainwire_coordinator.backends import get_backend as coordinator_half
    from trainwire_worker.actor import WorkerBackend
    from trainwire_worker.actor import get_backend as worker_half

    worker, coordinator = worker_half(declared.name), coordinator_half(declared.name)
    assert isinstance(worker, WorkerBackend) and worker.framework is declared and declared.module
    assert isinstance(coordinator, CoordinatorBackend) and coordinator.name == declared.name


def test_the_coordinator_registers_every_framework_and_the_worker_only_those_with_code_of_their_own():
    from importlib.metadata import entry_points

    from trainwire_worker.actor import DataParallelBackend
    from trainwire_worker.actor import get_backend as worker_half

    coordinator = sorted(ep.name for ep in entry_points(group=frameworks.COORDINATOR_BACKENDS_GROUP))
    assert coordinator == frameworks.names()
    worker = sorted(ep.name for ep in entry_points(group=frameworks.WORKER_BACKENDS_GROUP))
    assert worker == ["lightgbm", "rllib", "sklearn", "xgboost"]  # the declarative trainers
    for name in set(frameworks.names()) - set(worker):  # the user's loop, set up by the coordinator's half
        assert type(worker_half(name)) is DataParallelBackend


@pytest.mark.parametrize("side", ["worker", "coordinator"])
def test_an_unknown_framework_is_refused_naming_the_field(side):
    from trainwire_coordinator.backends import get_backend as coordinator_half
    from trainwire_worker.actor import get_backend as worker_half

    with pytest.raises(InvalidArgumentError) as info:
        (worker_half if side == "worker" else coordinator_half)("caffe")
    assert info.value.field == "framework"
    assert "huggingface" in info.value.message


def test_model_files_written_by_trainers_and_workers_come_from_the_table():
    from trainwire.lightgbm import checkpoint as lightgbm_checkpoint
    from trainwire.xgboost.checkpoint import XGBoostCheckpoint
    from trainwire_worker.backends import lightgbm, sklearn, xgboost

    table = frameworks.frameworks()
    assert XGBoostCheckpoint.MODEL_FILENAME == xgboost.MODEL_FILENAME == table["xgboost"].model_file
    assert lightgbm.MODEL_FILENAME == table["lightgbm"].model_file
    assert lightgbm_checkpoint.MODEL_FILENAME == table["lightgbm"].model_file
    assert sklearn.MODEL_FILENAME == table["sklearn"].model_file


@pytest.mark.parametrize(
    ("files", "manifest_framework", "expected"),
    [
        (["model.ubj"], "xgboost", "xgboost"),
        (["model.pt"], "horovod", "horovod"),
        (["model.txt"], "", "lightgbm"),  # an upload: its model file tells
        (["checkpoint/config.json"], "torch", "huggingface"),  # a torch loop that saved a Transformers model
        (["policy/x"], "rllib", "rllib"),  # a folder checkpoint: the manifest tells
    ],
)
def test_the_predictor_tells_a_checkpoints_framework_from_the_table(tmp_path, files, manifest_framework, expected):
    from trainwire_core.storage import MANIFEST_NAME, Store
    from trainwire_predictor.model_repository import detect_framework

    store = Store(f"file://{tmp_path}")
    for name in files:
        store.write_bytes(f"{store.root}/ckpt/{name}", b"x")
    store.write_json(f"{store.root}/ckpt/{MANIFEST_NAME}", {"framework": manifest_framework, "files": []})
    assert detect_framework(store, f"{store.root}/ckpt") == expected


def test_reading_the_table_imports_no_framework():
    code = (
        "import sys; from trainwire_core import frameworks; frameworks.frameworks(); "
        "heavy = {'torch', 'tensorflow', 'xgboost', 'lightgbm', 'sklearn', 'transformers', 'ray'}; "
        "print(sorted(heavy & set(sys.modules)))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
