"""``ray.train.v2.api``: the module paths Ray Train V2's docs import (``data_parallel_trainer``, ``exceptions``)."""
