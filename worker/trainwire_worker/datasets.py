"""Reading a rank's shard on workers (declarative trainers use no Ray Data)."""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from trainwire_core.datasets import ShardSpec, open_dataset


def read_shard(spec: ShardSpec) -> pa.Table:
    """Reads this rank's block of rows; every row lands on exactly one rank."""
    table = open_dataset(spec.uri, spec.format).to_table()
    bounds = np.linspace(0, table.num_rows, spec.world_size + 1).astype(int)
    start, stop = bounds[spec.rank], bounds[spec.rank + 1]
    shard = table.slice(start, stop - start)
    if spec.preprocessor:
        import cloudpickle

        df = cloudpickle.loads(spec.preprocessor).transform_batch(shard.to_pandas())
        shard = pa.Table.from_pandas(df, preserve_index=False)
    return shard
