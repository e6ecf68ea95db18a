"""The one table of frameworks: every row is consistent with the classes it names, and every component reads it."""

from __future__ import annotations

import subprocess
import sys

import pytest

from trainwire import frameworks
from trainwire.checkpoint import Checkpoint
from trainwire.errors import InvalidArgumentError
from trainwire.predictor import Predictor
from trainwire.trainer import BaseTrainer

ALL = list(frameworks.frameworks().values())


def test_the_table_holds_every_trainer_of_ray_train():
    assert frameworks.names() == sorted(
        ["huggingface", "horovod", "lightgbm", "rllib", "sklearn", "tensorflow", "torch", "xgboost"]
    )


@pytest.mark.parametrize("declared", ALL, ids=lambda f: f.name)
def test_each_row_names_classes_that_agree_with_it(declared):
    trainer, backend = declared.trainer_class(), declared.backend_class()
    assert issubclass(trainer, BaseTrainer) and trainer.framework == declared.name
    assert trainer.checkpoint_cls is declared.checkpoint_class()
    assert issubclass(declared.checkpoint_class(), Checkpoint)
    assert issubclass(declared.predictor_class(), Predictor)
    assert backend.name == declared.name


@pytest.mark.parametrize("declared", ALL, ids=lambda f: f.name)
def test_the_worker_runs_what_the_table_names(declared):
    from trainwire_worker.backends import get_backend

    assert type(get_backend(declared.name)) is declared.backend_class()


def test_an_unknown_framework_is_refused_naming_the_field():
    from trainwire_worker.backends import get_backend

    with pytest.raises(InvalidArgumentError) as info:
        get_backend("caffe")
    assert info.value.field == "framework"
    assert "huggingface" in info.value.message


def test_model_files_written_by_trainers_and_workers_come_from_the_table():
    from trainwire.lightgbm import trainer as lightgbm_trainer
    from trainwire.xgboost.trainer import XGBoostCheckpoint
    from trainwire_worker.backends import lightgbm, sklearn, xgboost

    table = frameworks.frameworks()
    assert XGBoostCheckpoint.MODEL_FILENAME == xgboost.MODEL_FILENAME == table["xgboost"].model_file
    assert lightgbm.MODEL_FILENAME == table["lightgbm"].model_file
    assert lightgbm_trainer.MODEL_FILENAME == table["lightgbm"].model_file
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
    from trainwire.storage import MANIFEST_NAME, Store
    from trainwire_predictor.model_repository import detect_framework

    store = Store(f"file://{tmp_path}")
    for name in files:
        store.write_bytes(f"{store.root}/ckpt/{name}", b"x")
    store.write_json(f"{store.root}/ckpt/{MANIFEST_NAME}", {"framework": manifest_framework, "files": []})
    assert detect_framework(store, f"{store.root}/ckpt") == expected


def test_reading_the_table_imports_no_framework():
    code = (
        "import sys; from trainwire import frameworks; frameworks.frameworks(); "
        "heavy = {'torch', 'tensorflow', 'xgboost', 'lightgbm', 'sklearn', 'transformers', 'ray'}; "
        "print(sorted(heavy & set(sys.modules)))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
