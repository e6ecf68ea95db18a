"""``trainwire.train.tensorflow.prepare_dataset_shard``: a worker's shard is not sharded again by TensorFlow."""

from __future__ import annotations

import pytest

tf = pytest.importorskip("tensorflow")


def test_auto_sharding_is_off_and_the_data_is_unchanged():
    from trainwire.train.tensorflow import prepare_dataset_shard

    shard = tf.data.Dataset.from_tensor_slices({"x": [1.0, 2.0, 3.0]}).batch(2)
    prepared = prepare_dataset_shard(shard)
    assert prepared.options().experimental_distribute.auto_shard_policy == tf.data.experimental.AutoShardPolicy.OFF
    assert [b["x"].numpy().tolist() for b in prepared] == [[1.0, 2.0], [3.0]]
