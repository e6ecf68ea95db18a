"""``trainwire.air.constants`` names what a trainwire checkpoint holds, so Ray 2.4's doc code finds it."""

from __future__ import annotations

import os
import pickle

from trainwire import Checkpoint
from trainwire.air.constants import MODEL_KEY, PREPROCESSOR_KEY
from trainwire.checkpoint import PREPROCESSOR_NAME


def test_joining_the_checkpoint_dir_with_preprocessor_key_opens_the_saved_preprocessor():
    ckpt = Checkpoint.from_dict({MODEL_KEY: [1.0, 2.0], PREPROCESSOR_KEY: {"fitted": "scaler"}})
    with ckpt.as_directory() as checkpoint_dir:
        # Ray 2.4's doc code: the preprocessor file by its key.
        with open(os.path.join(checkpoint_dir, PREPROCESSOR_KEY), "rb") as f:
            assert pickle.load(f) == {"fitted": "scaler"}
    assert PREPROCESSOR_KEY == PREPROCESSOR_NAME  # the one name the predictor and coordinator use
    back = ckpt.to_dict()
    assert back[PREPROCESSOR_KEY] == {"fitted": "scaler"} and back[MODEL_KEY] == [1.0, 2.0]


def test_a_preprocessor_written_under_the_key_is_the_checkpoints_preprocessor(tmp_path):
    # Ray 2.4's doc code writing a directory checkpoint by hand.
    with open(os.path.join(tmp_path, PREPROCESSOR_KEY), "wb") as f:
        pickle.dump({"fitted": "encoder"}, f)
    assert Checkpoint.from_directory(tmp_path).get_preprocessor() == {"fitted": "encoder"}


def test_ray_24s_literal_key_is_still_taken_by_from_dict():
    ckpt = Checkpoint.from_dict({"_preprocessor": {"fitted": "old"}, "epoch": 1})
    assert ckpt.get_preprocessor() == {"fitted": "old"}
    assert "_preprocessor" not in ckpt.to_dict()
